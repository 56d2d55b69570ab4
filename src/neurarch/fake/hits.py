"""FakeTensor's dispatch-cache hits, answered with less work around them.

Most ops of a simulation hit FakeTensorMode's dispatch cache: the op's output
is made from the cached metadata, no kernel runs.  Around that, torch does
more than the hit needs, and at a few thousand ops a run it adds up:

* :func:`get_output_tensor_from_cache_entry` stands in for
  ``FakeTensorMode._get_output_tensor_from_cache_entry``, which makes the
  output tensor: torch goes through ``in_kernel_invocation_manager`` (a
  generator context manager) and ``FakeTensor.__new__``, which checks its
  arguments, normalizes the device twice and sets fifteen memo attributes
  through their descriptors, one ``setattr`` each.  neurarch makes the same
  empty meta tensor under the same dispatch guards, wraps it with the same
  ``Tensor._make_subclass`` call and writes the same attributes, in the same
  order, into the new tensor's ``__dict__`` at once: the tensor torch's
  function gives, attribute for attribute (``tests/trace/test_hits.py``
  compares the two on every hit of real simulations).  Anything unusual (a
  symbolic shape environment, a sparse, conjugated or negated output, an
  in-place op's or a constant's entry, FakeTensor's debug mode) goes to torch's
  function.
* :func:`cached` answers an op from the cache for the simulation's live-storage
  tracker, the dispatch mode right above FakeTensorMode: the same key, entry
  and output ``FakeTensorMode._cached_dispatch_impl`` would give, without the
  trip back through the dispatcher into FakeTensorMode's handler.  A miss of
  an op whose meta kernel gives FakeTensorMode's answer is computed there too,
  and stored in the cache as FakeTensorMode stores it (:mod:`neurarch.fake.misses`);
  a call of one of bitsandbytes' ops that FakeTensorMode never caches is answered
  from neurarch's own entries for it (:mod:`neurarch.fake.custom`);
  any other miss, or a bypass, returns :data:`MISS`, and the caller runs the op
  as before (FakeTensorMode computes it, with itself off the mode stack, so the
  ops a meta kernel or a decomposition runs are its own).

Both are installed for a simulation's, the trace's and the cost count's
blocks by :func:`neurarch.fake.views.fast_fake` (the first; :class:`neurarch.fake.swap.Swap`),
and the second is called by :class:`neurarch.fake.gaps.FakeGaps` where the
simulation gives it the fake mode (:func:`neurarch.plan.simulation._run`).
``benchmarks/fake_views.py`` times a hit with and without them.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging

import torch
from torch._subclasses import fake_tensor as _ft

from . import custom, misses
from .swap import Swap

_FTM = _ft.FakeTensorMode
_FakeTensor = _ft.FakeTensor
_BYPASS = _ft._DispatchCacheBypassEntry
_TORCH_GET = _FTM._get_output_tensor_from_cache_entry
_STRIDED = torch.strided
_META = torch.device("meta")
_make_subclass = torch.Tensor._make_subclass
_empty_strided = torch.empty_strided
_DisableTorchDispatch = torch._C._DisableTorchDispatch
_PreserveDispatchKeyGuard = torch._C._PreserveDispatchKeyGuard
_set_meta_in_tls = torch._C._set_meta_in_tls_dispatch_include
_throw_on_data_ptr = torch._C._set_throw_on_mutable_data_ptr
_warn_on_data_ptr = torch._C._set_warn_deprecated_on_mutable_data_ptr
_normalize = _FakeTensor._normalize_fake_device
_log = _ft.log
_stack_len = torch._C._len_torch_dispatch_stack  # in a mode's handler: the modes below it, FakeTensorMode counted
_fake_mode_now = torch._C._get_dispatch_mode
_FAKE_KEY = torch._C._TorchDispatchModeKey.FAKE

MISS = object()
"""What :func:`cached` returns where the cache holds no answer: run the op."""


def _attributes() -> dict | None:
    """The ``__dict__`` ``FakeTensor.__new__`` leaves on an output made from a cache entry,
    in its order (its device and mode set per tensor), or None where it holds anything but
    those two and Nones (a torch this was not written for).  Made when first asked
    (:func:`matches_torch`), not on import: a FakeTensorMode imports torch's compiler package."""
    mode = _FTM()
    with _ft.in_kernel_invocation_manager(mode):
        elem = _empty_strided((1,), (1,), device=_META)
    made = _FakeTensor(mode, elem, torch.device("cpu"))
    attrs = dict(made.__dict__)
    if list(attrs)[:2] != ["_fake_device", "fake_mode"] or any(v is not None for k, v in attrs.items() if k not in ("_fake_device", "fake_mode")):
        return None
    return attrs


_ATTRIBUTES: dict | None = None
_ASKED = [False]


def get_output_tensor_from_cache_entry(self, state, entry, key, func, args):
    """``FakeTensorMode._get_output_tensor_from_cache_entry``: the same tensor, made with less around it."""
    md = entry.metadata
    if md is None or entry.inplace_idx is not None or self.shape_env is not None or md.layout is not _STRIDED or md.is_conj or md.is_neg or _ft.FakeTensorConfig.debug or _ATTRIBUTES is None:
        return _TORCH_GET(self, state, entry, key, func, args)
    device = _normalize(md.device)
    if device.type == "meta" and not self.allow_meta:
        return _TORCH_GET(self, state, entry, key, func, args)  # torch's raises its error
    shape, stride = md.shape, md.stride
    # in_kernel_invocation_manager(self), spelled out: the same guards, no generator
    with _DisableTorchDispatch():
        before = self.in_kernel_invocation
        self.in_kernel_invocation = True
        with _PreserveDispatchKeyGuard():
            _set_meta_in_tls(True)
            try:
                empty = _empty_strided(shape, stride, dtype=md.dtype, layout=_STRIDED, device=_META, requires_grad=md.requires_grad)
                if isinstance(func, torch._ops.OpOverload) and func.is_view:
                    # a view's output lives on its input's storage
                    empty.set_(args[entry.view_idx].untyped_storage(), md.storage_offset, shape, stride)
            finally:
                self.in_kernel_invocation = before
    out = _make_subclass(_FakeTensor, empty, empty.requires_grad, dispatch_device=True, device_for_backend_keys=device)
    if not self._allow_unsafe_data_ptr_access:
        _throw_on_data_ptr(out)
    else:
        _warn_on_data_ptr(out)
    attrs = out.__dict__
    attrs.update(_ATTRIBUTES)
    attrs["_fake_device"] = device
    attrs["fake_mode"] = self
    return out


def cached(mode, func, args, kwargs):
    """``func(*args, **kwargs)``'s output from ``mode``'s dispatch cache, as
    ``FakeTensorMode.dispatch`` gives it on a hit (on a miss, as :func:`neurarch.fake.misses.computed`
    computes it, where it does), or :data:`MISS` (run the op).

    For the handler of a dispatch mode directly above ``mode`` (the simulation's tracker,
    the tracer's value mode): there, ``func(...)`` would go to ``mode``'s handler next,
    which looks up the same key.  Anywhere else (another mode in between) it answers
    :data:`MISS`: the stack holds just ``mode`` below the caller, or the op is run."""
    if (
        _stack_len() != 1
        or _fake_mode_now(_FAKE_KEY) is not mode
        or func in _ft._DISPATCH_META_HANDLERS
        or func in _ft._DISPATCH_HANDLE_DIRECTLY
        or not mode.cache_enabled
        or mode.cache_crosscheck_enabled
        or mode.shape_env is not None
        or _log.isEnabledFor(logging.DEBUG)
    ):
        return MISS
    state = _ft._CacheKeyState(None)
    try:
        key = mode._cache_key(state, func, args, kwargs or {})
    except _ft._BypassDispatchCache:
        return MISS  # FakeTensorMode's handler finds the same and counts it
    if state.cache_on_shape_env():
        return MISS
    entry = _FTM.cache.get(key)
    if (entry is None or type(entry) is _BYPASS) and custom.CACHE and custom.cacheable(func):
        return custom.answered(mode, state, key, func, args, kwargs or {})  # an op FakeTensorMode never caches
    if entry is None:
        out = misses.computed(mode, state, key, func, args, kwargs or {})
        return MISS if out is None else out
    if isinstance(entry, _ft._DispatchCacheBypassEntry):
        return MISS
    out = mode._output_from_cache_entry(state, entry, key, func, args)
    _FTM.cache_hits += 1
    return out


# What the functions above read of torch's (torch 2.13): the function they stand in for, by its
# parameters, and the fields of a cache entry's output.
_PARAMETERS = ("self", "state", "entry", "key", "func", "args")
_ENTRY_FIELDS = {"inplace_idx", "metadata", "view_idx", "constant_value"}


def matches_torch() -> bool:
    """Whether this torch's functions are the ones these were written against: the stood-in
    function takes the same parameters, a cache entry's output has the fields read here, and
    ``FakeTensor.__new__`` leaves the attributes :func:`_attributes` expects."""
    global _ATTRIBUTES
    if not _ASKED[0]:
        _ATTRIBUTES, _ASKED[0] = _attributes(), True
    info = getattr(_ft, "_DispatchCacheEntryOutputInfo", None)
    return (
        _ATTRIBUTES is not None
        and tuple(inspect.signature(_TORCH_GET).parameters) == _PARAMETERS
        and info is not None
        and dataclasses.is_dataclass(info)
        and _ENTRY_FIELDS <= {f.name for f in dataclasses.fields(info)}
    )


def _install() -> None:
    _FTM._get_output_tensor_from_cache_entry = get_output_tensor_from_cache_entry  # type: ignore[method-assign]


def _restore() -> None:
    _FTM._get_output_tensor_from_cache_entry = _TORCH_GET  # type: ignore[method-assign]


_SWAP = Swap(_install, _restore, lambda: matches_torch())
_DEPTH = _SWAP.depth


def fast_hits():
    """Make hits' outputs with :func:`get_output_tensor_from_cache_entry` inside the block (nests;
    process-wide while any block is open: :class:`neurarch.fake.swap.Swap`)."""
    return _SWAP.block()
