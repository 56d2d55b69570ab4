"""A plan's worker processes run without cyclic garbage collection; a simulation leaves it as it found it.

Measured: a worker's collection state, and the figures a plan prints with its workers'
collection off against a run with it on (``benchmarks/worker_gc.py`` times both).
The figures cannot depend on it: inside a simulation there is no collection either way.
"""

from __future__ import annotations

import gc
import json
import os

import pytest

import neurarch.pipeline as pipeline
from neurarch.build import build_from_config
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.jobs import Jobs
from neurarch.plan.memory import estimate_with_curve, with_batch
from neurarch.plan.train import TrainSetup
from tiny_configs import LLAMA


def _collecting() -> tuple[int, bool]:
    return os.getpid(), gc.isenabled()


def test_a_plans_workers_do_not_collect():
    jobs = Jobs({"a": _collecting, "b": _collecting}, workers=2, init=pipeline._worker_init)
    try:
        out = jobs.results()
    finally:
        jobs.close()
    assert all(o.ok and o.value[0] != os.getpid() and o.value[1] is False for o in out.values()), out  # in forked workers, collection off
    assert gc.isenabled()  # this process's own setting untouched


@pytest.mark.parametrize("collecting", [True, False])
def test_a_simulation_leaves_collection_as_it_found_it(collecting):
    built = build_from_config(dict(LLAMA, num_hidden_layers=2), "llama")
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=8, batch=1))
    was = gc.isenabled()
    try:
        (gc.enable if collecting else gc.disable)()
        estimate_with_curve(built, with_batch(plan, 2), TrainSetup(mode="full"), steady_only=True, cache=False)
        assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()


def test_a_plans_figures_are_the_same_with_its_workers_collecting(tmp_path, monkeypatch):
    """The plan of a model folder, jobs forked, with and without the workers' collection."""
    from neurarch.cli import main

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(dict(LLAMA, num_hidden_layers=6)))
    monkeypatch.setenv("NEURARCH_JOBS", "2")
    monkeypatch.setenv("NEURARCH_SUPERVISE", "0")

    def timeless(x):
        if isinstance(x, dict):
            return {k: timeless(v) for k, v in x.items() if k not in ("seconds", "tool")}
        return [timeless(v) for v in x] if isinstance(x, list) else x

    def plan(name: str) -> dict:
        monkeypatch.setenv("NEURARCH_CACHE_DIR", str(tmp_path / name))
        out = tmp_path / f"{name}.json"
        assert main([str(folder), "--plan", "--format", "json", "--seq-len", "16", "-o", str(out)]) == 0
        return timeless(json.loads(out.read_text()))

    off = plan("off")
    init = pipeline._worker_init

    def collecting_init():
        init()
        gc.enable()

    monkeypatch.setattr(pipeline, "_worker_init", collecting_init)
    on = plan("on")
    assert off["memory"] and off == on
