"""While a plan's workers simulate, the parent traces on one torch thread, and only then.

Measured: torch's intra-op thread count inside :meth:`neurarch.jobs.Jobs.one_thread`
and during a real plan's trace (read by the trace itself), and after both (the
caller's setting back).  ``docs/benchmarks.md`` ("The night round's change")
has what it saves.
"""

from __future__ import annotations

import json
import time

import torch

import neurarch.pipeline as pipeline
from neurarch.jobs import Jobs
from neurarch.options import InputOptions, Options, PlanOptions
from tiny_configs import LLAMA


def _nap() -> int:
    time.sleep(0.2)
    return 1


def test_one_thread_while_workers_run_and_the_setting_back_after():
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        jobs = Jobs({"a": _nap, "b": _nap}, workers=2)
        try:
            with jobs.one_thread():
                inside = torch.get_num_threads()
            after = torch.get_num_threads()
            assert all(o.ok for o in jobs.results().values())
        finally:
            jobs.close()
        here = Jobs({"a": _nap, "b": _nap}, workers=1)  # no workers: the jobs run in this process, on its threads
        with here.one_thread():
            alone = torch.get_num_threads()
        here.results()
        assert (inside, after, alone) == (1, 2, 2)
    finally:
        torch.set_num_threads(saved)


def test_a_plans_trace_runs_on_one_thread_beside_its_workers(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURARCH_JOBS", "2")  # workers even on a one-core machine
    monkeypatch.setenv("NEURARCH_NO_CACHE", "1")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(dict(LLAMA, num_hidden_layers=2)))
    seen = []
    real = pipeline.trace

    def trace(*a, **k):
        seen.append(torch.get_num_threads())
        return real(*a, **k)

    monkeypatch.setattr(pipeline, "trace", trace)
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        opts = Options(inputs=InputOptions(seq_len=16), plan=PlanOptions(modes=("full", "inference")), cost=None)
        report = pipeline.analyze(str(config), opts)
        assert report.memory is not None and seen == [1] and torch.get_num_threads() == 2
        seen.clear()
        pipeline.analyze(str(config), Options(inputs=InputOptions(seq_len=16)))  # no plan, no workers: the trace keeps the threads
        assert seen == [2]
    finally:
        torch.set_num_threads(saved)
