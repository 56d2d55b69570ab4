"""FakeTensor's dispatch-cache key, built faster for the tensors a simulation passes.

Every op on fake tensors first builds a key for FakeTensorMode's dispatch cache:
``FakeTensorMode._prep_args_for_hash`` turns each fake tensor argument into a
``TensorMetadata`` dataclass of 17 fields and flattens it field by field
(``dataclasses.fields``, ``getattr``, a recursive call per shape and stride).
For a simulation that is a quarter of the time on a cache hit.

:func:`fast_keys` swaps in :func:`prep_args_for_hash`, which appends *the same
values in the same order* for what a simulation's ops take (fake tensors of this
mode that are dense, strided, with concrete sizes and no constant; ints, floats,
bools, strings, ``None``, dtypes, devices, layouts, memory formats; lists, tuples,
dicts and ``torch.Size`` of those), and hands any call with anything else
(symbolic sizes, a sparse or a real tensor, a function, a subgraph, a constant) to
torch's own function, which raises the bypasses it always raised.  What a
tensor's shape and strides alone decide (their flattened fields, and the memory
format torch's ``suggest_memory_format`` and ``is_contiguous`` give) is worked
out once per layout and read back for the next tensor of that layout.  The key is
torch's key, element for element, so the cache hits, misses and bypasses on the
same ops and every output is what it was (``tests/trace/test_cachekey.py``
compares the two functions on every op of real simulations).  A torch whose
``TensorMetadata`` has other fields than this one was written for keeps its own
function.
"""

from __future__ import annotations

import dataclasses

import torch
from torch._prims_common import suggest_memory_format
from torch._subclasses import fake_tensor as _ft

from .swap import Swap

# TensorMetadata's fields, in the order torch flattens them (torch 2.13).
FIELDS = (
    "dtype",
    "shape",
    "stride",
    "device",
    "layout",
    "memory_format",
    "storage_offset",
    "storage_bytes",
    "requires_grad",
    "is_quantized",
    "is_conj",
    "is_neg",
    "is_inference",
    "is_sparse",
    "is_coalesced",
    "dense_dim",
    "sparse_dim",
)

_TORCH_PREP = _ft.FakeTensorMode._prep_args_for_hash
_FakeTensor = _ft.FakeTensor
_STRIDED = torch.strided
_SIZE = torch.Size
# Arguments torch's function appends as (type, value): its last branch, exact types only.
_PLAIN = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format})
_CONTAINERS = frozenset({list, tuple, dict, _SIZE})


class _Unusual(Exception):
    """An argument outside the fast path: the whole call goes to torch's function."""


def matches_torch() -> bool:
    """Whether this torch's TensorMetadata has the fields :func:`prep_args_for_hash` appends."""
    return tuple(f.name for f in dataclasses.fields(_ft.TensorMetadata)) == FIELDS


# (shape, strides) -> (their flattened fields, the memory format torch's TensorMetadata gives them)
_LAYOUTS: dict[tuple, tuple[tuple, torch.memory_format | None]] = {}
_LAYOUTS_MAX = 1 << 16  # emptied when full (a simulation meets a few thousand)
_SPARSE_FIELDS = (False, None, None, None)  # is_sparse, is_coalesced, dense_dim, sparse_dim of a dense tensor


def _layout(arg, shape, stride) -> tuple[tuple, torch.memory_format | None]:
    """The key's fields that ``arg``'s shape and strides alone decide: the shape and the strides as
    torch flattens them, and ``suggest_memory_format`` where ``arg`` is contiguous in it, else None."""
    memory_format: torch.memory_format | None = suggest_memory_format(arg)
    if not arg.is_contiguous(memory_format=memory_format):
        memory_format = None
    flat: list = [_SIZE, f"length_{len(shape)}"]
    for n in shape:
        flat += (int, n)
    flat += (tuple, f"length_{len(stride)}")
    for n in stride:
        flat += (int, n)
    if len(_LAYOUTS) >= _LAYOUTS_MAX:
        _LAYOUTS.clear()
    out = _LAYOUTS[(tuple(shape), tuple(stride))] = (tuple(flat), memory_format)
    return out


def _append_args(mode, result: list, args) -> None:
    append = result.append
    extend = result.extend
    if isinstance(args, (list, tuple, dict)):  # torch.Size is a tuple: torch appends its type too
        append(type(args))
        append(f"length_{len(args)}")
        if isinstance(args, dict):
            _append_args(mode, result, args.keys())
            _append_args(mode, result, args.values())
            return
    for arg in args:
        kind = type(arg)
        if kind is _FakeTensor:
            if arg.fake_mode is not mode or arg.constant is not None or arg.layout is not _STRIDED or arg._has_symbolic_sizes_strides:
                raise _Unusual
            # extract_tensor_metadata(arg)._flatten_into(result, ...), field by field; what the
            # shape and strides alone decide (their flattening, the memory format) made once a layout
            shape = arg.shape
            stride = arg.stride()
            layout = _LAYOUTS.get((shape, stride))
            if layout is None:
                layout = _layout(arg, shape, stride)
            append(arg.dtype)
            extend(layout[0])
            extend((arg.device, _STRIDED, layout[1], arg.storage_offset(), arg.untyped_storage().nbytes(), arg.requires_grad, arg.is_quantized, arg.is_conj(), arg.is_neg(), arg.is_inference()))
            extend(_SPARSE_FIELDS)
        elif kind in _PLAIN:
            append(kind)
            append(arg)
        elif kind in _CONTAINERS:
            _append_args(mode, result, arg)
        else:
            raise _Unusual


def prep_args_for_hash(self, result: list, args, state, id_hashed_objects: list) -> None:
    """``FakeTensorMode._prep_args_for_hash`` with the same result, faster for a simulation's arguments."""
    start = len(result)
    try:
        _append_args(self, result, args)
    except _Unusual:
        del result[start:]
        _TORCH_PREP(self, result, args, state, id_hashed_objects)


def _install() -> None:
    _ft.FakeTensorMode._prep_args_for_hash = prep_args_for_hash  # type: ignore[method-assign]


def _restore() -> None:
    _ft.FakeTensorMode._prep_args_for_hash = _TORCH_PREP  # type: ignore[method-assign]


_SWAP = Swap(_install, _restore, lambda: matches_torch())  # late-bound: a test may replace matches_torch
_DEPTH = _SWAP.depth


def fast_keys():
    """Build FakeTensor's cache keys with :func:`prep_args_for_hash` inside the block (nests;
    process-wide while any block is open: :class:`neurarch.fake.swap.Swap`).  Also a decorator:
    ``@fast_keys()`` runs each call of the function inside a block."""
    return _SWAP.block()
