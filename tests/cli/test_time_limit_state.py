"""A --timeout that fires mid-trace must leave torch as it found it.

The alarm can fire inside a context manager's ``__enter__`` after it has set a
switch (``no_grad``, a default dtype, a meta-device or fake-tensor mode pushed)
and before its ``with`` block began; then no ``__exit__`` runs.  A process that
goes on (a library caller, the test suite) would otherwise run every later
backward pass without gradients.  The body below sets those switches itself
and is interrupted there, as such an ``__enter__`` would be.
"""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from neurarch.errors import TraceTimeout
from neurarch.jobs import time_limit


class _Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_an_alarm_inside_a_context_managers_enter_leaves_torch_as_it_was():
    assert torch.is_grad_enabled() and torch.get_default_dtype() is torch.float32
    functions, dispatch = torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()
    with pytest.raises(TraceTimeout, match="took longer than 0.05 s"):
        with time_limit(0.05, "the trace"):
            torch.set_grad_enabled(False)
            torch.set_default_dtype(torch.float64)
            torch.device("meta").__enter__()
            _Mode().__enter__()
            time.sleep(5)
    assert torch.is_grad_enabled()
    assert torch.get_default_dtype() is torch.float32
    assert (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()) == (functions, dispatch)
    x = torch.ones(2, requires_grad=True)
    assert x.device.type == "cpu" and (x * 2).sum().requires_grad
