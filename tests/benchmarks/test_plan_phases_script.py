"""benchmarks/plan_phases.py: every function its per-phase child wraps still exists where it wraps it.

The child times phases by replacing module attributes (``timed(module, name, label)``).
When the code moves a function (the redesign moved ``build`` and ``plan_inputs`` out of
``neurarch.pipeline``), the child fails at start-up with an AttributeError; this test
fails first, without running a plan.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

from benchmark_script import load


def _child_source() -> str:
    return load("plan_phases").PHASES_CHILD


def test_every_timed_target_exists():
    src = _child_source()
    aliases = dict((alias, module) for module, alias in re.findall(r"^import ([\w.]+) as (\w+)$", src, re.M))
    targets = re.findall(r"^timed\((\w+), \"(\w+)\"", src, re.M)
    assert len(targets) >= 8, targets  # build, inputs, trace, counts, layer table, simulations, cost, verifier
    for alias, name in targets:
        module = importlib.import_module(aliases[alias])
        assert callable(getattr(module, name, None)), f"{aliases[alias]}.{name} is gone: plan_phases.py times nothing there"


def test_the_wrapped_names_are_the_ones_the_plan_calls():
    # build and plan_inputs are looked up in neurarch.inputs.prepare's namespace when prepare() runs
    import neurarch.inputs.prepare as prep

    assert "build(source)" in Path(prep.__file__).read_text()
    assert "plan_inputs(" in Path(prep.__file__).read_text()


def test_help_prints_the_usage_and_runs_nothing():
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "plan_phases.py"
    proc = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--catalog --repeat 3" in proc.stdout
    assert "###" not in proc.stdout and "machine:" not in proc.stdout  # no model was timed
