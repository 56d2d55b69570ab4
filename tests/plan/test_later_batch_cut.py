"""A cut model at a third batch: the run at the smaller cut simulated, the larger read off its lines.

The batch search simulates each card's batch (its check).  For a model cut to 2 and
3 repeats (neurarch.plan.depth), after two batches whose runs lined up, a later
batch simulates the 2-repeat run only; when every storage of it lies on its line
through the two earlier batches, the 3-repeat run is read off its own lines
(neurarch.plan.by_depth._predict).  The reference in each test is independent of
that shortcut: a whole-model simulation (``cut_depth=False``), or both cut runs
simulated at that batch (no earlier batches known), or numbers worked by hand.
"""

from __future__ import annotations

import dataclasses

import pytest

from neurarch.build import build_from_config
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan import by_depth
from neurarch.plan.memory import estimate_with_curve, with_batch
from neurarch.plan.tracker import Life
from neurarch.plan.train import TrainSetup
from tiny_configs import LLAMA as TINY_LLAMA
from tiny_configs import clip

LLAMA = dict(TINY_LLAMA, num_hidden_layers=7)
CLIP = clip(8)  # both towers deep enough that the cut runs cost less than the whole model
FIELDS = ("peak_tensor_bytes", "peak_bytes", "breakdown", "trainable_parameters", "kv_cache_bytes", "phase", "module", "step")


def _built(cfg, name):
    built = build_from_config(dict(cfg), name)
    return built, plan_inputs(built.model, built.config, InputOptions(seq_len=24, batch=2))


def _at(built, plan, setup, b, **kw):
    return estimate_with_curve(built, with_batch(plan, b), setup, steady_only=setup.mode != "inference", **kw)


@pytest.mark.parametrize("mode,precision", [("full", "bf16-mixed"), ("lora", "fp32"), ("inference", "bf16-mixed")])
def test_a_third_batch_reads_the_larger_cut_off_its_lines(mode, precision):
    built, plan = _built(LLAMA, "llama")
    setup = TrainSetup(mode=mode, precision=precision)
    for b in (2, 3):  # the two batches both cut runs are simulated at
        _at(built, plan, setup, b)
    before = by_depth.predicted_runs()
    later = {b: _at(built, plan, setup, b) for b in (5, 11)}
    assert by_depth.predicted_runs() == before + 2
    for b, (mem, curve) in later.items():
        whole = _at(built, plan, setup, b, cut_depth=False)[0]
        for f in FIELDS:
            assert getattr(mem, f) == getattr(whole, f), (b, f)
        # Both cut runs simulated at this batch, in a model that has seen no other batch.
        fresh, _ = _built(LLAMA, "llama")
        mem2, curve2 = _at(fresh, plan, setup, b)
        assert mem == mem2
        assert curve == curve2  # every op's bytes, what the batch search reads


@pytest.mark.parametrize("mode,precision", [("full", "bf16-mixed"), ("lora", "fp32"), ("inference", "bf16-mixed")])
def test_batches_between_three_on_one_line_are_read_off_with_nothing_simulated(mode, precision, monkeypatch):
    # Both cut runs at 2 and 3; the smaller one at 13, on its lines.  Past the largest of the three,
    # the smaller cut is simulated again.
    _read_off_between(LLAMA, "llama", TrainSetup(mode=mode, precision=precision), (2, 3, 13), (4, 8, 12), 14, monkeypatch)


def _read_off_between(cfg, name, setup, simulated, between, past, monkeypatch):
    """Simulate ``simulated``; then every batch of ``between`` is read off with simulation
    turned off, each equal to both cut runs simulated at that batch in a model that has
    seen no other batch, and to the whole model; ``past`` is simulated again."""
    built, plan = _built(cfg, name)
    for b in simulated:
        _at(built, plan, setup, b)

    def no_simulation(*a, **k):
        raise AssertionError("simulated a batch that lies between batches on one curve")

    monkeypatch.setattr(by_depth, "simulate", no_simulation)
    monkeypatch.setattr(by_depth, "simulate_inference", no_simulation)
    before = by_depth.read_batches()
    later = {b: _at(built, plan, setup, b) for b in between}
    assert by_depth.read_batches() == before + len(between)
    monkeypatch.undo()
    for b, (mem, curve) in later.items():
        fresh, _ = _built(cfg, name)
        assert _at(fresh, plan, setup, b) == (mem, curve), b
        whole = _at(built, plan, setup, b, cut_depth=False)[0]
        for f in FIELDS:
            assert getattr(mem, f) == getattr(whole, f), (b, f)
    before = by_depth.read_batches()
    _at(built, plan, setup, past)
    assert by_depth.read_batches() == before


@pytest.mark.parametrize("mode,precision", [("full", "bf16-mixed"), ("qlora", "bf16"), ("inference", "bf16-mixed")])
def test_a_model_simulated_whole_reads_batches_between_three_on_one_line(mode, precision, monkeypatch):
    built, plan = _built(LLAMA, "llama")
    setup = TrainSetup(mode=mode, precision=precision)
    for b in (2, 3, 13):
        _at(built, plan, setup, b, cut_depth=False)

    def no_simulation(*a, **k):
        raise AssertionError("simulated a batch that lies between three on one line")

    monkeypatch.setattr(by_depth, "simulate", no_simulation)
    monkeypatch.setattr(by_depth, "simulate_inference", no_simulation)
    before = by_depth.read_batches()
    later = {b: _at(built, plan, setup, b, cut_depth=False) for b in (4, 9, 12)}
    assert by_depth.read_batches() == before + 3
    monkeypatch.undo()
    for b, got in later.items():
        fresh, _ = _built(LLAMA, "llama")  # simulated at this batch alone
        assert _at(fresh, plan, setup, b, cut_depth=False) == got, b


def test_between_by_hand():
    # Batches 1 and 2 (the references, both cuts) and 5 (the smaller cut, on its line): a storage
    # of 50 b + 50 bytes, the larger cut's 70 b + 60.  Between 1 and 5 both are read off.
    refs = {1: (_run([100, 40]), _run([130, 40])), 2: (_run([150, 40]), _run([200, 40]))}
    spans = {(2, 1): (1, 5)}
    got = by_depth._between(refs, spans, 4)
    assert got is not None
    assert [x.nbytes for x in got[0].lives] == [250, 40]
    assert [x.nbytes for x in got[1].lives] == [340, 40]
    assert by_depth._between(refs, spans, 6) is None  # past the span: simulate
    assert by_depth._between(refs, spans, 2) is None  # a reference itself
    assert by_depth._between(refs, {}, 4) is None  # no third batch on the line yet


def test_sizes_that_grow_with_the_square_of_the_batch_need_a_third_batch():
    # CLIP's contrastive logits are batch x batch: at a third batch the 2-repeat run is off
    # its lines, so the 3-repeat run is simulated too; from the fourth on, each storage lies
    # on its parabola through the three, and the 3-repeat run is read off its own.
    built, plan = _built(CLIP, "clip")
    setup = TrainSetup(mode="full", precision="fp32")
    for b in (2, 3):
        _at(built, plan, setup, b)
    before = by_depth.predicted_runs()
    third, _ = _at(built, plan, setup, 6)
    assert by_depth.predicted_runs() == before
    fourth, curve = _at(built, plan, setup, 10)
    assert by_depth.predicted_runs() == before + 1
    for b, mem in ((6, third), (10, fourth)):
        whole = _at(built, plan, setup, b, cut_depth=False)[0]
        for f in FIELDS:
            assert getattr(mem, f) == getattr(whole, f), (b, f)
    fresh, _ = _built(CLIP, "clip")
    assert _at(fresh, plan, setup, 10) == (fourth, curve)


def _run(sizes, ends=(5, None), ops=((1, 1, "forward", "m"), (3, 1, "forward", "m"), (6, 1, "forward", "m"))):
    lives = [Life(n, start, end, 1, "forward", "m") for n, start, end in zip(sizes, (1, 2), ends)]
    return by_depth._Run(lives, list(ops), 1, 10, 10, None, None, 4)


def test_predict_by_hand():
    # Batch 1: storages of 100 and 40 bytes; batch 2: 150 and 40 (a 50-byte slope and a
    # weight).  The larger cut at batch 1: 130 and 40, at 2: 200 and 40.
    refs = {1: (_run([100, 40]), _run([130, 40])), 2: (_run([150, 40]), _run([200, 40]))}
    got = by_depth._predict(refs, 4, _run([250, 40]))  # on its lines: 100 + 3 x 50
    assert got is not None
    assert [x.nbytes for x in got[0].lives] == [130 + 3 * 70, 40]
    assert sorted(got[1]) == [1, 2]  # the line through these two
    # Off its line (a size that does not grow by 50 a sample): simulate.
    assert by_depth._predict(refs, 4, _run([260, 40])) is None
    # Another op order at this batch (a storage freed elsewhere): simulate.
    assert by_depth._predict(refs, 4, _run([250, 40], ends=(2, None))) is None
    # A larger cut whose line lands between two whole bytes: simulate.
    refs_odd = {1: refs[1], 3: (_run([200, 40]), _run([131, 40]))}
    assert by_depth._predict(refs_odd, 2, _run([150, 40])) is None
    # A batch that is a reference itself is simulated (it was).
    assert by_depth._predict(refs, 2, _run([150, 40])) is None


def test_predict_a_parabola_by_hand():
    # A storage of 10 b^2 + 5 bytes at batches 1, 2, 3 (15, 45, 95); the larger cut's 20 b^2 (20, 80, 180).
    refs = {b: (_run([10 * b * b + 5, 40]), _run([20 * b * b, 40])) for b in (1, 2, 3)}
    got = by_depth._predict(refs, 4, _run([165, 40]))
    assert got is not None
    assert [x.nbytes for x in got[0].lives] == [320, 40]
    assert sorted(got[1]) == [1, 2, 3]
    assert by_depth._predict(refs, 4, _run([166, 40])) is None  # on no parabola through the three


def test_frees_between_the_same_two_ops_may_come_in_any_order():
    # Two storages freed together (autocast's cache cleared) between the ops at events 3 and 6:
    # their free events swap from run to run, and no figure reads the order.
    a = by_depth._Run([Life(8, 1, 4, 1, "forward", "m"), Life(8, 2, 5, 1, "forward", "m")], [(1, 1, "forward", "m"), (3, 1, "forward", "m"), (6, 1, "forward", "m")], 1, 1, 1, None, None, 6)
    b = dataclasses.replace(a, lives=[Life(16, 1, 5, 1, "forward", "m"), Life(16, 2, 4, 1, "forward", "m")])
    assert by_depth._same_runs(a, b)
    c = dataclasses.replace(a, lives=[Life(16, 1, 2, 1, "forward", "m"), Life(16, 2, 5, 1, "forward", "m")])  # freed before the op at 3
    assert not by_depth._same_runs(a, c)


def test_batches_between_four_on_one_parabola_are_read_off_with_nothing_simulated(monkeypatch):
    # CLIP's batch-by-batch logits: both cut runs at 2, 3 and 6 (off the lines at 6), the smaller
    # cut alone at 20 (on its parabolas through the three).  Four batches on one parabola: every
    # batch between 2 and 20 is read off, nothing simulated; 21, past the span, is simulated.
    _read_off_between(CLIP, "clip", TrainSetup(mode="full", precision="fp32"), (2, 3, 6, 20), (4, 11, 19), 21, monkeypatch)


def test_between_a_parabola_by_hand():
    # A storage of 10 b^2 + 5 bytes at batches 1, 2, 3, the larger cut's 20 b^2; the smaller cut
    # at 7 lay on its parabola (495 bytes), so 1 to 7 is one span.
    refs = {b: (_run([10 * b * b + 5, 40]), _run([20 * b * b, 40])) for b in (1, 2, 3)}
    spans = {(3, 2, 1): (1, 7)}
    got = by_depth._between(refs, spans, 5)
    assert got is not None
    assert [x.nbytes for x in got[0].lives] == [255, 40]
    assert [x.nbytes for x in got[1].lives] == [500, 40]
    assert by_depth._between(refs, spans, 8) is None


def test_lagrange_weights_are_whole_numbers_over_one_denominator():
    # Line through batches 1 and 2, at 4: y(4) = -2 y(1) + 3 y(2), denominator 1.
    assert by_depth._weights([1, 2], 4) == ((-2, 3), 1)
    # Line through 2 and 4, at 3: the mean, (y(2) + y(4)) / 2.
    assert by_depth._weights([2, 4], 3) == ((1, 1), 2)
    # Parabola through 1, 2, 3, at 4: y(4) = y(1) - 3 y(2) + 3 y(3) (third differences of a square vanish).
    assert by_depth._weights([1, 2, 3], 4) == ((1, -3, 3), 1)
    # Parabola through 1, 3, 4, at 2: Lagrange's weights 1/3, 1, -1/3 -> (1, 3, -1) over 3.
    assert by_depth._weights([1, 3, 4], 2) == ((1, 3, -1), 3)
    # A storage of 10 b^2 + 5 bytes: at 1, 3, 4 it is 15, 95, 165; at 2, (15 + 3 x 95 - 165) / 3 = 45.
    assert by_depth._value(by_depth._weights([1, 3, 4], 2), [15, 95, 165]) == 45
