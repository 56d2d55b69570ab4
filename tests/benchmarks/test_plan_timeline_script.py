"""benchmarks/plan_timeline.py: the names its child wraps are the ones a plan calls.

The child times a real ``--plan`` by replacing ``neurarch.jobs._call_job`` (each job, in its
worker), ``Jobs.results`` and three of ``neurarch.pipeline``'s names.  When the code renames or
moves one, the timeline silently loses that row; this test fails first, without running a plan.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import neurarch.jobs as jobs
import neurarch.pipeline as pipeline

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "plan_timeline.py"


def _child() -> str:
    spec = importlib.util.spec_from_file_location("plan_timeline", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CHILD


def test_the_pipeline_names_it_wraps_are_called_by_analyze():
    wrapped = re.findall(r'^wrap\("(\w+)"', _child(), re.M)
    assert sorted(wrapped) == ["prepare", "resolve_spec", "trace"]
    body = inspect.getsource(pipeline.analyze)
    for name in wrapped:
        assert callable(getattr(pipeline, name)) and f"{name}(" in body, f"analyze no longer calls pipeline.{name}"


def test_every_job_runs_through_call_job():
    assert "jobs._call_job = call" in _child() and "jobs.Jobs.results = waited" in _child()
    assert "_call_job" in inspect.getsource(jobs.Jobs)  # workers and the one-process path both call it
