"""Move a meta-device module onto fake tensors, and run it there.

A module built under ``torch.device("meta")`` has the right shapes but no
storage; ops on meta tensors give shapes, but meta is a device of its own, so
code that checks ``x.device.type`` takes odd branches.  We turn every
parameter and buffer into a ``FakeTensor`` that reports the device we want
(CPU by default) while owning no memory, keeping shared (tied) tensors shared.

Fake tensors carry shapes, not values.  Model code sometimes needs a value:
``int(mask.sum())`` to count image tokens, ``x[mask]`` whose length depends
on the mask, ``positions.max().item()``.  Those values almost always come
from the *inputs* (token ids, masks, grids), not from the weights.  So
:class:`ValueMode` keeps a small real tensor next to each fake tensor whose
value is computable: the integer inputs are made real, and every op whose
inputs all have values (and whose output is small) is also run for real on
the CPU.  A data-dependent op then reads the real value instead of failing.
Values never come from weights, which stay fake, so no memory is spent on
them.

:class:`ValueMode` also patches the few meta kernels that are stricter than
the real ones (``_grouped_mm``'s meta kernel accepts bfloat16 only, the CUDA
rule; shapes do not depend on the dtype).
"""

from __future__ import annotations

import logging

import torch
from torch import nn
from torch._subclasses.fake_tensor import DynamicOutputShapeException, FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import arg_tree_leaves, tree_flatten, tree_map

aten = torch.ops.aten

# Largest tensor (elements) whose real value we keep: token ids, masks,
# positions and grids are far smaller; a seq x seq attention mask is not kept.
VALUE_LIMIT = 1 << 20


def new_mode() -> FakeTensorMode:
    # allow_non_fake_inputs: real constants created inside library code
    # (a torch.tensor(...) of a scale, say) are lifted instead of refused.
    return FakeTensorMode(allow_non_fake_inputs=True)


def quiet_fake_logs() -> None:
    """FakeTensorMode logs a traceback for every meta kernel that fails; we report the error ourselves."""
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)


def to_fake(model: nn.Module, mode: FakeTensorMode, device: torch.device | str = "cpu") -> None:
    """Replace, in place, every meta parameter/buffer of ``model`` by a fake one.

    Plain tensor attributes (``self.scale = torch.tensor(...)`` that is not a
    registered buffer) are converted too: left on meta they would meet fake
    tensors and fail.
    """
    device = torch.device(device)
    conv = mode.fake_tensor_converter
    memo: dict[int, torch.Tensor] = {}

    def fake(t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, FakeTensor):
            return t
        if t.device.type != "meta":
            return mode.from_tensor(t)
        return conv.from_meta_and_device(mode, t, device)

    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                memo[id(p)] = nn.Parameter(fake(p.data), requires_grad=p.requires_grad)
            mod._parameters[name] = memo[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = fake(b)
            mod._buffers[name] = memo[id(b)]
        for name, v in list(vars(mod).items()):
            if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter) and v.device.type == "meta":
                if id(v) not in memo:
                    memo[id(v)] = fake(v)
                object.__setattr__(mod, name, memo[id(v)])


_MUTATING: dict = {}
_ATTR = "_neurarch_value"  # the real value, kept as an attribute of the fake tensor (lives as long as it)


def _is_mutating(func) -> bool:
    m = _MUTATING.get(func)
    if m is None:
        schema = getattr(func, "_schema", None)
        m = schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
        _MUTATING[func] = m
    return m


def _grouped_mm_shape(a: torch.Tensor, b: torch.Tensor, offs) -> list[int]:
    """Output shape of ``torch._grouped_mm`` (the rule of its meta kernel)."""
    if a.dim() == 2:
        return [offs.size(0), a.size(0), b.size(1)] if b.dim() == 2 else [a.size(0), b.size(-1)]
    return [a.size(1), b.size(1)] if b.dim() == 2 else [a.size(0), a.size(1), b.size(-1)]


_GROUPED_MM = {getattr(aten, n).default for n in ("_grouped_mm", "grouped_mm") if hasattr(aten, n)}
_INDEXING = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
_LOCAL_SCALAR = aten._local_scalar_dense.default


class ValueMode(TorchDispatchMode):
    """Keeps real values beside small fake tensors, so data-dependent code runs.

    Enter it *inside* the FakeTensorMode (``with fake_mode, ValueMode(fake_mode):``)
    so it sees each op first.  :meth:`real` registers a real tensor as a fake
    input whose value is known.
    """

    def __init__(self, fake_mode: FakeTensorMode, limit: int = VALUE_LIMIT):
        super().__init__()
        self.fake_mode = fake_mode
        self.limit = limit
        self.functions = _TensorFromValues(self)  # enter it too: torch.tensor([t0, t1]) of fake scalars

    # -- values ---------------------------------------------------------
    def real(self, t: torch.Tensor) -> torch.Tensor:
        """A fake tensor for real ``t``, whose value is remembered."""
        f = self.fake_mode.from_tensor(t)
        setattr(f, _ATTR, t)
        return f

    def value(self, t) -> torch.Tensor | None:
        if isinstance(t, FakeTensor):
            return getattr(t, _ATTR, None)
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            return t  # a real constant is its own value
        return None

    def _have_values(self, args, kwargs) -> bool:
        """Whether every tensor argument has a (small enough) value."""
        for x in arg_tree_leaves(*args, **kwargs):
            if isinstance(x, torch.Tensor):
                v = self.value(x)
                if v is None or v.numel() > self.limit:
                    return False
        return True

    def _run_real(self, func, args, kwargs):
        if not self._have_values(args, kwargs):
            return None
        real = tree_map(lambda x: self.value(x) if isinstance(x, torch.Tensor) else x, (args, kwargs))
        try:
            with _disable_current_modes():
                return func(*real[0], **real[1])
        except Exception:
            return None

    def _remember(self, out, real) -> None:
        fo, _ = tree_flatten(out)
        ro, _ = tree_flatten(real)
        if len(fo) != len(ro):
            return
        for f, r in zip(fo, ro):
            if isinstance(f, FakeTensor) and isinstance(r, torch.Tensor) and tuple(f.shape) == tuple(r.shape):
                setattr(f, _ATTR, r)

    def _to_fake(self, real):
        def conv(r):
            if not isinstance(r, torch.Tensor):
                return r
            f = self.fake_mode.from_tensor(r)
            setattr(f, _ATTR, r)
            return f

        return tree_map(conv, real)

    # -- special ops ----------------------------------------------------
    def _expand_bool_indices(self, func, args, kwargs):
        """``x[mask]``: replace a boolean index whose value is known by its integer positions."""
        indices = args[1]
        if not isinstance(indices, (list, tuple)):
            return args
        new, changed = [], False
        for ix in indices:
            if isinstance(ix, torch.Tensor) and ix.dtype == torch.bool:
                v = self.value(ix)
                if v is not None:
                    with _disable_current_modes():
                        positions = v.nonzero().unbind(1)
                    new.extend(self._to_fake(p) for p in positions)
                    changed = True
                    continue
            new.append(ix)
        if not changed:
            return args
        return (args[0], new, *args[2:])

    def _grouped_mm(self, args, kwargs):
        a, b = args[0], args[1]
        offs = kwargs.get("offs", args[2] if len(args) > 2 else None)
        out_dtype = kwargs.get("out_dtype", args[4] if len(args) > 4 else None) or a.dtype
        return torch.empty(_grouped_mm_shape(a, b, offs), dtype=out_dtype, device=a.device)

    # -- dispatch -------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _LOCAL_SCALAR:
            v = self.value(args[0])
            if v is not None:
                with _disable_current_modes():
                    return v.item()
            return func(*args, **kwargs)  # raises DataDependentOutputException: no value known
        if func in _GROUPED_MM:
            return self._grouped_mm(args, kwargs)
        if func in _INDEXING:
            args = self._expand_bool_indices(func, args, kwargs)
        try:
            out = func(*args, **kwargs)
        except DynamicOutputShapeException:
            # nonzero, unique, masked_select...: the output's size is its inputs' values.
            real = self._run_real(func, args, kwargs)
            if real is None:
                raise
            return self._to_fake(real)
        real = None
        if self._have_values(args, kwargs):
            flat_out, _ = tree_flatten(out)
            if all(not isinstance(o, torch.Tensor) or o.numel() <= self.limit for o in flat_out):
                real = self._run_real(func, args, kwargs)
        if real is not None:
            self._remember(out, real)
        elif _is_mutating(func):
            # The op changed a tensor whose value we could not follow: forget it.
            for x in arg_tree_leaves(*args, **kwargs):
                if isinstance(x, FakeTensor) and hasattr(x, _ATTR):
                    delattr(x, _ATTR)
        return out


_FROM_DATA = {torch.tensor, torch.as_tensor, torch.Tensor.new_tensor}


class _TensorFromValues(TorchFunctionMode):
    """``torch.tensor([a, b])`` of fake 0-d tensors reads their data in C++, which fake
    tensors do not have: hand it their known values instead."""

    def __init__(self, values: ValueMode):
        super().__init__()
        self.values = values

    def _concrete(self, data):
        if isinstance(data, FakeTensor) and data.dim() == 0:
            v = self.values.value(data)
            if v is not None:
                with _disable_current_modes():
                    return v.item()
            return data
        if isinstance(data, (list, tuple)):
            return type(data)(self._concrete(x) for x in data)
        return data

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _FROM_DATA:
            i = 1 if func is torch.Tensor.new_tensor else 0
            if len(args) > i and isinstance(args[i], (list, tuple)):
                args = (*args[:i], self._concrete(args[i]), *args[i + 1 :])
        return func(*args, **kwargs)
