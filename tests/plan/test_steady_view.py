"""The steady state seen alone: step 2 of the input batch's two steps as a reference for the card checks.

A card's check simulates step 2 after a warm-up that only makes the optimizer
state (``steady_only``); the input batch runs two real steps.  Seen from step 2
on (neurarch.plan.by_depth.steady_view), the two runs are the same when step 1
leaves nothing but that state, so the input batch becomes one more batch on the
checks' lines.  The references here are independent of that: a second, separate
simulation of the steady state, a whole-model simulation (``cut_depth=False``),
or both cut runs simulated at the batch in a model that has seen no other.
"""

from __future__ import annotations

import dataclasses

import pytest

from neurarch.build import build_from_config
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan import by_depth, depth
from neurarch.plan.memory import estimate_with_curve, with_batch
from neurarch.plan.simulation import simulate
from neurarch.plan.train import TrainSetup
from tiny_configs import LLAMA as TINY_LLAMA

LLAMA = dict(TINY_LLAMA, num_hidden_layers=7)
FIELDS = ("peak_tensor_bytes", "peak_bytes", "breakdown", "trainable_parameters", "kv_cache_bytes", "phase", "module", "step")
RECIPES = [
    TrainSetup(mode="full", precision="bf16-mixed"),
    TrainSetup(mode="lora", precision="fp32"),
    TrainSetup(mode="qlora", precision="bf16"),
    TrainSetup(mode="full", precision="fp32", optimizer="sgd"),
    TrainSetup(mode="full", precision="bf16-mixed", zero_grad_set_to_none=False),
    TrainSetup(mode="lora", precision="bf16-mixed", grad_accumulation=2),
]


def _built(batch=2):
    built = build_from_config(dict(LLAMA), "llama")
    return built, plan_inputs(built.model, built.config, InputOptions(seq_len=24, batch=batch))


def _cut_run(built, plan, setup, steady_only):
    stacks = depth.stacks_of(built.model)
    with depth.cut(built.model, stacks, 2) as short:
        sim = simulate(dataclasses.replace(built, model=short), plan, setup, steps=2, record_ops=True, steady_only=steady_only)
    return by_depth._Run(sim.lives, sim.ops, sim.steps, sim.trainable_parameters, sim.parameters, sim.kv_cache_bytes, sim.context_len, sim.forward_end)


@pytest.mark.parametrize("setup", RECIPES, ids=lambda s: f"{s.mode}-{s.precision}-{s.optimizer}-{s.zero_grad_set_to_none}-{s.grad_accumulation}")
def test_step_2_of_two_steps_is_what_a_steady_check_runs(setup):
    built, plan = _built()
    plan = with_batch(plan, 3)
    two, steady = _cut_run(built, plan, setup, False), _cut_run(built, plan, setup, True)
    assert len(two.ops) > len(steady.ops)  # step 1's forward and backward ran in one, not the other
    a, b = by_depth.steady_view(two), by_depth.steady_view(steady)
    assert a is not None and b is not None
    assert by_depth._same_runs(a, b)
    assert [x.nbytes for x in a.lives] == [x.nbytes for x in b.lives]
    # What the view keeps is all step 2 reads: its ops are the run's own from step 2 on.
    assert len(b.ops) == sum(1 for op in steady.ops if op[1] >= 2)


def test_a_run_of_one_step_has_no_steady_view():
    built, plan = _built()
    stacks = depth.stacks_of(built.model)
    with depth.cut(built.model, stacks, 2) as short:
        sim = simulate(dataclasses.replace(built, model=short), plan, TrainSetup(), steps=1, record_ops=True)
    run = by_depth._Run(sim.lives, sim.ops, sim.steps, sim.trainable_parameters, sim.parameters, sim.kv_cache_bytes, sim.context_len, sim.forward_end)
    assert by_depth.steady_view(run) is None


@pytest.mark.parametrize("setup", RECIPES[:3], ids=lambda s: s.mode)
def test_an_input_batch_above_one_is_a_reference_for_the_checks(setup):
    # Input batch 4 (two steps, both cut runs), then checks at 2 (both cut runs: one reference
    # is not a line) and 9: there the smaller cut is simulated and lies on the line through 4
    # and 2, so the larger is read off it.  Without the input batch as a reference, 9 would
    # simulate both (a model that has seen only batch 2).
    built, plan = _built(batch=4)
    learnt, predicted = by_depth.steady_references(), by_depth.predicted_runs()
    # Each batch on its own copy of the plan, as a plan's mode job runs them: the first
    # simulation resolves its copy's token counts, the others' copies are made unresolved.
    estimate_with_curve(built, with_batch(plan, 4), setup)  # the input batch: two steps
    assert by_depth.steady_references() == learnt + 1
    estimate_with_curve(built, with_batch(plan, 2), setup, steady_only=True)
    assert by_depth.predicted_runs() == predicted
    mem, curve = estimate_with_curve(built, with_batch(plan, 9), setup, steady_only=True)
    assert by_depth.predicted_runs() == predicted + 1
    fresh, _ = _built(batch=4)
    assert estimate_with_curve(fresh, with_batch(plan, 9), setup, steady_only=True) == (mem, curve)
    whole = estimate_with_curve(built, with_batch(plan, 9), setup, steady_only=True, cut_depth=False)[0]
    for f in FIELDS:
        assert getattr(mem, f) == getattr(whole, f), f


@pytest.mark.parametrize("setup", RECIPES[:2], ids=lambda s: s.mode)
def test_a_model_simulated_whole_takes_its_input_batch_as_a_reference(setup, monkeypatch):
    # Simulated whole: input batch 4 (two steps), checks at 2 and 9 (simulated; 9 lies on the
    # line through 4 and 2, storage by storage), so 6, between three on one line, is read off
    # with nothing simulated.  Without the input batch, 9 would be the second reference and
    # 6 a simulation.
    built, plan = _built(batch=4)
    learnt = by_depth.steady_references()
    estimate_with_curve(built, with_batch(plan, 4), setup, cut_depth=False)
    assert by_depth.steady_references() == learnt + 1
    for b in (2, 9):
        estimate_with_curve(built, with_batch(plan, b), setup, steady_only=True, cut_depth=False)

    def no_simulation(*a, **k):
        raise AssertionError("simulated a batch that lies between three on one line")

    monkeypatch.setattr(by_depth, "simulate", no_simulation)
    read = by_depth.read_batches()
    got = estimate_with_curve(built, with_batch(plan, 6), setup, steady_only=True, cut_depth=False)
    assert by_depth.read_batches() == read + 1
    monkeypatch.undo()
    fresh, _ = _built(batch=4)
    assert estimate_with_curve(fresh, with_batch(plan, 6), setup, steady_only=True, cut_depth=False) == got


def test_a_moved_life_keeps_every_field_but_its_events():
    """Life.moved (the view's fast copy) against dataclasses.replace, every field set to a value of its own."""
    from neurarch.plan.tracker import Life

    values = {"nbytes": 512, "start": 3, "end": 9, "step": 2, "phase": "backward", "module": "model.layers.0", "role": "gradient"}
    life = Life(**values, survives_forward=True, survives_optimizer=True, weight_copy=True)
    assert {f.name for f in dataclasses.fields(Life)} == {*values, "survives_forward", "survives_optimizer", "weight_copy"}
    assert life.moved(1, None) == dataclasses.replace(life, start=1, end=None)
    assert life.moved(1, 4) != life and life.moved(3, 9) == life
