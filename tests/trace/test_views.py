"""Fake ``view`` / ``_unsafe_view`` worked out by neurarch.fake.views equal torch's own.

The reference is the function FakeTensorMode answers both ops with
(``torch._subclasses.fake_impls._view_meta``, i.e. ``torch._refs._reshape_view_helper``),
run on the same fake tensor: shape, strides, storage offset, and the storage
itself (a view makes no new one), or the same error.  On thousands of seeded
random shapes and layouts (permuted, sliced, offset, expanded; targets with -1,
trailing size-1 dimensions, shapes that are no view), on every view of real
simulations, and end to end: a plan's figures with the fast views (and
``_unsafe_view`` answered as ``view``) equal those with torch's function.
"""

from __future__ import annotations

import random

import pytest
import torch
from torch._subclasses import fake_impls as fi
from torch._subclasses import fake_tensor as ft

from neurarch.build import build_from_config
from neurarch.fake import gaps, misses, views
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.memory import estimate_with_curve, with_batch
from neurarch.plan.train import TrainSetup
from plan_figures import with_and_without
from tiny_configs import BERT, LLAMA

aten = torch.ops.aten
OPS = (aten.view.default, aten._unsafe_view.default)


def _outcome(fn, mode, op, t, shape):
    try:
        out = fn(mode, op, t, shape)
    except Exception as e:  # noqa: BLE001 - the error is part of what is compared
        return type(e).__name__
    return tuple(out.shape), out.stride(), out.storage_offset(), out.untyped_storage()._cdata == t.untyped_storage()._cdata, type(out).__name__


def _factors(n: int, k: int, rng: random.Random) -> list[int]:
    """A random shape of ``k`` dimensions (size-1 ones included) with ``n`` elements."""
    dims, rest = [], n
    for _ in range(k - 1):
        d = rng.choice([d for d in range(1, rest + 1) if rest % d == 0])
        dims.append(d)
        rest //= d
    dims.append(rest)
    rng.shuffle(dims)
    return dims


def _random_case(rng: random.Random):
    src = _factors(rng.choice([1, 2, 4, 6, 8, 12, 16, 24, 36, 48, 64, 96, 120]), rng.randint(1, 5), rng)
    t = torch.empty(src)
    r = rng.random()
    if r < 0.3 and t.ndim > 1:  # permuted
        order = list(range(t.ndim))
        rng.shuffle(order)
        t = t.permute(order)
    elif r < 0.4:  # every other element of the last dimension
        t = torch.empty([*src[:-1], src[-1] * 2])[..., ::2]
    elif r < 0.5:  # a storage offset
        t = torch.empty([src[0] + 1, *src[1:]])[1:]
    elif r < 0.55 and t.ndim < 5:  # expanded: stride 0
        t = t.expand(3, *t.shape)
    target = _factors(t.numel(), rng.randint(1, 5), rng)
    if rng.random() < 0.2:
        target.append(1)
    if rng.random() < 0.2:
        target[rng.randrange(len(target))] = -1
    if rng.random() < 0.05:
        target = [d + 1 for d in target]  # not its number of elements
    return t, target


def test_this_torch_answers_both_ops_with_the_function_replaced():
    assert views.matches_torch(), "FakeTensorMode's view implementation changed: check neurarch.fake.views against it"


def test_random_views_are_torchs():
    rng = random.Random(20261204)
    mode = ft.FakeTensorMode()
    plain = errors = 0
    for _ in range(4000):
        t, target = _random_case(rng)
        op = rng.choice(OPS)
        with mode:
            fake = mode.from_tensor(t)
            theirs = _outcome(views._TORCH_VIEW, mode, op, fake, target)
            mine = _outcome(views.view_meta, mode, op, fake, target)
        assert mine == theirs, (tuple(t.shape), t.stride(), target, op)
        errors += isinstance(theirs, str)
        try:
            views.view_layout(tuple(t.shape), t.stride(), t.is_contiguous(), list(torch._prims_common.infer_size(target, t.numel())))
            plain += 1
        except (views._NotPlain, RuntimeError):
            pass
    assert plain > 3000  # most cases take the arithmetic, not torch's function
    assert errors > 50  # and torch's errors are met too


def test_views_by_hand():
    """Strides worked out by hand, and the size-1 dimensions where torch's helper and the
    C++ view differ: the helper's choice is kept (it is what the simulation always saw)."""
    contiguous = torch.empty(2, 12)
    assert views.view_layout((2, 12), (12, 1), True, [2, 3, 4]) == ([2, 3, 4], [12, 4, 1])
    assert views.view_layout((2, 12), (12, 1), True, [24]) == ([24], [1])
    assert contiguous.t().view(12, 2, 1).shape == (12, 2, 1)
    assert views.view_layout((12, 2), (1, 12), False, [12, 2, 1]) == ([12, 2, 1], [1, 12, 12])  # C++ says (1, 12, 1)
    with pytest.raises(views._NotPlain):  # a transposed matrix cannot be flattened without a copy
        views.view_layout((12, 2), (1, 12), False, [24])
    with pytest.raises(views._NotPlain):  # an empty tensor is torch's function's
        views.view_layout((0, 3), (3, 1), True, [3, 0])


class _Compare:
    def __init__(self):
        self.calls = self.differ = 0
        self.first_difference = None
        self.fast = views.view_meta  # before the test puts this class's function in its place

    def function(self):
        def view(mode, func, a, *shape, allow_copy=False):
            self.calls += 1
            mine = _outcome(lambda m, f, t, s: self.fast(m, f, t, *s, allow_copy=allow_copy), mode, func, a, shape)
            theirs = _outcome(lambda m, f, t, s: views._TORCH_VIEW(m, f, t, *s, allow_copy=allow_copy), mode, func, a, shape)
            if mine != theirs:
                self.differ += 1
                self.first_difference = self.first_difference or (tuple(a.shape), a.stride(), shape, mine, theirs)
            return views._TORCH_VIEW(mode, func, a, *shape, allow_copy=allow_copy)

        return view


CASES = [
    (LLAMA, "llama", TrainSetup(mode="lora", precision="bf16-mixed")),
    (LLAMA, "llama", TrainSetup(mode="inference", precision="bf16")),
    (BERT, "bert", TrainSetup(mode="full", precision="fp32")),
]


@pytest.mark.parametrize("cfg,name,setup", CASES, ids=[f"{c[1]}-{c[2].mode}" for c in CASES])
def test_every_view_of_a_simulation_is_torchs(cfg, name, setup, monkeypatch):
    compare = _Compare()
    monkeypatch.setattr(views, "view_meta", compare.function())
    monkeypatch.setattr(misses, "COMPUTE", False)  # a view missed is computed by its meta kernel otherwise (neurarch.fake.misses)
    monkeypatch.setattr(gaps, "_UNSAFE_VIEW", None)  # every _unsafe_view reaches the function too
    ft.FakeTensorMode.cache_clear()
    built = build_from_config(dict(cfg), name)
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=16, batch=2))
    estimate_with_curve(built, with_batch(plan, 3), setup, cache=False, cut_depth=False)
    assert compare.calls > 20
    assert compare.differ == 0, compare.first_difference


def test_unsafe_view_is_answered_as_a_cached_view_on_the_same_storage():
    mode = ft.FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        x = torch.empty(4, 6, 8)
    answer = gaps.FakeGaps().answer
    ft.FakeTensorMode.cache_clear()
    with mode:
        first = answer(aten._unsafe_view.default, (x, [24, 8]))
        hits = ft.FakeTensorMode.cache_hits
        again = answer(aten._unsafe_view.default, (x, [24, 8]))
    assert ft.FakeTensorMode.cache_hits == hits + 1
    with mode:
        theirs = views._TORCH_VIEW(mode, aten._unsafe_view.default, x, [24, 8])
    for out in (first, again):
        assert (tuple(out.shape), out.stride(), out.storage_offset()) == (tuple(theirs.shape), theirs.stride(), theirs.storage_offset()) == ((24, 8), (8, 1), 0)
        assert out.untyped_storage()._cdata == x.untyped_storage()._cdata


@pytest.mark.parametrize("setup", [TrainSetup(mode="lora", precision="bf16-mixed"), TrainSetup(mode="full", precision="fp32")], ids=["lora", "full"])
def test_a_plans_figures_with_the_fast_views_are_those_with_torchs(setup, monkeypatch):
    def turn_off():
        monkeypatch.setattr(views, "matches_torch", lambda: False)  # fast_views leaves torch's function in place
        monkeypatch.setattr(gaps, "_UNSAFE_VIEW", None)  # and _unsafe_view is torch's, uncached

    fast, plain = with_and_without(setup, turn_off)
    assert fast == plain


def test_fast_views_nests_and_puts_torchs_function_back():
    outside = views._DEPTH[0] == 0
    with views.fast_views():
        with views.fast_views():
            assert all(fi.op_implementations_dict[op] is views.view_meta for op in OPS)
        assert all(fi.op_implementations_dict[op] is views.view_meta for op in OPS)
    if outside:
        assert all(fi.op_implementations_dict[op] is views._TORCH_VIEW for op in OPS)
