"""Three ops the optimizer makes per parameter, answered as FakeTensorMode answers them.

A training step's optimizer works parameter by parameter, and on fake tensors three of
its ops cost far more than their work, every simulation again (they are never served
from FakeTensor's dispatch cache):

* ``aten._local_scalar_dense`` (``.item()``) of a tensor with a known value: Adam reads
  each parameter's step counter (``_get_value(step)``).  FakeTensorMode answers it from
  the tensor's ``constant`` (its constant-propagation path: the op on the constant, no
  dispatch); here the same call, without the cache lookup that bypasses and the trip
  through its handler.
* ``aten.lift_fresh`` of a plain CPU tensor (``torch.tensor(0.0)``: Adam's step
  counter, made per parameter): FakeTensorMode's path for a lift with no fake input
  (the op on the real tensor, a clone where the result may be a constant, converted
  with ``make_constant=True``), called directly.
* ``aten._foreach_sqrt`` (Adam's ``exp_avg_sq.sqrt()`` for every parameter at once):
  FakeTensorMode runs the op on meta tensors, whose kernel is the per-tensor ``sqrt``
  for each (foreach ops have no meta kernel of their own: the composite slow path), and
  wraps each output on its input's device.  Here each output is ``aten.sqrt`` of its
  input under FakeTensorMode, which its dispatch cache answers after the first time.

:func:`answer` is called by :class:`neurarch.fake.gaps.FakeGaps` where FakeTensorMode is
the only mode below it (the simulation's tracker runs the gaps' answers in its handler);
anything else returns :data:`~neurarch.fake.hits.MISS` and the op runs as before.
``tests/trace/test_direct.py`` compares each answer with FakeTensorMode's own, and a
simulation with and without them.  ``ANSWER = False`` turns them off.
"""

from __future__ import annotations

import logging

import torch
from torch._subclasses import fake_tensor as _ft
from torch.utils._mode_utils import no_dispatch

from .hits import MISS, cached

aten = torch.ops.aten
_LOCAL_SCALAR = aten._local_scalar_dense.default
_LIFT = aten.lift_fresh.default
_FOREACH_UNARY = {aten._foreach_sqrt.default: aten.sqrt.default}
_FakeTensor = _ft.FakeTensor
_Tensor = torch.Tensor
_stack_len = torch._C._len_torch_dispatch_stack
_fake_mode_now = torch._C._get_dispatch_mode
_FAKE_KEY = torch._C._TorchDispatchModeKey.FAKE
_log = _ft.log

ANSWER = True  # False: every such op through FakeTensorMode's handler (what the tests compare with)


def _ours(mode, t) -> bool:
    return type(t) is _FakeTensor and t.fake_mode is mode and not t._has_symbolic_sizes_strides


def answer(mode, func, args, kwargs):
    """``func(*args, **kwargs)`` as FakeTensorMode ``mode`` (the only mode below the caller's
    handler) answers it, for the three ops above; :data:`MISS` for anything else."""
    if func is not _LOCAL_SCALAR and func is not _LIFT and func not in _FOREACH_UNARY:
        return MISS
    if not ANSWER or kwargs or _stack_len() != 1 or _fake_mode_now(_FAKE_KEY) is not mode or mode.shape_env is not None or _log.isEnabledFor(logging.DEBUG):
        return MISS
    if func is _LOCAL_SCALAR:
        if len(args) != 1 or not _ours(mode, args[0]) or args[0].constant is None:
            return MISS
        with no_dispatch():
            return func(args[0].constant)
    if func is _LIFT:
        if len(args) != 1 or type(args[0]) is not _Tensor or args[0].requires_grad:
            return MISS
        with no_dispatch():
            out = func(args[0])
            if type(out) is not _Tensor or not mode.may_turn_const(out):
                return MISS
            out = out.clone()
        return mode.fake_tensor_converter.from_real_tensor(mode, out, make_constant=True)
    # an out-of-place foreach op of one tensor list
    if len(args) != 1 or not isinstance(args[0], (list, tuple)) or not args[0]:
        return MISS
    tensors = args[0]
    if not all(_ours(mode, t) and t.constant is None and t.layout is torch.strided for t in tensors):
        return MISS
    one = _FOREACH_UNARY[func]
    outs = []
    for t in tensors:
        out = cached(mode, one, (t,), {})
        outs.append(one(t) if out is MISS else out)
    return outs
