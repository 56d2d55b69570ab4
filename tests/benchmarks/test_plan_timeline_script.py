"""benchmarks/plan_timeline.py: the names its child wraps are the ones a plan calls.

The child times a real ``--plan`` by replacing ``neurarch.jobs._call_job`` (each job, in its
worker), ``Jobs.results`` and three of ``neurarch.pipeline``'s names.  When the code renames or
moves one, the timeline silently loses that row; this test fails first, without running a plan.
"""

from __future__ import annotations

import inspect
import re

import neurarch.jobs as jobs
import neurarch.pipeline as pipeline
from benchmark_script import load


def _child() -> str:
    return load("plan_timeline").CHILD


def test_the_pipeline_names_it_wraps_are_called_by_analyze():
    wrapped = re.findall(r'^wrap\("(\w+)"', _child(), re.M)
    assert sorted(wrapped) == ["prepare", "resolve_spec", "trace"]
    body = inspect.getsource(pipeline.analyze)
    for name in wrapped:
        assert callable(getattr(pipeline, name)) and f"{name}(" in body, f"analyze no longer calls pipeline.{name}"


def test_every_job_runs_through_call_job():
    assert "jobs._call_job = call" in _child() and "jobs.Jobs.results = waited" in _child()
    assert "_call_job" in inspect.getsource(jobs.Jobs)  # workers and the one-process path both call it
