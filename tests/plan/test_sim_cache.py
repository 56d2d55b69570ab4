"""The simulation cache on disk: a second plan simulates nothing and says the same.

Every test gets its own cache directory (``NEURARCH_CACHE_DIR`` under
``tmp_path``) and runs the plan's jobs in this process (``NEURARCH_JOBS=1``),
so the simulation counter sees every simulation.  The yardstick is the same
plan computed with the cache off: a cached report must equal it byte for byte
(timings aside).
"""

import json

import pytest

from neurarch import Options, analyze
from neurarch.inputs import InputOptions
from neurarch.pipeline import CostOptions, PlanOptions
from neurarch.plan import cache, memory
from neurarch.plan.train import TrainSetup


def plan(spec, seq=32, modes=("full", "inference"), cost=None, **kw):
    before = memory.simulations_run()
    r = analyze(spec, Options(inputs=InputOptions(seq_len=seq), plan=PlanOptions(modes=modes, **kw), cost=cost, verify=False))
    return r, memory.simulations_run() - before


def figures(r) -> dict:
    """The report without its timings."""
    doc = json.loads(r.model_dump_json())
    for k in ("forward_pass", "backward_pass"):
        if doc.get(k):
            doc[k].pop("seconds", None)
    doc.pop("tool", None)
    return doc


def files(tmp_path):
    return sorted((tmp_path / "cache" / "sims").glob("*/*.json"))


def test_second_plan_simulates_nothing_and_says_the_same(model, tmp_path, monkeypatch):
    first, n1 = plan(model)
    assert n1 > 0 and files(tmp_path)
    again, n2 = plan(model)
    assert n2 == 0  # every simulation came from the disk
    assert figures(again) == figures(first)
    # Another headline card, prices and epochs only read the simulations: none is run.
    _, n3 = plan(model, cost=CostOptions(card="H100", prices={"A10G": 9.0}, epochs=2))
    assert n3 == 0
    # Cards, headroom, prices and cost options only read the simulations; the yardstick
    # is the same options computed with the cache off.
    other_options = dict(headroom=1.5, cost=CostOptions(card="H100", cards=("Tiny:2",), prices={"A10G": 9.0}, epochs=2))
    other, _ = plan(model, **other_options)
    monkeypatch.setenv("NEURARCH_NO_CACHE", "1")
    fresh, n4 = plan(model, **other_options)
    assert n4 > 0
    assert figures(other) == figures(fresh)
    for mode in ("full", "inference"):
        assert figures(first)["memory"][mode] == figures(fresh)["memory"][mode]


def sim(built, inputs, **kw):
    """One memory simulation through the cache; returns (figures, whether it simulated)."""
    run = {k: kw.pop(k) for k in ("steady_only", "context_len") if k in kw}  # the rest is the recipe
    before = memory.simulations_run()
    mem, curve = memory.estimate_with_curve(built, inputs, TrainSetup(**kw), cache=True, **run)
    return (mem.model_dump_json(), sorted(curve.values.items())), memory.simulations_run() > before


@pytest.fixture
def built(model):
    from neurarch.build import build
    from neurarch.inputs import plan_inputs
    from neurarch.sources import resolve

    source = resolve(model)
    b = build(source)
    return b, plan_inputs(b.model, b.config, InputOptions(seq_len=32), source.default_input_shape)


def test_an_option_that_changes_a_simulation_misses(built):
    b, inputs = built
    first, ran = sim(b, inputs, mode="inference")
    assert ran
    assert sim(b, inputs, mode="inference") == (first, False)
    # Options inference never reads: the same file.
    assert sim(b, inputs, mode="inference", optimizer="sgd", lora_rank=4) == (first, False)
    # Options it reads: another simulation.
    assert sim(b, memory.with_batch(inputs, 2), mode="inference")[1]
    assert sim(b, inputs, mode="inference", precision="fp32")[1]
    assert sim(b, inputs, mode="inference", context_len=64)[1]


def test_lora_rank_misses_for_lora_only(built):
    b, inputs = built
    full, _ = sim(b, inputs, mode="full", steady_only=True)
    assert sim(b, inputs, mode="full", steady_only=True, lora_rank=4) == (full, False)  # full fine-tuning has no adapters
    assert sim(b, inputs, mode="full", steady_only=True, optimizer="sgd")[1]
    r16, _ = sim(b, inputs, mode="lora", steady_only=True)
    r4, ran = sim(b, inputs, mode="lora", steady_only=True, lora_rank=4)
    assert ran and r4 != r16


def test_a_changed_code_fingerprint_misses(built, monkeypatch):
    b, inputs = built
    first, _ = sim(b, inputs, mode="inference")
    monkeypatch.setattr(cache, "_package_hash", lambda: "another neurarch")
    again, ran = sim(b, inputs, mode="inference")
    assert ran and again == first
    monkeypatch.setattr(cache, "library_versions", lambda: (("torch", "0.0"),))
    assert sim(b, inputs, mode="inference")[1]


def test_a_corrupt_file_is_recomputed_not_a_crash(built, tmp_path):
    b, inputs = built
    first, _ = sim(b, inputs, mode="inference")
    (path,) = files(tmp_path)
    for garbage in ("\x00garbage", path.read_text()[:20], json.dumps({"key": "x", "value": 1}), json.dumps({"key": path.stem, "value": {"memory": 3}})):  # noise, truncated, another key, another shape
        path.write_text(garbage)
        ignored = cache.STATS["ignored"]
        again, ran = sim(b, inputs, mode="inference")
        assert ran and again == first and cache.STATS["ignored"] == ignored + 1


def test_no_cache_writes_nothing(built, tmp_path, monkeypatch):
    b, inputs = built
    monkeypatch.setenv("NEURARCH_NO_CACHE", "1")
    assert sim(b, inputs, mode="inference")[1]
    assert sim(b, inputs, mode="inference")[1]
    assert files(tmp_path) == []


def test_size_cap_evicts_the_least_recently_used(built, tmp_path):
    import os

    b, inputs = built
    for batch in (1, 2, 3):
        sim(b, memory.with_batch(inputs, batch), mode="inference")
    paths = files(tmp_path)
    assert len(paths) >= 3
    for i, p in enumerate(paths):  # file i last used at time i
        os.utime(p, (1_000_000 + i, 1_000_000 + i))
    sizes = [p.stat().st_size for p in paths]
    cap = sum(sizes) - sizes[0] - sizes[1] // 2  # room for all but the oldest one and a half
    assert cache.evict(cap) == 2
    assert files(tmp_path) == paths[2:]
