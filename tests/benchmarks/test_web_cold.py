"""benchmarks/web_cold.py: its percentiles, its completeness verdict and its table, without a server."""

from __future__ import annotations

import pytest

from benchmark_script import load


@pytest.fixture(scope="module")
def wc():
    return load("web_cold")


def test_nearest_rank_percentiles(wc):
    values = [float(v) for v in range(20, 0, -1)]  # 20 .. 1, unsorted on purpose
    # nearest rank: p50 of 20 values is the 10th smallest, p95 the 19th
    assert wc.pct(values, 50) == 10.0
    assert wc.pct(values, 95) == 19.0
    assert wc.pct(values, 100) == 20.0
    assert wc.pct([7.5], 95) == 7.5
    assert wc.pct([1.0, 2.0, 3.0], 50) == 2.0  # ceil(1.5) = 2nd


def _report(**modes):
    memory: dict = {m: {"peak_bytes": 1} for m in ("full", "lora", "qlora", "inference")}
    memory.update(modes)
    memory["errors"] = {}
    return {
        "memory": memory,
        "cards": [{"name": "A10G"}],
        "cost": {"headline": {}},
        "errors": {},
        "forward_pass": {"ok": True},
        "backward_pass": {"ok": True},
    }


def test_a_full_report_is_complete(wc):
    assert wc.completeness(_report()) == (True, [], [])


def test_a_mode_the_model_cannot_have_is_not_applicable(wc):
    r = _report(qlora=None)
    r["memory"]["errors"] = {"qlora": "ResNetForImageClassification has no linear layer for QLoRA to quantize"}
    complete, missing, na = wc.completeness(r)
    assert complete and missing == [] and na == ["qlora: ResNetForImageClassification has no linear layer for QLoRA to quantize"]


def test_a_missing_mode_or_a_section_error_is_incomplete(wc):
    r = _report(lora=None)
    assert wc.completeness(r) == (False, ["lora"], [])
    r = _report(full=None)
    r["memory"]["errors"] = {"full": "RuntimeError: shape mismatch"}
    assert wc.completeness(r)[1] == ["full: RuntimeError: shape mismatch"]
    r = _report()
    r["cost"] = None
    r["errors"] = {"verifier": "KeyError: x"}
    r["backward_pass"] = {"ok": False}
    assert wc.completeness(r) == (False, ["cost", "verifier: KeyError: x", "backward_pass"], [])


def test_table_rows(wc):
    rows = [
        {"model": "gpt2", "seconds": 52.71, "status": 200, "worker_s": 52.5, "load_average": 3.46, "complete": True, "not_applicable": []},
        {"model": "facebook/bart-large-cnn", "seconds": 310.04, "status": 504, "error": "the plan took longer than the server's limit of 300 s per request"},
    ]
    text = wc.table(rows)
    assert "| gpt2 | 52.7 | 200 | 52.5 | 3.5 | yes |" in text
    assert "| facebook/bart-large-cnn | 310.0 | 504 |  |  | the plan took longer" in text


def test_the_phases_it_times_exist():
    """--phases wraps these by name: a rename must fail here, not time nothing."""
    import neurarch.inputs.prepare as prep
    import neurarch.jobs as jobs
    import neurarch.pipeline as pl
    import neurarch.verify as verify
    import neurarch.warm as warm

    for mod, names in ((pl, ("resolve_spec", "_start_jobs", "trace", "build_params", "build_structure", "_mode_job", "_count_job")), (prep, ("build", "plan_inputs", "recipe_model"))):
        for name in names:
            assert callable(getattr(mod, name)), name
    assert callable(warm.priced_sections) and callable(verify.run) and callable(jobs.Jobs.results)
