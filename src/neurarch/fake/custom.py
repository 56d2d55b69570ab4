"""FakeTensor's dispatch cache for bitsandbytes' 4-bit and blockwise ops, which torch never caches.

FakeTensorMode caches an op's output metadata only for ops of torch's own
namespaces: every other op bypasses its cache ("non-builtin") and runs its
registered fake kernel through FakeTensorMode's whole path, every call.  A QLoRA
simulation calls bitsandbytes' ops in every 4-bit layer, forward and backward
(the 4-bit matrix product, the weight dequantized for the gradient, its
blockwise-quantized scales dequantized first) and when it quantizes the model:
hundreds of calls a run, each about five times what an answer from a cache
entry takes (``python benchmarks/custom_ops.py``).

The ops in :data:`OPS` make new tensors whose shapes, strides and dtypes
their fake kernels read off their arguments' metadata and their plain
arguments alone (bitsandbytes' ``_ops.py``: ``torch._check`` of the arguments,
then ``torch.empty`` or ``torch.empty_like``), and they change no argument
(their schemas say so, checked per op: :func:`cacheable`).  So FakeTensorMode's
own key for a call (every tensor argument's metadata, every other argument's
value) decides the output, as it does for an aten op.  Here such a call is
answered as FakeTensorMode answers a cached aten op: the first call at a key is
run by FakeTensorMode as before and its entry made by FakeTensorMode's own
functions (the output checked and described as ``_make_cache_entry`` does,
without the namespace check); later calls at that key make their outputs from
the entry.  The entries are kept here, not in FakeTensorMode's cache, which
keeps answering as it did for anyone else.

Called from :func:`neurarch.fake.hits.cached`, where FakeTensorMode is the only
mode below the caller.  ``tests/trace/test_custom_ops.py`` compares every output
made here with FakeTensorMode's own computation of the same call on real QLoRA
simulations.  ``CACHE = False`` turns it off.
"""

from __future__ import annotations

import torch
from torch._subclasses import fake_tensor as _ft

CACHE = True

# bitsandbytes' ops (their default overloads) whose fake kernels make new tensors from the
# arguments' metadata and plain arguments alone (bitsandbytes 0.50: bitsandbytes/_ops.py).
OPS = frozenset({"dequantize_4bit", "quantize_4bit", "gemm_4bit", "gemv_4bit", "dequantize_blockwise", "quantize_blockwise"})

_NOT_CACHED = object()  # an entry: FakeTensorMode would not cache this output either
_ENTRIES: dict = {}  # FakeTensorMode's key -> its entry for the output, or _NOT_CACHED
_ENTRIES_MAX = 1 << 16  # emptied when full (a plan's simulations meet a few hundred)
_OK: dict = {}  # op -> whether it is answered here (decided once per op)
_BAD_TAGS = frozenset({torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape, torch.Tag.inplace_view})
HITS = [0]  # calls answered from an entry here, in this process


def cacheable(func) -> bool:
    """Whether calls of ``func`` are answered from entries here: one of :data:`OPS`' default
    overloads, whose schema changes no argument and returns no alias of one, with none of the
    tags FakeTensorMode's own key check refuses."""
    try:
        return _OK[func]
    except KeyError:
        ok = _OK[func] = _decide(func)
        return ok


def _decide(func) -> bool:
    if not matches_torch():
        return False
    if type(func) is not torch._ops.OpOverload or func.namespace != "bitsandbytes" or func._overloadname != "default":
        return False
    name = func._schema.name.split("::", 1)[-1]
    if name not in OPS or func.is_view or _BAD_TAGS & set(func.tags):
        return False
    schema = func._schema
    if schema.is_mutable or any(a.alias_info is not None for a in (*schema.arguments, *schema.returns)):
        return False
    return all(str(r.type) == "Tensor" for r in schema.returns)


def answered(mode, state, key, func, args, kwargs):
    """``func(*args, **kwargs)``'s output for the caller right above FakeTensorMode ``mode``, with
    FakeTensorMode's key ``key`` for it: made from the entry kept at ``key``, or computed by
    FakeTensorMode (the call the caller would make) and its entry kept."""
    entry = _ENTRIES.get(key)
    if entry is not None and entry is not _NOT_CACHED:
        HITS[0] += 1
        return mode._output_from_cache_entry(state, entry, key, func, args)
    out = func(*args, **kwargs)
    if entry is None:
        if len(_ENTRIES) >= _ENTRIES_MAX:
            _ENTRIES.clear()
        try:
            _ENTRIES[key] = _entry(mode, state, key, func, args, kwargs, out)
        except _ft._BypassDispatchCache:
            _ENTRIES[key] = _NOT_CACHED
    return out


def _entry(mode, state, key, func, args, kwargs, out):
    """``FakeTensorMode._make_cache_entry`` for an op :func:`cacheable` has checked: each output
    checked by ``_validate_output_for_cache_entry`` and described by
    ``_get_output_info_for_cache_entry`` (which also makes an output from the description and
    checks its dispatch keys against the real one's)."""
    outs = out if isinstance(out, tuple) else (out,)
    for o in outs:
        mode._validate_output_for_cache_entry(state, key, func, args, kwargs, o)
    infos = tuple(mode._get_output_info_for_cache_entry(state, key, func, args, kwargs, o) for o in outs)
    return _ft._DispatchCacheValidEntry(output_infos=infos, is_output_tuple=isinstance(out, tuple))


def clear() -> None:
    """Forget every entry (as ``FakeTensorMode.cache_clear`` does for its own)."""
    _ENTRIES.clear()


def matches_torch() -> bool:
    """Whether this torch has the functions and the entry type :func:`_entry` uses."""
    return all(hasattr(_ft.FakeTensorMode, f) for f in ("_validate_output_for_cache_entry", "_get_output_info_for_cache_entry", "_output_from_cache_entry")) and hasattr(
        _ft, "_DispatchCacheValidEntry"
    )
