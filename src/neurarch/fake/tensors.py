"""Move a meta-device module onto fake tensors, and run it there.

A module built under ``torch.device("meta")`` has the right shapes but no
storage; ops on meta tensors give shapes, but meta is a device of its own, so
code that checks ``x.device.type`` takes odd branches.  :func:`to_fake` turns
every parameter and buffer into a ``FakeTensor`` that reports the device we
want (CPU by default) while owning no memory, keeping shared (tied) tensors
shared.  Small buffers that the build made for real (see
:func:`neurarch.build.small_on_cpu`) keep their values.

Fake tensors carry shapes, not values.  Model code sometimes needs a value:
``int(mask.sum())`` to count image tokens, ``x[mask]`` whose length depends
on the mask, ``positions.max().item()``.  Those values almost always come
from the *inputs* (token ids, masks, grids) and small buffers, not from the
weights.  So :class:`ValueMode` keeps a small real tensor next to each fake
tensor whose value is computable: the integer inputs are made real, and
every op whose inputs all have values (and whose output is small, or is a
view) is also run for real on the CPU.  A data-dependent op then reads the
real value instead of failing.  Weights stay fake: no memory is spent on them.

When a data-dependent op needs a value that comes from the weights (MoE
routing, a predicted duration), :meth:`ValueMode.materialize` recomputes it
from the op that made it, taking the weight-dependent inputs as seeded noise;
the ops where noise stood in are counted in ``ValueMode.guessed``.

The rest patches what fake tensors cannot do but real ones can, without
changing any shape: ``_grouped_mm``'s meta kernel accepts bfloat16 only (the
CUDA rule), ``torch.tensor([t0, t1])``/``f"{t}"``/``x[rows, cols]`` read 0-d
tensors' data in C++, ``copy.deepcopy`` swaps storages, ``module.to(dtype)``
swaps parameters in place.  Run passes under ``values.running()``.
"""

from __future__ import annotations

import contextlib
import logging

import torch
from torch import nn
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import arg_tree_leaves, tree_flatten, tree_map

from .hits import MISS, cached

aten = torch.ops.aten

# Largest tensor (elements) whose real value we keep: token ids, masks,
# positions and grids are far smaller; a 2048 x 2048 attention mask just fits.
VALUE_LIMIT = 1 << 22


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

    def fake(t: torch.Tensor, keep_value: bool = False) -> torch.Tensor:
        if isinstance(t, FakeTensor):
            return t
        if t.device.type != "meta":
            f = mode.from_tensor(t)
            if keep_value and t.numel() <= VALUE_LIMIT:
                setattr(f, _ATTR, t)  # a real buffer (built small on the CPU): ValueMode reads it
            return f
        return conv.from_meta_and_device(mode, t, device)

    from .convert import swap_weights

    swap_weights(model, fake, lambda b: fake(b, keep_value=True), memo)
    for mod in model.modules():
        for name, v in list(vars(mod).items()):
            if isinstance(v, torch.Tensor) and not isinstance(v, (nn.Parameter, FakeTensor)):
                if id(v) not in memo:
                    memo[id(v)] = fake(v, keep_value=True)
                object.__setattr__(mod, name, memo[id(v)])


_MUTATING: dict = {}
_ATTR = "_neurarch_value"  # the real value, kept as an attribute of the fake tensor (lives as long as it)
_SRC = "_neurarch_source"  # (op, args, kwargs, output index) that made a small fake tensor without a value


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
_DEVICE = torch.ops.prim.device.default


def device_query(func, args) -> torch.device | None:
    """The answer to ``t.device`` on a fake tensor, or None where ``func`` is another op.

    ``t.device`` is an op on a fake tensor (prim.device): two of every three ops a
    training step dispatches (autograd's engine and the optimizer ask every tensor).
    It makes and changes nothing; FakeTensorMode answers it with the tensor's fake
    device outside a kernel's invocation (torch's ``_device_handler``), which is
    what this returns, so a mode above can answer it without the trip through the
    modes below (none of which acts on it)."""
    if func is _DEVICE and len(args) == 1:
        t = args[0]
        if isinstance(t, FakeTensor) and not t.fake_mode.in_kernel_invocation:
            return t.fake_device
    return None


class PlainHandlerMode(TorchDispatchMode):
    """A dispatch mode whose handler torch leaves as written.

    torch wraps the ``__torch_dispatch__`` of every dispatch-mode class in
    ``torch._disable_dynamo`` (keeping torch.compile out of its frames) unless the
    class says not to: a few microseconds on every op the mode sees.  neurarch's
    modes (the simulation's tracker, the trace's value mode, the fake-tensor gaps,
    the cost count's op counter) compile nothing, so they derive from this one."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


class ValueMode(PlainHandlerMode):
    """Keeps real values beside small fake tensors, so data-dependent code runs.

    Enter it *inside* the FakeTensorMode, with its function shims: use
    ``with values.running():``.  :meth:`real` registers a real tensor as a fake
    input whose value is known.  Other passes over the same fake model (cost,
    memory) should run under ``running()`` too, with ``plan.make(values)``.
    """

    def __init__(self, fake_mode: FakeTensorMode, limit: int = VALUE_LIMIT, guess: bool = True):
        super().__init__()
        self.fake_mode = fake_mode
        self.limit = limit
        # guess=False: values only from the inputs and small buffers, computed exactly;
        # nothing recomputed from the weights as noise, and no op's arguments kept
        # (a memory simulation must see every tensor freed where the real run frees it).
        self.guess = guess
        self.functions = _TensorFromValues(self)  # enter it too: torch.tensor([t0, t1]) of fake scalars
        self.guessed: dict[str, int] = {}  # op -> how many of its outputs were taken as random (see materialize)
        self._gen = torch.Generator().manual_seed(0)

    @contextlib.contextmanager
    def running(self):
        """Everything a forward/backward on the fake model needs, in the right order:
        ``with values.running(): model(**plan.make(values))``."""
        with convertible_modules(), self.fake_mode, self, self.functions:
            yield

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

    def materialize(self, t, depth: int = 0) -> torch.Tensor | None:
        """A value for ``t`` even when it depends on the weights.

        Data-dependent code whose values come from the weights (MoE routing:
        how many tokens each expert gets; a predicted duration) cannot be
        known without weights.  We recompute ``t`` from the op that made it,
        recursively; an op that reads a weight (or a big activation, or any
        tensor we know nothing about) gives random noise (fixed seed) instead:
        routing then spreads tokens over experts as random logits would, and
        everything computed from that noise by cheap ops is exact.  Weights
        and big tensors are never materialised.  ``guessed`` counts the ops
        whose outputs were taken as noise.
        """
        v = self.value(t)
        if v is not None or not self.guess or not isinstance(t, FakeTensor) or t.numel() > self.limit:
            return v
        src = getattr(t, _SRC, None)
        r = self._recompute(t, src, depth) if src is not None and depth < 48 else None
        if r is None:
            r = self._noise(t)
            name = str(src[0]) if src is not None else "input"
            self.guessed[name] = self.guessed.get(name, 0) + 1
        setattr(t, _ATTR, r)
        return r

    def _recompute(self, t, src, depth: int) -> torch.Tensor | None:
        """``t`` from its op, when every input has (or can be given) a value; else None."""
        func, args, kwargs, index = src
        ok = True

        def sub(x):
            nonlocal ok
            if not ok or not isinstance(x, torch.Tensor):
                return x
            v = self.value(x)
            if v is None and isinstance(x, FakeTensor) and hasattr(x, _SRC) and x.numel() <= self.limit:
                v = self.materialize(x, depth + 1)
            ok = v is not None
            return v

        real = tree_map(sub, (args, kwargs))
        if not ok:
            return None
        try:
            with _disable_current_modes():
                out = func(*real[0], **real[1])
        except Exception:
            return None
        r = tree_flatten(out)[0][index]
        return r if isinstance(r, torch.Tensor) and tuple(r.shape) == tuple(t.shape) else None

    def _noise(self, t: torch.Tensor) -> torch.Tensor:
        with _disable_current_modes():
            if t.dtype.is_floating_point:
                return torch.randn(t.shape, generator=self._gen).to(t.dtype)
            if t.dtype == torch.bool:
                return torch.randint(0, 2, t.shape, generator=self._gen).bool()
            return torch.zeros(t.shape, dtype=t.dtype)  # ints index things: 0 is always in range

    def _note_source(self, func, args, kwargs, out) -> None:
        if not self.guess:
            return
        for i, o in enumerate(tree_flatten(out)[0]):
            if isinstance(o, FakeTensor) and o.numel() <= self.limit and not hasattr(o, _ATTR):
                setattr(o, _SRC, (func, args, kwargs, i))

    def _have_values(self, args, kwargs, view: bool = False) -> bool:
        """Whether every tensor argument has a value (small enough, unless ``view``: a view costs nothing)."""
        for x in arg_tree_leaves(*args, **kwargs):
            if isinstance(x, torch.Tensor):
                v = self.value(x)
                if v is None or (v.numel() > self.limit and not view):
                    return False
        return True

    def _run_real(self, func, args, kwargs, guess: bool = False):
        """Run ``func`` on the inputs' values (materialised when ``guess``); None if some have none."""
        if guess:
            missing = False

            def get(x):
                nonlocal missing
                v = self.materialize(x)
                missing = missing or v is None
                return v

            real = tree_map(lambda x: get(x) if isinstance(x, torch.Tensor) else x, (args, kwargs))
            if missing:
                return None
        else:
            if not self._have_values(args, kwargs, view=getattr(func, "is_view", False)):
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
                v = self.materialize(ix)
                if v is not None:
                    if v.numel() <= self.limit:
                        with _disable_current_modes():
                            positions = v.nonzero().unbind(1)
                        new.extend(self._to_fake(p) for p in positions)
                    else:
                        # A big mask (an expanded view): only the count matters for the shapes.
                        count = _count_true(v)
                        new.extend(torch.empty(count, dtype=torch.long, device=ix.device) for _ in range(v.dim()))
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
        device = device_query(func, args)
        if device is not None:  # a device query keeps no value and leaves none: answered here
            return device
        kwargs = kwargs or {}
        if func is _LOCAL_SCALAR:
            v = self.materialize(args[0])
            if v is not None:
                with _disable_current_modes():
                    return v.item()
            return func(*args, **kwargs)  # raises DataDependentOutputException: no value known
        if func in _GROUPED_MM:
            return self._grouped_mm(args, kwargs)
        if func in _INDEXING:
            args = self._expand_bool_indices(func, args, kwargs)
        try:
            # a hit of FakeTensorMode's cache, where it is right below (neurarch.fake.hits), else the op
            out = cached(self.fake_mode, func, args, kwargs)
            if out is MISS:
                out = func(*args, **kwargs)
        except DynamicOutputShapeException:
            # nonzero, unique, masked_select...: the output's size is its inputs' values.
            real = self._run_real(func, args, kwargs, guess=True)
            if real is None:
                raise
            return self._to_fake(real)
        real = None
        view = getattr(func, "is_view", False)  # expand/unsqueeze/slice of a known value: free, whatever its size
        if self._have_values(args, kwargs, view=view):
            flat_out, _ = tree_flatten(out)
            if view or all(not isinstance(o, torch.Tensor) or o.numel() <= self.limit for o in flat_out):
                real = self._run_real(func, args, kwargs)
        if real is not None:
            self._remember(out, real)
        elif _is_mutating(func):
            # The op changed a tensor whose value we could not follow: forget it.
            for x in arg_tree_leaves(*args, **kwargs):
                if isinstance(x, FakeTensor):
                    for attr in (_ATTR, _SRC):
                        if hasattr(x, attr):
                            delattr(x, attr)
        else:
            self._note_source(func, args, kwargs, out)
        return out


def needs_value(e: BaseException) -> bool:
    """Whether ``e`` (or what caused it) is a fake tensor asked for its value (``.item()``,
    a data-dependent output size): code that runs under :class:`ValueMode`."""
    cur: BaseException | None = e
    for _ in range(8):
        if cur is None:
            return False
        if isinstance(cur, (DataDependentOutputException, DynamicOutputShapeException)):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _count_true(mask: torch.Tensor) -> int:
    """How many elements of a boolean tensor are true, without materialising an
    expanded view: the dims it repeats (stride 0) multiply the count of one slice."""
    repeat = 1
    index = []
    for d in range(mask.dim()):
        if mask.stride(d) == 0 and mask.size(d) > 1:
            repeat *= mask.size(d)
            index.append(slice(0, 1))
        else:
            index.append(slice(None))
    with _disable_current_modes():
        return int(mask[tuple(index)].sum()) * repeat


_FROM_DATA = {torch.tensor, torch.as_tensor, torch.Tensor.new_tensor}


class _TensorFromValues(TorchFunctionMode):
    """Python-level calls that read a fake tensor's data: ``torch.tensor([a, b])`` of fake
    0-d tensors (read in C++) and ``f"{t}"``; hand them the known values instead."""

    def __init__(self, values: ValueMode):
        super().__init__()
        self.values = values

    def _concrete(self, data):
        if isinstance(data, FakeTensor) and data.dim() == 0:
            v = self.values.materialize(data)
            if v is not None:
                with _disable_current_modes():
                    return v.item()
            return data
        if isinstance(data, (list, tuple)):
            return type(data)(self._concrete(x) for x in data)
        return data

    def _deepcopy(self, t: FakeTensor, memo: dict) -> torch.Tensor:
        """``copy.deepcopy`` of a fake tensor (a cache copied per loop): torch's own
        deepcopy swaps storages, which a fake tensor's meta storage refuses."""
        if id(t) in memo:
            return memo[id(t)]
        with torch.no_grad():
            new = t.clone()
        if t.is_leaf and t.requires_grad:
            new.requires_grad_(True)
        v = self.values.value(t)
        if v is not None:
            with _disable_current_modes():
                setattr(new, _ATTR, v.clone())
        memo[id(t)] = new
        return new

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.__format__ and isinstance(args[0], FakeTensor) and args[0].dim() == 0:
            # f"expert_{idx}" of a 0-d tensor: a real tensor formats its value
            v = self.values.materialize(args[0])
            if v is not None:
                with _disable_current_modes():
                    return v.item().__format__(*args[1:])
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and len(args) > 1:
            # x[rows, cols] with rows a tuple of 0-d tensors: torch reads their data in C++.
            idx = args[1]
            parts = idx if isinstance(idx, tuple) else (idx,)
            if any(isinstance(p, (list, tuple)) for p in parts):
                parts = tuple(self._concrete(p) if isinstance(p, (list, tuple)) else p for p in parts)
                args = (args[0], parts if isinstance(idx, tuple) else parts[0], *args[2:])
        if func is torch.Tensor.__deepcopy__ and type(args[0]) is FakeTensor:
            return self._deepcopy(args[0], args[1] if len(args) > 1 else {})
        if func in _FROM_DATA:
            i = 1 if func is torch.Tensor.new_tensor else 0
            if len(args) > i and isinstance(args[i], (list, tuple)):
                args = (*args[:i], self._concrete(args[i]), *args[i + 1 :])
        return func(*args, **kwargs)


@contextlib.contextmanager
def convertible_modules():
    """Let model code call ``module.to(dtype)`` on fake parameters.

    ``Module._apply`` swaps a fake parameter in place, which torch refuses
    while the fake-tensor machinery holds weak references to it.  Inside this
    context a refused swap falls back to what ``_apply`` does for ordinary
    tensors: an unchanged parameter stays, a converted one is replaced.
    """
    original = nn.Module._apply

    def _apply(self, fn, recurse=True):
        try:
            return original(self, fn, recurse)
        except RuntimeError as e:
            if "Couldn't swap" not in str(e):
                raise
        for key, param in self._parameters.items():
            if param is None:
                continue
            with torch.no_grad():
                applied = fn(param)
            if applied is not param:
                self._parameters[key] = nn.Parameter(applied, requires_grad=param.requires_grad)
        for key, buf in self._buffers.items():
            if buf is not None:
                self._buffers[key] = fn(buf)
        return self

    nn.Module._apply = _apply
    try:
        yield
    finally:
        nn.Module._apply = original
