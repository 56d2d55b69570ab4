"""FakeTensor's cache misses computed by neurarch.fake.misses equal torch's own.

The reference is FakeTensorMode's own computation of the same call at the same moment
(``FakeTensorMode._dispatch_impl``, what its handler runs on a miss, with no neurarch code
in it): every miss computed during real simulations (a Llama's four modes, QLoRA's 4-bit
layers among them, a BERT, a ResNet, a Swin, whose batch-1 views have size-1 dimensions)
is compared with it: type, shape, strides, storage offset, dtype, the storage's size and
whether it is the view's input's, the dispatch keys and FakeTensor's attributes.  End to
end, a plan's figures with the misses computed here equal those without.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from test_hits import RESNET, _described, _same_output
from torch._subclasses import fake_tensor as ft
from torch.utils._python_dispatch import _pop_mode_temporarily

from neurarch.build import build_from_config
from neurarch.fake import hits, misses
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.memory import estimate_with_curve, with_batch
from neurarch.plan.train import TrainSetup
from plan_figures import with_and_without
from tiny_configs import BERT, LLAMA

aten = torch.ops.aten

SWIN = {
    "model_type": "swin",
    "architectures": ["SwinForImageClassification"],
    "image_size": 56,
    "patch_size": 4,
    "embed_dim": 16,
    "depths": [2, 2],
    "num_heads": [2, 4],
    "window_size": 7,
    "num_labels": 10,
}

CASES = [
    (LLAMA, "llama", TrainSetup(mode="full", precision="bf16-mixed")),
    (LLAMA, "llama", TrainSetup(mode="lora", precision="bf16-mixed")),
    (LLAMA, "llama", TrainSetup(mode="qlora", precision="bf16")),
    (LLAMA, "llama", TrainSetup(mode="inference", precision="bf16")),
    (BERT, "bert", TrainSetup(mode="full", precision="fp32", optimizer="sgd")),
    (RESNET, "resnet", TrainSetup(mode="lora", precision="bf16-mixed")),
    (SWIN, "swin", TrainSetup(mode="full", precision="bf16-mixed")),
    (SWIN, "swin", TrainSetup(mode="inference", precision="bf16")),
]

COMPUTED = misses.computed


class _Compare:
    """Stands in for :func:`misses.computed`: where it computes a miss, FakeTensorMode computes
    the same call too, and the two outputs are compared (the simulation goes on with ours)."""

    def __init__(self):
        self.calls = self.differ = 0
        self.how: dict = {}
        self.first_difference = None

    def function(self):
        def computed(mode, state, key, func, args, kwargs):
            self.calls += 1
            mine = COMPUTED(mode, state, key, func, args, kwargs)
            if mine is None:
                return None
            how = misses._HOW[func]
            self.how[how] = self.how.get(how, 0) + 1
            with _pop_mode_temporarily(torch._C._TorchDispatchModeKey.FAKE):
                theirs = mode._dispatch_impl(func, (), args, kwargs)
            if not _same_output(mine, theirs, args):
                self.differ += 1
                self.first_difference = self.first_difference or (func, _described(mine), _described(theirs))
            return mine

        return computed


@pytest.mark.parametrize("cfg,name,setup", CASES, ids=[f"{c[1]}-{c[2].mode}" for c in CASES])
def test_every_miss_computed_is_what_fake_tensor_mode_computes(cfg, name, setup, monkeypatch):
    compare = _Compare()
    monkeypatch.setattr(misses, "computed", compare.function())
    ft.FakeTensorMode.cache_clear()
    built = build_from_config(dict(cfg), name)
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=16, batch=1))
    for batch in (1, 2, 5):  # batch 1 first: its size-1 dimensions
        estimate_with_curve(built, with_batch(plan, batch), setup, cache=False, cut_depth=False, steady_only=batch != 1)
    assert compare.how.get("plain", 0) > 20 and compare.how.get("meta", 0) > 20, compare.how  # both kinds exercised
    assert compare.differ == 0, compare.first_difference


@pytest.mark.parametrize("setup", [TrainSetup(mode="lora", precision="bf16-mixed"), TrainSetup(mode="full", precision="fp32")], ids=["lora", "full"])
def test_a_plans_figures_with_the_misses_computed_are_those_without(setup, monkeypatch):
    fast, plain = with_and_without(setup, lambda: monkeypatch.setattr(misses, "COMPUTE", False))
    assert fast == plain


class _Asks(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self, mode):
        super().__init__()
        self.mode, self.answers = mode, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = hits.cached(self.mode, func, args, kwargs)
        self.answers.append((func, out))
        return func(*args, **(kwargs or {})) if out is hits.MISS else out


def _asked(mode, func, args, kwargs=None):
    """What :func:`hits.cached` answers for ``func`` on an empty cache, in a mode right above ``mode``."""
    ft.FakeTensorMode.cache_clear()
    asker = _Asks(mode)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mode)
        stack.enter_context(asker)
        func(*args, **(kwargs or {}))
    return next(out for f, out in asker.answers if f is func)


def test_what_is_left_to_fake_tensor_mode():
    mode = ft.FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        x = torch.empty(3, 5)
        one = torch.empty(1, 5)
        bias = torch.empty(3)
        c = torch.tensor(2.0)  # a constant behind it (one element: FakeTensor keeps its value)
    assert _asked(mode, aten.mul.Tensor, (x, x)) is not hits.MISS  # a plain op: computed, stored
    assert ft.FakeTensorMode.cache_misses >= 1
    assert _asked(mode, aten.addmm.default, (bias, x, x.t())) is not hits.MISS  # decomposed by torch, its meta kernel the same
    assert _asked(mode, aten.view.default, (x, [5, 3])) is not hits.MISS  # a view without size-1 dimensions
    assert _asked(mode, aten.view.default, (one, [1, 5])) is hits.MISS  # a size-1 dimension: its stride is torch's to pick
    assert _asked(mode, aten.mul_.Tensor, (x, x)) is hits.MISS  # in place
    assert c.constant is not None
    assert _asked(mode, aten.mul.Tensor, (c, c)) is hits.MISS  # constants: torch propagates them
    assert _asked(mode, aten._to_copy.default, (x,), {"dtype": torch.bfloat16}) is not hits.MISS  # a cast
    assert _asked(mode, aten._to_copy.default, (x,), {"device": torch.device("cuda")}) is hits.MISS  # a device change
    assert _asked(mode, aten.mul.Tensor, (x, torch.ones(5))) is hits.MISS  # a real tensor: torch converts it


def test_turned_off_every_miss_goes_to_fake_tensor_mode(monkeypatch):
    monkeypatch.setattr(misses, "COMPUTE", False)
    mode = ft.FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        x = torch.empty(3, 5)
    assert _asked(mode, aten.mul.Tensor, (x, x)) is hits.MISS
