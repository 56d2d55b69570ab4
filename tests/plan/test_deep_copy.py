"""neurarch.fake.convert.deep_copy makes the copy ``copy.deepcopy`` makes (meta_copy's copy of a model).

The reference is ``copy.deepcopy`` itself, run with the same memo: both copies of a
model are walked side by side and must be the same object graph: the same types, the
same atoms, the same keys in the same order, a tensor of the same shape, strides and
dtype (a parameter pre-made in the memo: the very same one), and an object shared in
one copy shared in the other (a one-to-one map between the two copies' objects).  Also:
the copy shares no module, dict or tensor with the model copied; an object of a class
that copies itself its own way goes to ``copy.deepcopy``; and the fast path is what a
real model's modules take (else this test would only compare deepcopy with itself).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
from collections import OrderedDict

import pytest
import torch
from torch import nn

from neurarch.build import build_from_config
from neurarch.fake.convert import _plain_module, deep_copy, meta_copy, meta_memo
from neurarch.inputs.prepare import prepare as prepare_model
from neurarch.options import Options
from neurarch.plan.train import TrainSetup, prepare
from tiny_configs import BERT, LLAMA, MIXTRAL, clip

ATOMS = (type(None), bool, int, float, complex, str, bytes, type, types.FunctionType, types.BuiltinFunctionType, range, property)


def same_graph(a, b, there: dict, back: dict, path: str = "model") -> None:
    """Walk ``a`` (copy.deepcopy's copy) and ``b`` (deep_copy's) side by side."""
    if id(a) in there or id(b) in back:
        assert there.get(id(a)) == id(b) and back.get(id(b)) == id(a), f"{path}: shared in one copy, not the same way in the other"
        return
    there[id(a)], back[id(b)] = id(b), id(a)
    assert type(a) is type(b), f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, ATOMS) or type(a) is types.BuiltinMethodType or a is Ellipsis:
        assert a is b or a == b, f"{path}: {a!r} vs {b!r}"
    elif isinstance(a, torch.Tensor):
        assert (a.shape, a.stride(), a.dtype, a.device, a.requires_grad, type(a)) == (b.shape, b.stride(), b.dtype, b.device, b.requires_grad, type(b)), path
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys differ"
        for k in a:
            same_graph(a[k], b[k], there, back, f"{path}[{k!r}]")
        if hasattr(a, "__dict__"):
            same_graph(vars(a), vars(b), there, back, f"{path}.__dict__")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            same_graph(x, y, there, back, f"{path}[{i}]")
    elif isinstance(a, (set, frozenset)):
        assert a == b, path
    elif isinstance(a, types.MethodType):
        assert a.__func__ is b.__func__, path
        same_graph(a.__self__, b.__self__, there, back, f"{path}.__self__")
    elif isinstance(a, functools.partial):
        same_graph((a.func, a.args, a.keywords), (b.func, b.args, b.keywords), there, back, path)
    elif hasattr(a, "__dict__"):
        same_graph(vars(a), vars(b), there, back, f"{path}.__dict__")
    else:
        assert a is b or a == b, f"{path}: {a!r} vs {b!r}"


def _objects(root) -> dict[int, object]:
    """Every module, container and tensor reachable from ``root`` through module dicts."""
    out: dict[int, object] = {}
    todo = [root]
    while todo:
        x = todo.pop()
        if id(x) in out or isinstance(x, ATOMS):
            continue
        out[id(x)] = x
        if isinstance(x, nn.Module):
            todo.extend(vars(x).values())
        elif isinstance(x, dict):
            todo.extend(x.values())
        elif isinstance(x, (list, tuple, set)):
            todo.extend(x)
    return out


def check(model: nn.Module) -> None:
    memo = meta_memo(model)
    want = copy.deepcopy(model, dict(memo))
    got = deep_copy(model, dict(memo))
    same_graph(want, got, {}, {})
    kept = {id(p) for p in memo.values()}
    original, copied = _objects(model), _objects(got)
    shared = [type(v).__name__ for k, v in copied.items() if k in original and k not in kept and isinstance(v, (nn.Module, dict, list, set, torch.Tensor))]
    assert not shared, f"the copy shares {sorted(set(shared))} with the model"


def _built(cfg: dict, name: str) -> nn.Module:
    return build_from_config(cfg, name).model


TINY = {"llama": (LLAMA, "llama"), "bert": (BERT, "bert"), "mixtral": (MIXTRAL, "mixtral"), "clip": (clip(2), "clip")}


@pytest.mark.parametrize("name", list(TINY))
@pytest.mark.parametrize("mode", ["full", "lora", "qlora"])
def test_a_models_copy_is_deepcopys(name, mode):
    cfg, model_type = TINY[name]
    model = _built(cfg, model_type)
    if mode != "full":
        model = prepare(meta_copy(model), TrainSetup(mode=mode, precision="bf16-mixed"))  # peft's wrappers, bitsandbytes' layers
    check(model)


@pytest.mark.parametrize("spec", ["t5-small", "microsoft/swin-tiny-patch4-window7-224", "microsoft/resnet-50", "openai/clip-vit-base-patch16"])
def test_catalog_models_copy_as_deepcopy_copies_them(spec):
    model = prepare_model(spec, dataclasses.replace(Options(), plan=None), recipe=False).built.model
    check(model)
    plain = [type(m) for m in model.modules() if _plain_module(type(m))]
    assert len(plain) == sum(1 for _ in model.modules())  # every module class takes the direct copy


class _Own(nn.Module):
    """A module that copies itself its own way."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2, device="meta")

    def __deepcopy__(self, memo):
        new = _Own.__new__(_Own)
        nn.Module.__init__(new)
        new.lin = copy.deepcopy(self.lin, memo)
        new.marker = "own"
        return new


class _State(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.empty(3, device="meta"))
        self.skip = "not copied"

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("skip")
        return state


class _Odd(nn.Module):
    """Shared children, a tied weight, hooks, containers of every kind, a config object."""

    def __init__(self):
        super().__init__()
        shared = nn.Linear(4, 4, device="meta")
        self.a = shared
        self.b = nn.Sequential(shared, nn.ReLU(), nn.Conv2d(1, 1, 1, device="meta"))
        self.emb = nn.Embedding(10, 4, device="meta")
        self.head = nn.Linear(4, 10, bias=False, device="meta")
        self.head.weight = self.emb.weight
        self.register_buffer("pos", torch.arange(4, device="meta"), persistent=False)
        self.cfg = types.SimpleNamespace(width=4, names=["a", "b"])
        self.b[0].cfg = self.cfg
        self.items = [self.a, {"k": (1, 2.0, "x")}, {3, 4}]
        self.od = OrderedDict(x=[1], y=self.cfg)
        od = OrderedDict(z=1)
        od.note = "an OrderedDict with an attribute"
        self.od_attr = od
        self.plain_tensor = torch.zeros(2)
        self.method = self.extra_repr
        self.part = functools.partial(max, 1)
        self.own = _Own()
        self.state = _State()
        self.a.register_forward_hook(lambda mod, args, out: out)
        self.register_forward_pre_hook(functools.partial(print, "pre"))
        self.b.to_self = self


def test_odd_module_trees_copy_as_deepcopy_copies_them():
    model = _Odd()
    check(model)
    got = deep_copy(model, meta_memo(model))
    assert got.own.marker == "own" and not hasattr(got.state, "skip")  # the classes' own protocols were followed
    assert got.a is got.b[0] and got.head.weight is got.emb.weight and got.b.to_self is got and got.items[0] is got.a
    assert got.b[0].cfg is got.cfg is got.od["y"] and got.cfg is not model.cfg
    assert got.method.__self__ is got
    assert not _plain_module(_Own) and not _plain_module(_State) and _plain_module(nn.Linear) and _plain_module(nn.Conv2d)
