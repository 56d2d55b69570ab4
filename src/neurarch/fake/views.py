"""FakeTensor's ``view`` and ``_unsafe_view``, worked out in plain arithmetic.

FakeTensorMode answers ``aten.view`` and ``aten._unsafe_view`` with
``torch._refs._reshape_view_helper``: a walk over the dimensions that takes each
step (``prims.split_dim``, ``prims.collapse_view``, ``prims.squeeze``) as an op
of its own, each dispatched through the mode again.  A view at shapes the cache
has not seen (every new batch) costs about ten times neurarch's arithmetic
(``benchmarks/fake_views.py``), and ``_unsafe_view`` (matmul's reshape) is never
cached, so it paid that every time.

:func:`view_meta` takes the same steps on ``(shape, strides)`` tuples (the
strides each prim's meta function computes) and makes the result with one
``as_strided`` on the input, at its storage offset, as the last prim does (its
meta kernel run directly, as FakeTensorMode runs a meta kernel).  The
output has the same shape, strides, storage offset and storage as torch's, size-1
dimensions included (where torch's helper and the C++ ``view`` choose different
strides, torch's helper is followed).  Anything outside the plain case (symbolic
sizes, an empty or zero-dimensional tensor, a shape that is not a view, a copy)
goes to torch's own function, which raises the errors it always raised.
``tests/trace/test_views.py`` compares the two on thousands of shapes and strides.

:func:`fast_views` installs it for a block, as :func:`neurarch.fake.cachekey.fast_keys`
does the cache keys (both through :class:`neurarch.fake.swap.Swap`); :func:`fast_fake` opens both.
"""

from __future__ import annotations

import contextlib

import torch
from torch._prims_common import extract_shape_from_varargs, infer_size
from torch._subclasses import fake_impls as _fi
from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

from .cachekey import fast_keys
from .hits import fast_hits
from .swap import Swap

_aten = torch.ops.aten
_OPS = (_aten.view.default, _aten._unsafe_view.default)
_AS_STRIDED = _aten.as_strided.default
_TORCH_VIEW = _fi.op_implementations_dict.get(_aten.view.default)


class _NotPlain(Exception):
    """A case the arithmetic leaves to torch's function."""


def _collapse(shape: list[int], strides: list[int], start: int, end: int) -> bool:
    """``prims.collapse_view`` of dims start..end in place; False where no view exists
    (``prims._collapse_view_helper`` for a tensor with elements)."""
    for i in range(end - 1, start - 1, -1):
        if not (shape[i] == 1 or shape[i + 1] == 1 or strides[i] == strides[i + 1] * shape[i + 1]):
            return False
    stride = strides[end]
    length = shape[end]
    for i in range(end - 1, start - 1, -1):
        if shape[i] != 1:
            stride = min(stride, strides[i])
        length *= shape[i]  # no size is 0: empty tensors are not plain
    shape[start : end + 1] = [length]
    strides[start : end + 1] = [stride]
    return True


def _split(shape: list[int], strides: list[int], dim: int, outer: int) -> None:
    """``prims.split_dim`` in place."""
    inner = shape[dim] // outer
    if shape[dim] % outer:
        raise _NotPlain
    s = strides[dim]
    shape[dim : dim + 1] = [outer, inner]
    strides[dim : dim + 1] = [s * inner, s]


def view_layout(size: tuple[int, ...], stride: tuple[int, ...], contiguous: bool, target: list[int]) -> tuple[list[int], list[int]]:
    """The shape and strides ``torch._refs._reshape_view_helper`` gives a view of a tensor of
    ``size`` and ``stride`` (``contiguous``: it is) as ``target`` (-1 already inferred).
    Raises _NotPlain for an empty or zero-dimensional tensor, a target with no dimension,
    and a shape that is no view of it (torch's function then copies or raises)."""
    numel = 1
    for n in size:
        numel *= n
    if numel == 0 or not size or not target:
        raise _NotPlain
    if contiguous:
        if len(target) == 1 and len(size) > 1:
            return [numel], [1]
        if len(target) == 2 and len(size) == 1:
            return list(target), [target[1], 1]
    total = 1
    for n in target:
        total *= n
    if total != numel:
        raise _NotPlain
    shape, strides = list(size), list(stride)
    idx = 0
    for length in target:
        if idx >= len(shape):  # a trailing size-1 dimension
            if length != 1:
                raise _NotPlain
            _split(shape, strides, len(shape) - 1, shape[-1])
            idx += 1
            continue
        if length == shape[idx]:
            idx += 1
            continue
        accum = shape[idx]
        end = idx
        while accum % length:
            end += 1
            if end >= len(shape):
                raise _NotPlain
            accum *= shape[end]
        if end != idx and not _collapse(shape, strides, idx, end):
            raise _NotPlain  # no view: torch's function copies (reshape) or raises (view)
        if accum != length:
            _split(shape, strides, idx, length)
        idx += 1
    while idx < len(shape):  # trailing size-1 dimensions go
        if shape[idx] != 1:
            raise _NotPlain
        del shape[idx], strides[idx]
    return shape, strides


def view_meta(fake_mode, func, a, *shape, allow_copy: bool = False):
    """FakeTensorMode's implementation of ``aten.view`` / ``aten._unsafe_view``: torch's
    result, from :func:`view_layout` where the case is plain, else from torch's function."""
    if type(a) is FakeTensor and not a._has_symbolic_sizes_strides and a.layout is torch.strided and not torch.fx.experimental._config.backed_size_oblivious:
        try:
            target = extract_shape_from_varargs(shape, validate=False)
            if all(type(n) is int for n in target):
                new_shape, new_strides = view_layout(tuple(a.shape), a.stride(), a.is_contiguous(), list(infer_size(target, a.numel())))
                # The meta kernel on the fake tensor seen as a meta one (its storage shared), wrapped
                # as FakeTensorMode wraps a meta kernel's output: what the last prim's as_strided gives.
                with in_kernel_invocation_manager(fake_mode):
                    out = _AS_STRIDED(a, new_shape, new_strides, a.storage_offset())
                return fake_mode.fake_tensor_converter.from_meta_and_device(fake_mode, out, a.fake_device)
        except (_NotPlain, RuntimeError, ValueError, TypeError, IndexError):
            pass
    return _TORCH_VIEW(fake_mode, func, a, *shape, allow_copy=allow_copy)  # type: ignore[misc]


def matches_torch() -> bool:
    """Whether this torch answers both ops with the one function :func:`view_meta` stands in for."""
    return _TORCH_VIEW is not None and getattr(_TORCH_VIEW, "__name__", "") == "_view_meta" and all(_fi.op_implementations_dict.get(op) is _TORCH_VIEW for op in _OPS)


def _install() -> None:
    for op in _OPS:
        _fi.op_implementations_dict[op] = view_meta  # late-bound: a test may replace view_meta


def _restore() -> None:
    for op in _OPS:
        _fi.op_implementations_dict[op] = _TORCH_VIEW


_SWAP = Swap(_install, _restore, lambda: matches_torch())
_DEPTH = _SWAP.depth


def fast_views():
    """Answer fake ``view`` / ``_unsafe_view`` with :func:`view_meta` inside the block (nests;
    process-wide while any block is open: :class:`neurarch.fake.swap.Swap`).  Also a decorator:
    ``@fast_views()``."""
    return _SWAP.block()


@contextlib.contextmanager
def fast_fake():
    """neurarch's equals of FakeTensorMode's functions for the block: the cache keys
    (:func:`neurarch.fake.cachekey.fast_keys`), the views (:func:`fast_views`) and a cache
    hit's output (:func:`neurarch.fake.hits.fast_hits`).  What a simulation, the trace and
    the cost count run under."""
    with fast_keys(), fast_views(), fast_hits():
        yield
