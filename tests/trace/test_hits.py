"""FakeTensor's cache hits answered by neurarch.fake.hits equal torch's own.

Two references, both torch's code run on the same arguments:

* a hit's output tensor: ``FakeTensorMode._get_output_tensor_from_cache_entry``
  on the same cache entry, compared on every hit of real simulations (training
  modes, inference, QLoRA's 4-bit layers, a CNN) and on outputs made by hand (a
  view, an in-place op, several outputs, channels-last, a gradient's
  ``requires_grad``): type, shape, strides, storage offset, dtype, the storage's
  size and whether it is the view's input's, the dispatch keys, and the
  ``__dict__`` FakeTensor leaves on the tensor, key for key and in order;
* a hit answered for the tracker (:func:`neurarch.fake.hits.cached`): what the
  op gives through the dispatcher, FakeTensorMode's own handler, at the same
  moment, on every op of real simulations; and ``MISS`` wherever that handler
  would not have answered from its cache.

End to end, a plan's figures with both equal those without either.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch._subclasses import fake_tensor as ft
from torch.utils._python_dispatch import TorchDispatchMode

from neurarch.build import build_from_config
from neurarch.fake import custom, gaps, hits, misses
from neurarch.fake.views import fast_fake
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.memory import estimate_with_curve, with_batch
from neurarch.plan.train import TrainSetup
from plan_figures import with_and_without
from tiny_configs import BERT, LLAMA

aten = torch.ops.aten

RESNET = {
    "model_type": "resnet",
    "architectures": ["ResNetForImageClassification"],
    "embedding_size": 16,
    "hidden_sizes": [16, 32],
    "depths": [1, 1],
    "layer_type": "bottleneck",
    "num_labels": 10,
}


def _described(t):
    """Everything a hit's output is made of, for comparison."""
    if t is None or not isinstance(t, torch.Tensor):
        return ("value", t)
    return (
        type(t).__name__,
        tuple(t.shape),
        t.stride(),
        t.storage_offset(),
        t.dtype,
        t.requires_grad,
        t.untyped_storage().nbytes(),
        str(torch._C._dispatch_keys(t)),
        list(t.__dict__.items()),
    )


def _same_output(mine, theirs, args) -> bool:
    if isinstance(theirs, tuple):
        return isinstance(mine, tuple) and len(mine) == len(theirs) and all(_same_output(m, t, args) for m, t in zip(mine, theirs))
    if _described(mine) != _described(theirs):
        return False
    if isinstance(theirs, torch.Tensor):
        # the same storage as the same argument (a view's input), or a new one of its own
        shared = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.untyped_storage()._cdata == theirs.untyped_storage()._cdata]
        mine_shared = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.untyped_storage()._cdata == mine.untyped_storage()._cdata]
        return shared == mine_shared and (mine is theirs) == any(mine is a for a in args)
    return True


class _CompareOutputs:
    """Stands in for the fast output function during a simulation: makes both outputs from
    the entry, counts those that differ, and gives the simulation torch's."""

    def __init__(self):
        self.calls = self.differ = 0
        self.first_difference = None

    def function(self):
        def get_output(mode, state, entry, key, func, args):
            self.calls += 1
            theirs = hits._TORCH_GET(mode, state, entry, key, func, args)
            mine = FAST_GET(mode, state, entry, key, func, args)
            if not _same_output(mine, theirs, args):
                self.differ += 1
                self.first_difference = self.first_difference or (func, _described(mine), _described(theirs))
            return theirs

        return get_output


FAST_GET = hits.get_output_tensor_from_cache_entry
FAST_CACHED = hits.cached


class _CompareCached:
    """Stands in for :func:`hits.cached` in the tracker's gaps: where it answers, the op is run
    through the dispatcher too (FakeTensorMode's handler, which must hit its cache), and the two
    outputs compared; where it does not, the handler must not have answered from its cache."""

    def __init__(self):
        self.calls = self.answered = self.differ = 0
        self.first_difference = None

    def function(self):
        def cached(mode, func, args, kwargs):
            self.calls += 1
            mine = FAST_CACHED(mode, func, args, kwargs)
            if mine is hits.MISS:
                return mine
            self.answered += 1
            before = ft.FakeTensorMode.cache_hits
            theirs = func(*args, **(kwargs or {}))
            if ft.FakeTensorMode.cache_hits != before + 1 or not _same_output(mine, theirs, args):
                self.differ += 1
                self.first_difference = self.first_difference or (func, _described(mine), _described(theirs))
            return mine

        return cached


def test_this_torch_is_the_one_the_hits_were_written_for():
    assert hits.matches_torch(), "FakeTensor's constructor or cache changed: update neurarch.fake.hits"


CASES = [
    (LLAMA, "llama", TrainSetup(mode="full", precision="bf16-mixed")),
    (LLAMA, "llama", TrainSetup(mode="lora", precision="fp32")),
    (LLAMA, "llama", TrainSetup(mode="qlora", precision="bf16")),
    (LLAMA, "llama", TrainSetup(mode="inference", precision="bf16-mixed")),
    (BERT, "bert", TrainSetup(mode="full", precision="fp32", optimizer="sgd")),
    (RESNET, "resnet", TrainSetup(mode="full", precision="bf16-mixed")),
]


def _simulate(cfg, name, setup, batch=3):
    # From an empty cache: how many of the run's ops hit (the counts below) must not depend
    # on which tests ran before in this process (their entries, bypasses among them).
    ft.FakeTensorMode.cache_clear()
    built = build_from_config(dict(cfg), name)
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=16, batch=2))
    return estimate_with_curve(built, with_batch(plan, batch), setup, cache=False, cut_depth=False)


@pytest.mark.parametrize("cfg,name,setup", CASES, ids=[f"{c[1]}-{c[2].mode}" for c in CASES])
def test_every_hits_output_is_torchs(cfg, name, setup, monkeypatch):
    compare = _CompareOutputs()
    monkeypatch.setattr(hits, "get_output_tensor_from_cache_entry", compare.function())
    monkeypatch.setattr(gaps, "cached", lambda *a: hits.MISS)  # every op through FakeTensorMode's handler
    _simulate(cfg, name, setup)
    assert compare.calls > 300
    assert compare.differ == 0, compare.first_difference


@pytest.mark.parametrize("cfg,name,setup", CASES, ids=[f"{c[1]}-{c[2].mode}" for c in CASES])
def test_every_hit_answered_for_the_tracker_is_what_fake_tensor_mode_answers(cfg, name, setup, monkeypatch):
    monkeypatch.setattr(misses, "COMPUTE", False)  # hits alone (misses computed here: tests/trace/test_misses.py)
    monkeypatch.setattr(custom, "CACHE", False)  # ops FakeTensorMode never caches: tests/trace/test_custom_ops.py
    compare = _CompareCached()
    monkeypatch.setattr(gaps, "cached", compare.function())
    _simulate(cfg, name, setup)
    assert compare.answered > 200  # from an empty cache: 231 of 375 ops for the smallest case, a tiny Llama's inference
    assert compare.answered > 0.5 * compare.calls  # most ops are answered there: the test exercises it
    assert compare.differ == 0, compare.first_difference


class _Asks(TorchDispatchMode):
    """A dispatch mode that asks :func:`hits.cached` first, as the tracker's gaps do; keeps each answer."""

    def __init__(self, mode):
        super().__init__()
        self.mode, self.answers = mode, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = hits.cached(self.mode, func, args, kwargs)
        self.answers.append((func, out))
        return func(*args, **(kwargs or {})) if out is hits.MISS else out


class _Passes(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _ask(mode, func, args, kwargs=None, between=()):
    """What :func:`hits.cached` answers in the handler of a mode right above ``mode``
    (or above the modes ``between``)."""
    asker = _Asks(mode)
    with contextlib.ExitStack() as stack:
        for m in (mode, *between, asker):
            stack.enter_context(m)
        func(*args, **(kwargs or {}))
    return next(out for f, out in asker.answers if f is func)  # the op asked (a device query may follow)


def test_a_miss_or_a_bypass_is_left_to_fake_tensor_mode(monkeypatch):
    monkeypatch.setattr(misses, "COMPUTE", False)  # a miss computed here instead: tests/trace/test_misses.py
    mode = ft.FakeTensorMode(allow_non_fake_inputs=True)  # as the simulation's
    with mode:
        x = torch.empty(3, 5)
    ft.FakeTensorMode.cache_clear()
    assert _ask(mode, aten.mul.Tensor, (x, x)) is hits.MISS  # not in the cache yet (the op then ran)
    before = ft.FakeTensorMode.cache_hits
    out = _ask(mode, aten.mul.Tensor, (x, x))
    assert out is not hits.MISS and tuple(out.shape) == (3, 5) and ft.FakeTensorMode.cache_hits == before + 1
    assert _ask(mode, aten.mul.Tensor, (x, x), between=(_Passes(),)) is hits.MISS  # another mode below the caller: the op goes there
    assert hits.cached(mode, aten.mul.Tensor, (x, x), {}) is hits.MISS  # outside any handler
    assert hits.cached(ft.FakeTensorMode(), aten.mul.Tensor, (x, x), {}) is hits.MISS
    assert _ask(mode, aten.mul.Tensor, (x, torch.ones(5))) is hits.MISS  # a real tensor: torch bypasses
    _ask(mode, aten.lift_fresh.default, (torch.ones(2),))  # a constant: a bypass entry now
    assert _ask(mode, aten.lift_fresh.default, (torch.ones(2),)) is hits.MISS


def _outputs_by_hand(mode):
    """(op, args, kwargs): a view, an in-place op, several outputs, channels-last, a gradient."""
    with mode:
        x = torch.empty(2, 4, 6, 6)
        w = torch.empty(8, 4, 3, 3)
        v = torch.empty(5, 7)
        g = torch.empty(2, 4, 6, 6)
    return [
        (aten.view.default, (v, [7, 5]), {}),
        (aten.transpose.int, (v, 0, 1), {}),
        (aten.slice.Tensor, (v, 1, 2, 6), {}),
        (aten.add_.Tensor, (v, v), {}),
        (aten.native_layer_norm.default, (v, [7], None, None, 1e-5), {}),
        (aten.max.dim, (v, 1), {}),
        (aten.convolution.default, (x.to(memory_format=torch.channels_last), w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}),
        (aten.threshold_backward.default, (g, x, 0.0), {}),
        (aten.sum.dim_IntList, (x, [0, 2], True), {"dtype": torch.float64}),  # as the dispatcher passes them
        (aten._to_copy.default, (v,), {"dtype": torch.bfloat16}),
    ]


def test_outputs_by_hand_are_torchs():
    assert hits.matches_torch()  # the fast function's template is made on this first question
    mode = ft.FakeTensorMode()
    for func, args, kwargs in _outputs_by_hand(mode):
        with mode:
            func(*args, **kwargs)  # now in the cache
        state = ft._CacheKeyState(None)
        key = mode._cache_key(state, func, args, kwargs)
        entry = ft.FakeTensorMode.cache[key]
        infos = entry.output_infos if entry.is_output_tuple else [entry.output_infos[0]]
        for info in infos:
            theirs = hits._TORCH_GET(mode, state, info, key, func, args)
            mine = hits.get_output_tensor_from_cache_entry(mode, state, info, key, func, args)
            assert _same_output(mine, theirs, args), (func, _described(mine), _described(theirs))
        with fast_fake():
            with mode:
                through_torch = func(*args, **kwargs)
            answered = _ask(mode, func, args, kwargs)
        assert _same_output(answered, through_torch, args), func


@pytest.mark.parametrize("setup", [TrainSetup(mode="lora", precision="bf16-mixed"), TrainSetup(mode="inference", precision="bf16")], ids=["lora", "inference"])
def test_a_plans_figures_with_the_hits_are_those_without(setup, monkeypatch):
    def turn_off():
        monkeypatch.setattr(hits, "matches_torch", lambda: False)  # fast_hits leaves torch's function in place
        monkeypatch.setattr(gaps, "cached", lambda *a: hits.MISS)

    fast, plain = with_and_without(setup, turn_off)
    assert fast == plain


def test_fast_hits_nests_and_puts_torchs_function_back():
    outside = hits._DEPTH[0] == 0  # no block open elsewhere in this process
    with hits.fast_hits():
        with hits.fast_hits():
            assert ft.FakeTensorMode._get_output_tensor_from_cache_entry is hits.get_output_tensor_from_cache_entry
        assert ft.FakeTensorMode._get_output_tensor_from_cache_entry is hits.get_output_tensor_from_cache_entry
    if outside:
        assert ft.FakeTensorMode._get_output_tensor_from_cache_entry is hits._TORCH_GET


def _same_with_and_without(monkeypatch, module, run):
    """``run()`` with ``module``'s ``cached`` answering (more than 100 ops answered there), then
    with every op passed on and torch's output function: the two results must be equal."""
    answered = []

    def counting(mode, func, args, kwargs):
        out = FAST_CACHED(mode, func, args, kwargs)
        answered.append(out is not hits.MISS)
        return out

    monkeypatch.setattr(module, "cached", counting)
    fast = run()
    assert sum(answered) > 100  # the ops were answered there: the test exercises it
    monkeypatch.setattr(module, "cached", lambda *a: hits.MISS)
    monkeypatch.setattr(hits, "matches_torch", lambda: False)
    assert run() == fast


def test_a_cost_count_with_the_hits_is_the_one_without(monkeypatch):
    from neurarch.cost import count_step
    from neurarch.trace import trace

    def count():
        built = build_from_config(dict(LLAMA, num_hidden_layers=5), "llama")
        opts = InputOptions(seq_len=24)
        trace(built.model, plan_inputs(built.model, built.config, opts))  # the count runs on the trace's fake model
        work = count_step(built.model, built.config, opts, "bf16-mixed")
        return [(r.op, r.phase, r.flops, r.bytes) for r in work.ops1 + work.ops2]

    _same_with_and_without(monkeypatch, gaps, count)  # the count's gaps sit right above FakeTensorMode


def test_a_trace_with_the_hits_is_the_one_without(monkeypatch):
    # The tracer's value mode sits right above FakeTensorMode: it asks the cache first too.
    from neurarch.fake import tensors
    from neurarch.trace import trace

    def traced():
        built = build_from_config(dict(LLAMA, num_hidden_layers=5), "llama")
        result = trace(built.model, plan_inputs(built.model, built.config, InputOptions(seq_len=24)))
        rows = [(e.kind, e.name, e.op, e.output_shape, e.calls) for e in result.recorder.events]
        return rows, result.output_shape, result.guessed_values, result.forward.ok, result.backward.ok

    _same_with_and_without(monkeypatch, tensors, traced)
