"""FakeTensor's dispatch-cache misses of plain ops, computed by their meta kernels without the path around them.

A simulation at a batch it has not run before misses FakeTensor's dispatch cache
at every op whose shapes hold the batch: a thousand or more a run for a vision
model simulated whole, each new batch again.  For most aten ops FakeTensorMode
computes a miss by running the op's meta kernel on the fake tensors (under
``in_kernel_invocation_manager``) and wrapping the outputs on the inputs'
device; before it gets there, ``FakeTensorMode._dispatch_impl`` walks a dozen
checks (subclass arguments, lifts, constant propagation, higher-order ops,
real-tensor propagation, decompositions, prims, custom-op profiles and fake
kernels, its own op implementations, the unsafe fallback), most of which
depend on the op alone.

:func:`computed` takes the same last path for an op where every one of those
checks says so: the op's own decisions are made once per op and remembered
(:func:`_plain`), the per-call ones are read off the arguments (every tensor
argument is a fake tensor of this mode with no constant behind it, no symbolic
shapes, no real-tensor propagation).  An op FakeTensorMode would decompose
(it has no meta kernel of its own there), a mutating op, a view of a constant,
anything not in the ``aten`` namespace goes the usual way.  The cache entry is
made and stored with FakeTensorMode's own ``_make_cache_entry``, so the next
call of the op at these shapes is a hit, as it would have been.

Called from :func:`neurarch.fake.hits.cached` on a miss, where FakeTensorMode is
the only mode below the caller.  ``tests/trace/test_misses.py`` compares every
answer with FakeTensorMode's own on real simulations.  ``COMPUTE = False``
turns it off (every miss through FakeTensorMode's handler).
"""

from __future__ import annotations

import torch
from torch._subclasses import fake_tensor as _ft
from torch.utils import _pytree as pytree

COMPUTE = True

_FakeTensor = _ft.FakeTensor
_Tensor = torch.Tensor
_OpOverload = torch._ops.OpOverload
_CIA = torch._C.DispatchKey.CompositeImplicitAutograd
_has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
_DisableTorchDispatch = torch._C._DisableTorchDispatch
_PreserveDispatchKeyGuard = torch._C._PreserveDispatchKeyGuard
_set_meta_in_tls = torch._C._set_meta_in_tls_dispatch_include
_SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)

aten = torch.ops.aten


def _no_device_change(args, kwargs) -> bool:
    """``_to_copy`` as a cast alone: no device, layout or pinned memory asked for (FakeTensorMode's
    own device handling is what decides those)."""
    return kwargs.get("device") is None and kwargs.get("layout") in (None, torch.strided) and not kwargs.get("pin_memory")


def _fp32(args, kwargs) -> bool:
    """Layer norm in fp32: in a lower precision its meta kernel makes the mean and the inverse
    deviation fp32 (as CUDA's kernel does), torch's decomposition makes them the input's dtype."""
    return all(a.dtype == torch.float32 for a in args if isinstance(a, _Tensor))


# Ops FakeTensorMode computes otherwise (a decomposition in torch._decomp, or its own
# implementation in fake_impls) whose meta kernel gives the same output: shape, strides,
# dtype, device, storage offset, and for a view the input's storage.  ``tests/trace/test_misses.py``
# compares the two, op by op, on simulations of the catalog's models.  A view's output is
# taken from the meta kernel only where none of its dimensions is below 2: there its strides
# are fixed by the elements it addresses, whoever computes them (a size-1 dimension's stride
# is a convention, and torch's Python view and its C++ view pick different ones).  Each
# op's value: a check of the call's arguments, or None.
META: dict = {
    aten.addmm.default: None,
    aten.native_layer_norm.default: _fp32,
    aten.native_layer_norm_backward.default: _fp32,
    aten.gelu_backward.default: None,
    aten.silu_backward.default: None,
    aten.slice_backward.default: None,
    aten.nll_loss_forward.default: None,
    aten.nll_loss_backward.default: None,
    aten._log_softmax.default: None,
    aten._log_softmax_backward_data.default: None,
    aten.embedding_dense_backward.default: None,
    aten.sum.dim_IntList: None,
    aten.mean.dim: None,
    aten._to_copy.default: _no_device_change,
    aten.view.default: None,
    aten._unsafe_view.default: None,
    aten.slice.Tensor: None,
    aten.squeeze.dim: None,
    aten.unsqueeze.default: None,
    aten.select.int: None,
    aten.expand.default: None,
    aten.permute.default: None,
    aten.split.Tensor: None,
    aten.split_with_sizes.default: None,
    aten.unbind.int: None,
}

_HOW: dict = {}  # op -> "plain" (FakeTensorMode's own last path), "meta" (one of META), or None (FakeTensorMode's handler)


def _how(mode, func):
    """How a miss of ``func`` is computed here (see :data:`_HOW`), decided once per op."""
    try:
        return _HOW[func]
    except KeyError:
        how = _HOW[func] = _decide(mode, func)
        return how


def _decide(mode, func):
    """``"plain"`` where ``FakeTensorMode._dispatch_impl``, given only fake tensors of its own
    with no constants and no symbolic shapes, reaches its last path for ``func`` (the meta
    kernel, its outputs wrapped on the common device), every branch before it passed by for
    reasons of the op alone (each line below is one of them, in its order); ``"meta"`` for
    the ops of :data:`META`; None for anything else."""
    from torch._decomp import decomposition_table, meta_table
    from torch._subclasses.fake_impls import has_meta, op_implementations_checks
    from torch._subclasses.fake_tensor import torch_decomp_decompositions

    if type(func) is not _OpOverload or func.namespace != "aten":
        return None  # higher-order ops, prims (their prim_meta_impl), custom ops (their fake kernels)
    if func in mode.lift_fns or func in _ft._DISPATCH_META_HANDLERS or func in _ft._DISPATCH_HANDLE_DIRECTLY:
        return None
    if _ft.get_schema_info(func).is_mutable():
        return None  # in place or out=: a kernel that fails could leave a change behind; torch's path
    if func in META:
        return "meta" if has_meta(func) else None
    if func is aten._to_copy.default:
        return None  # its device handling (avoid_device_init) is per call
    if func not in meta_table and not mode.cpp_meta_supports_symint(func):
        if func in decomposition_table and torch_decomp_decompositions(func):
            return None  # decomposed by torch._decomp
        if _CIA in func.py_kernels or _has_kernel(func.name(), _CIA):
            return None  # decomposed by func.decompose()
    if torch._library.simple_registry.singleton.find(func.name()).fake_impl.kernel is not None:
        return None
    if any(check(func) for check, _ in op_implementations_checks):
        return None  # FakeTensorMode's own implementation of it
    return "plain" if has_meta(func) else None


def _determined(out) -> bool:
    """Whether every tensor of a view's output has no dimension below 2 (its strides fixed)."""
    if isinstance(out, _Tensor):
        return min(out.shape, default=2) >= 2
    return all(_determined(t) for t in out) if isinstance(out, (tuple, list)) else True


def computed(mode, state, key, func, args, kwargs):
    """``func(*args, **kwargs)``'s output as FakeTensorMode ``mode`` computes it on a miss,
    its cache entry stored under ``key``; or None (let FakeTensorMode compute it)."""
    if not COMPUTE or mode.propagate_real_tensors or _ft.FakeTensorConfig.debug:
        return None
    if torch._dynamo.config._custom_ops_profile is not None:
        return None
    how = _how(mode, func)
    if how is None:
        return None
    if how == "meta":
        check = META[func]
        if check is not None and not check(args, kwargs):
            return None
    flat_args = pytree.tree_leaves((args, kwargs))
    fakes = 0
    for a in flat_args:
        if isinstance(a, _Tensor):
            if type(a) is not _FakeTensor or a.fake_mode is not mode or a.constant is not None or a._has_symbolic_sizes_strides:
                return None
            fakes += 1
        elif isinstance(a, _SYM):
            return None
    if not fakes:
        return None  # FakeTensorMode may run it on constants instead
    # in_kernel_invocation_manager(mode), spelled out as in neurarch.fake.hits
    try:
        with _DisableTorchDispatch():
            before = mode.in_kernel_invocation
            mode.in_kernel_invocation = True
            with _PreserveDispatchKeyGuard():
                _set_meta_in_tls(True)
                try:
                    r = func(*args, **kwargs)
                finally:
                    mode.in_kernel_invocation = before
        if how == "meta" and func.is_view and not _determined(r):
            return None
        out = mode.wrap_meta_outputs_with_default_device_logic(r, func, flat_args, device=kwargs.get("device"))
    except Exception:
        return None  # FakeTensorMode runs it again and handles what it raised (an unsafe fallback, or the error)
    try:
        entry = mode._make_cache_entry(state, key, func, args, kwargs, out)
    except _ft._BypassDispatchCache as e:
        _ft.FakeTensorMode.cache_bypasses[e.reason] += 1
        _ft._set_cache_key(_ft.FakeTensorMode.cache, key, _ft._DispatchCacheBypassEntry(e.reason))
        return out
    _ft._set_cache_key(_ft.FakeTensorMode.cache, key, entry)
    _ft.FakeTensorMode.cache_misses += 1
    return out
