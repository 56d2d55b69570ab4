"""benchmarks/fake_views.py, fake_hits.py and collection_time.py: they measure what they say.

fake_views.py compares torch's view function with neurarch's on every case before timing
them, and fake_hits.py a cache hit's three paths; run here, each must report the outputs the same.  collection_time.py's child replaces
names of neurarch.jobs and neurarch.pipeline: when the code renames or moves one, the script
would lose a row, so this fails first, without running a plan.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import neurarch.jobs as jobs
import neurarch.pipeline as pipeline
from benchmark_script import BENCHMARKS, load


def test_fake_views_reports_the_same_outputs():
    out = subprocess.run([sys.executable, str(BENCHMARKS / "fake_views.py")], capture_output=True, text=True, timeout=300, check=True)
    lines = [line for line in out.stdout.splitlines() if "a call;" in line]
    assert len(lines) == 2 and all(line.endswith("outputs the same: True") for line in lines), out.stdout


def test_fake_hits_reports_the_same_outputs():
    out = subprocess.run([sys.executable, str(BENCHMARKS / "fake_hits.py"), "--calls", "50", "--rounds", "1"], capture_output=True, text=True, timeout=300, check=True)
    lines = [line for line in out.stdout.splitlines() if "asked of the cache first" in line]
    assert len(lines) == 4 and all(line.endswith("outputs the same: True") for line in lines), out.stdout


def test_the_names_collection_time_replaces_are_the_ones_a_plan_calls():
    child = load("collection_time").CHILD
    assert "jobs._call_job = call" in child and "pl.prepare = built" in child and "jobs.hold_collection(whole_run=" in child
    assert callable(jobs.hold_collection) and "_call_job" in inspect.getsource(jobs.Jobs)
    assert "prepare(" in inspect.getsource(pipeline.analyze) and "release_collection()" in inspect.getsource(pipeline.analyze)


def test_the_names_worker_gc_replaces_are_the_ones_a_plan_calls():
    child = load("worker_gc").CHILD
    assert "pl._worker_init = worker_init" in child and "jobs._call_job = call" in child
    assert "init=_worker_init" in inspect.getsource(pipeline._start_jobs) and "gc.disable()" in inspect.getsource(pipeline._worker_init)


def test_fake_misses_prints_a_row_per_op():
    out = subprocess.run([sys.executable, str(BENCHMARKS / "fake_misses.py"), "--calls", "20", "--rounds", "1"], capture_output=True, text=True, timeout=300, check=True)
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and not line.startswith("| op")]
    ops = [r.split("|")[1].strip().split(" ")[0] for r in rows]
    assert ops == ["mm", "add", "view", "transpose", "silu", "_to_copy", "addmm", "native_layer_norm,", "gelu_backward"], out.stdout
    assert all(float(v) > 0 for r in rows for v in r.split("|")[2:5]), out.stdout


def test_model_copy_compares_the_two_copies_before_timing_them():
    out = subprocess.run([sys.executable, str(BENCHMARKS / "model_copy.py"), "gpt2", "--rounds", "1"], capture_output=True, text=True, timeout=300, check=True)
    rows = [line for line in out.stdout.splitlines() if line.startswith("| gpt2 |")]
    assert [r.split("|")[2].strip() for r in rows] == ["full", "lora"], out.stdout
