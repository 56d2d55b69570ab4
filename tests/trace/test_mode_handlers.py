"""neurarch's dispatch modes keep their handlers as written.

torch wraps the ``__torch_dispatch__`` of every ``TorchDispatchMode`` subclass in
``torch._disable_dynamo`` (keeping torch.compile out of its frames) unless the class
says not to: a few microseconds on every op each mode sees.  A simulation, the trace
and the cost count compile nothing, so each of neurarch's modes says not to.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

from neurarch.cost.counter import OpCounter
from neurarch.fake.gaps import FakeGaps
from neurarch.fake.tensors import ValueMode
from neurarch.plan.tracker import LiveTracker


def _wrapped(cls) -> bool:
    return hasattr(cls.__dict__["__torch_dispatch__"], "__wrapped__")


def test_neurarch_modes_handlers_are_not_wrapped():
    class Plain(TorchDispatchMode):  # a mode that does not say so: this torch wraps its handler
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    assert _wrapped(Plain)
    for cls in (LiveTracker, FakeGaps, ValueMode, OpCounter):
        assert not _wrapped(cls), cls.__name__
