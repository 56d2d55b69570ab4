"""Patch the few places where fake tensors refuse what real kernels accept.

A fake tensor op runs the op's *meta* kernel, which computes the output's
shape and dtype.  A handful of meta kernels check more than the real CPU
kernel does.  :class:`FakeGaps` is a dispatch mode stacked above
FakeTensorMode that answers those ops itself, with an output of exactly the
shape, dtype and layout the real kernel returns, so the memory tracker above
it sees the same allocation.

Each entry says why it is here:

* ``aten._grouped_mm`` (MoE experts in transformers >= 5): the meta kernel
  (torch/_meta_registrations.py, ``_meta_grouped_mm``) insists on bfloat16,
  while the CPU kernel multiplies float32 too.  We run the meta kernel on
  bfloat16 stand-ins and give the output the caller's dtype.  This is the
  failure torch's MemTracker has on fp32 MoE models.
* ``aten._local_scalar_dense`` (``.item()``) inside ``optimizer.step()`` only:
  torch.optim.Adafactor reads its step counter with ``.item()``; a fake
  tensor has no value.  The counter only scales the update, never a size, so
  we answer 1.  Outside the optimizer a value-dependent size is an error the
  caller sees.

And one for speed, not a gap: ``aten._unsafe_view`` (matmul's reshape of its
output) is answered as ``aten.view``.  FakeTensorMode answers both with the same
function and the same result (a tensor on the input's storage), but never caches
``_unsafe_view``, so each one paid the full dispatch (a few hundred times a
training step); ``aten.view`` is cached.  Below autograd, where this
mode sits, the two ops differ in nothing else.

And one above the dispatcher, in transformers: :func:`unpacked_sequences`.
"""

from __future__ import annotations

import contextlib

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_map_only

from . import direct
from .hits import MISS, cached
from .tensors import PlainHandlerMode

aten = torch.ops.aten


def _grouped_mm(func, args, kwargs):
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    dtype = tensors[0].dtype if tensors else torch.bfloat16
    if dtype == torch.bfloat16:
        return func(*args, **kwargs)

    # Stand-ins: views re-typed without copying are not possible across sizes,
    # so build bf16 fakes of the same shape/stride (no storage is real).
    def stand_in(t: torch.Tensor) -> torch.Tensor:
        if t.dtype.is_floating_point:
            return torch.empty_strided(t.shape, t.stride(), dtype=torch.bfloat16, device=t.device)
        return t

    out = func(*tree_map_only(torch.Tensor, stand_in, args), **tree_map_only(torch.Tensor, stand_in, kwargs))
    out_dtype = kwargs.get("out_dtype") or dtype
    return torch.empty_strided(out.shape, out.stride(), dtype=out_dtype, device=out.device)


_FIXES = {}
_UNSAFE_VIEW = aten._unsafe_view.default
if hasattr(aten, "_grouped_mm"):
    _FIXES[aten._grouped_mm.default] = _grouped_mm


@contextlib.contextmanager
def unpacked_sequences():
    """Tell transformers' mask code that our batches are not packed.

    In training (no cache, no attention mask) transformers looks for several
    sequences packed into one row (masking_utils.find_packed_sequence_indices):
    on real tensors it reads the position ids and, finding 0..n-1, answers
    "not packed" so SDPA runs with ``is_causal`` and no mask tensor.  A fake
    tensor has no values and counts as "tracing", so it answers "maybe packed"
    and every layer builds a full mask tensor that the real step never makes.
    Our batches are one sequence per row, so we give the real answer.
    """
    try:
        from transformers import masking_utils
    except ImportError:
        yield
        return
    original = getattr(masking_utils, "find_packed_sequence_indices", None)
    if original is None:
        yield
        return

    def find_packed_sequence_indices(position_ids):
        if isinstance(position_ids, FakeTensor):
            return None
        return original(position_ids)

    masking_utils.find_packed_sequence_indices = find_packed_sequence_indices
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


class FakeGaps(PlainHandlerMode):
    """Answer the ops whose meta kernels are stricter than the real ones.

    ``in_optimizer`` is switched on by the training loop's observer while
    ``optimizer.step()`` runs.
    """

    def __init__(self):
        super().__init__()
        self.in_optimizer = False
        # The FakeTensorMode right below, where the caller knows it (the simulation's tracker,
        # which runs these answers in its own handler, and the cost count, where this mode sits
        # on it): a cache hit is answered without the trip through the dispatcher
        # (neurarch.fake.hits.cached, which checks the mode stack itself).
        self.fake = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.answer(func, args, kwargs)

    def answer(self, func, args=(), kwargs=None):
        """Run ``func`` as the mode would: also for a mode above that answers in its stead
        (:class:`~neurarch.plan.tracker.LiveTracker`: one dispatch frame less per op)."""
        kwargs = kwargs or {}
        if func is _UNSAFE_VIEW:
            func = aten.view.default
        if self.fake is not None:
            out = direct.answer(self.fake, func, args, kwargs)  # the optimizer's per-parameter ops (neurarch.fake.direct)
            if out is not MISS:
                return out
        if self.in_optimizer and func is aten._local_scalar_dense.default:
            try:
                return func(*args, **kwargs)
            except Exception:  # no value behind a fake tensor: see the module doc
                t = args[0]
                return True if t.dtype == torch.bool else (1.0 if t.dtype.is_floating_point else 1)
        fix = _FIXES.get(func)
        if fix is not None:
            return fix(func, args, kwargs)
        if self.fake is not None:
            out = cached(self.fake, func, args, kwargs)
            if out is not MISS:
                return out
        return func(*args, **kwargs)
