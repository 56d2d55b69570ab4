"""The memory planner's meta -> fake conversion: a model copied on meta, then made fake without values.

There are two conversions of a meta model to fake tensors, on purpose:

* :func:`neurarch.fake.tensors.to_fake` (the trace's) keeps the values of the
  small buffers and tensor attributes the build made for real on the CPU, so
  :class:`~neurarch.fake.tensors.ValueMode` can read them (a forward that asks
  ``int(mask.sum())`` of a buffer gets the real answer).
* :func:`weights_to_fake` with :func:`fake_attributes` (the planner's, here)
  makes every parameter and buffer value-less, and turns plain tensor
  attributes fake once, returning them so the tracker registers them as
  weights: counted once, alive from the start, instead of a real tensor lifted
  afresh (a new allocation) at every use.

They differ in what the planner's figures count, so they stay two; merging
them would move the memory figures.  :func:`meta_copy` gives each simulation
its own copy of the built model to prepare and convert.
"""

from __future__ import annotations

import copy
import copyreg
import functools
from collections import OrderedDict
from typing import Any, Callable, cast

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode


def meta_like(t: torch.Tensor) -> torch.Tensor:
    """An empty meta tensor with ``t``'s shape, strides and dtype."""
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")


def meta_copy(model: nn.Module) -> nn.Module:
    """A deep copy of a meta (or already fake) model whose tensors are all on meta."""
    return deep_copy(model, meta_memo(model))


def meta_memo(model: nn.Module) -> dict[int, object]:
    """:func:`meta_copy`'s memo: every parameter and buffer of ``model`` made anew on meta (a
    parameter keeps ``requires_grad``), by the ``id`` of the tensor it stands for."""
    memo: dict[int, object] = {}
    for mod in model.modules():
        for p in mod._parameters.values():
            if p is not None and id(p) not in memo:
                memo[id(p)] = nn.Parameter(meta_like(p), requires_grad=p.requires_grad)
        for b in mod._buffers.values():
            if b is not None and id(b) not in memo:
                memo[id(b)] = meta_like(b)
    return memo


def swap_weights(module: nn.Module, param: Callable[[torch.Tensor], torch.Tensor], buffer: Callable[[torch.Tensor], torch.Tensor], memo: dict[int, torch.Tensor]) -> None:
    """Replace, in place, every parameter of ``module``'s modules by ``nn.Parameter(param(p.data))``
    (its ``requires_grad`` kept) and every buffer by ``buffer(b)``; ``memo`` (by ``id``) makes a
    tensor registered in several places (tied weights) one new tensor.  Both conversions walk the
    model with it; they differ in ``param`` and ``buffer``."""
    for mod in module.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                memo[id(p)] = nn.Parameter(param(p.data), requires_grad=p.requires_grad)
            mod._parameters[name] = cast(nn.Parameter, memo[id(p)])  # made as a Parameter (here, where it was first seen)
        for name, b in list(mod._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = buffer(b)
            mod._buffers[name] = memo[id(b)]


def weights_to_fake(model: nn.Module, mode: FakeTensorMode, device: str = "cpu") -> None:
    """Replace meta parameters and buffers by fake ones (tied tensors stay tied)."""
    conv = mode.fake_tensor_converter
    memo: dict[int, torch.Tensor] = {}

    def fake(t: torch.Tensor) -> torch.Tensor:
        m = t if t.device.type == "meta" else meta_like(t)
        return conv.from_meta_and_device(mode, m, torch.device(device))

    swap_weights(model, fake, fake, memo)


def fake_attributes(model: nn.Module, mode: FakeTensorMode) -> list[torch.Tensor]:
    """Plain tensor attributes (not parameters, not buffers) made fake too.

    The builder keeps small tensors real on the CPU (model code reads their
    values); a real tensor meeting fake ones is lifted afresh at every use,
    which would count as a new allocation each time.  Converted once here, they
    are weights-like state alive from the start; returned for registration.
    """
    out = []
    memo: dict[int, torch.Tensor] = {}
    for mod in model.modules():
        for name, v in list(vars(mod).items()):
            if isinstance(v, torch.Tensor) and not isinstance(v, (nn.Parameter, FakeTensor)):
                if id(v) not in memo:
                    memo[id(v)] = mode.from_tensor(v) if v.device.type != "meta" else mode.fake_tensor_converter.from_meta_and_device(mode, v, torch.device("cpu"))
                    out.append(memo[id(v)])
                object.__setattr__(mod, name, memo[id(v)])
    return out


# --------------------------------------------------------------------------
# copy.deepcopy, with the module tree's own objects copied directly
# --------------------------------------------------------------------------
#
# A simulation copies its model first: a tenth of a steady-state check of a cut Llama, a sixth
# of one of Swin-tiny, simulated whole (py-spy).  Almost all of
# that copy is each module's ``__dict__``: a dozen hook dicts, mostly empty, flags and
# counts, and the child modules.  ``copy.deepcopy`` reaches each of them through its
# general protocol (``__reduce_ex__``, ``__getstate__``, ``_reconstruct``); here the objects
# whose copy that protocol fixes in advance (modules, dicts, ordered dicts, sets of atoms) are
# made as it makes them, in the same memo, and everything else is handed to ``copy.deepcopy``
# itself.  The copy is the same object graph as ``copy.deepcopy``'s
# (tests/plan/test_deep_copy.py walks both).  What ``copy.deepcopy`` also keeps in the memo
# (``_keep_alive``: every copied object, so no id is reused during the copy) is not needed
# for the objects copied here: each is reached from the model being copied, which outlives it.

_ATOMIC = frozenset(t for t, f in copy._deepcopy_dispatch.items() if f is copy._deepcopy_atomic)  # type: ignore[attr-defined]


@functools.cache
def _plain_module(cls: Any) -> bool:
    """Whether ``copy.deepcopy`` copies an instance of module class ``cls`` by nn.Module's
    own protocol: a new object from ``cls.__new__``, then the class's ``__setstate__`` of a
    deep copy of ``Module.__getstate__`` (the ``__dict__`` without a compiled forward)."""
    return (
        cls not in copyreg.dispatch_table
        and not hasattr(cls, "__deepcopy__")
        and cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and cls.__getstate__ is nn.Module.__getstate__
        and not hasattr(cls, "__getnewargs_ex__")
        and not hasattr(cls, "__getnewargs__")
        and not copyreg._slotnames(cls)  # type: ignore[attr-defined]
    )


def deep_copy(x: Any, memo: dict) -> Any:
    """``copy.deepcopy(x, memo)``: the same copy, made faster for a module tree."""
    y = memo.get(id(x), memo)
    if y is not memo:
        return y
    cls: Any = type(x)
    if cls in _ATOMIC:
        return x
    if cls is dict or (cls is OrderedDict and not vars(x)):
        # copy._deepcopy_dict; an OrderedDict's __reduce__ gives a new empty one and its items
        y = memo[id(x)] = cls()
        for k, v in x.items():
            y[k if type(k) in _ATOMIC else deep_copy(k, memo)] = v if type(v) in _ATOMIC else deep_copy(v, memo)
        return y
    if cls is set and all(type(v) in _ATOMIC for v in x):  # set.__reduce__: a set of its items' copies
        y = memo[id(x)] = set(x)
        return y
    if isinstance(x, nn.Module) and _plain_module(cls) and (cls.__getattr__ is nn.Module.__getattr__ or getattr(x, "__deepcopy__", None) is None):
        y = memo[id(x)] = cls.__new__(cls)
        state = {}
        for k, v in x.__dict__.items():
            t = type(v)
            if k == "_compiled_call_impl":  # Module.__getstate__ leaves it out
                continue
            if t in _ATOMIC:
                state[k] = v
            elif t is OrderedDict and not v and id(v) not in memo and not vars(v):  # an empty hook dict: most of a module
                state[k] = memo[id(v)] = OrderedDict()
            else:
                state[k] = deep_copy(v, memo)
        y.__setstate__(state)
        return y
    return copy.deepcopy(x, memo)
