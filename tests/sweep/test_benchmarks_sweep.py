"""The coverage benchmarks run their model types through neurarch.sweep: rows as the committed CSVs have them."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

from neurarch.sweep import SweepRecord

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def cov():
    return _load("coverage")


@pytest.fixture(scope="module")
def pc():
    return _load("plan_coverage")


def _committed(name: str) -> dict[str, dict]:
    return {r["model_type"]: r for r in csv.DictReader(open(ROOT / "docs" / f"{name}.csv"))}


def _as_csv(row: dict) -> dict:
    return {k: "" if v is None else str(v) for k, v in row.items()}


def _without_timings(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "seconds" and not k.endswith("_seconds")}


def test_coverage_rows_match_the_committed_run(cov, tmp_path):
    # bert traces; glm_image_vqmodel does not, and its real check fails the same way (the row records both)
    rows = cov.run_all(["bert", "glm_image_vqmodel"], timeout=120, verbose=False, jobs=1, results=str(tmp_path / "r.jsonl"))
    committed = _committed("coverage")
    for row in rows:
        assert _without_timings(_as_csv(row)) == _without_timings(committed[row["model_type"]])
    assert rows[1]["real_check"] == "same failure"


def test_plan_coverage_row_matches_the_committed_run(pc, tmp_path):
    rows = pc.run_all(["vit_msn"], timeout=120, layers=2, verbose=False, jobs=1)
    assert _without_timings(_as_csv(rows[0])) == _without_timings(_committed("plan_coverage")["vit_msn"])


def test_a_type_killed_mid_way_keeps_the_modes_it_finished(pc):
    partial = {k: "" for k in pc.FIELDS}
    partial.update(model_type="m", model_class="MModel", depth="2 layers", stage="lora", full="ok", full_error="")
    rec = SweepRecord("m", "m", "hang", error="Hang: ...", seconds=185.0, progress=partial)
    row = pc.row_of(rec, 180)
    assert row["full"] == "ok" and row["model_class"] == "MModel"
    assert row["lora"] == row["inference"] == "error"
    assert row["lora_error"] == "hang: WorkerHang: no answer 180 s after it started"
    crash = pc.row_of(SweepRecord("d", "d", "crash", exit_code=-11), 180)
    assert all(crash[m] == "error" and crash[f"{m}_error"] == "crash: WorkerCrash: exit code -11" for m in pc.MODES)


def test_coverage_crash_row_names_the_last_stderr_line(cov):
    rec = SweepRecord("t", "t", "crash", exit_code=-6, stderr_tail=["...", "Fatal Python error: Aborted"])
    row = cov.row_of(rec, 200)
    assert row["stage"] == "crash" and row["error"] == "WorkerCrash: Fatal Python error: Aborted"
    assert row["backward"] is False and row["model_type"] == "t"
