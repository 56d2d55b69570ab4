"""Every benchmark script answers ``--help`` with its usage and runs nothing, and refuses an
unknown option with argparse's one-line error (exit 2) before it times anything.  Scripts
that read ``sys.argv`` by hand, or not at all, timed their default cases on ``--help``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py"))


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60, cwd=BENCHMARKS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_prints_the_usage_and_runs_nothing(name):
    proc = _run(f"{name}.py", "--help")
    assert proc.returncode == 0, proc.stderr[-500:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:200]
    assert "machine:" not in proc.stdout and "| model" not in proc.stdout  # nothing was timed


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_unknown_option_is_a_one_line_usage_error(name):
    proc = _run(f"{name}.py", "--no-such-option-xyz")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])
    assert proc.stderr.splitlines()[-1].startswith(f"{name}.py: error:"), proc.stderr[-300:]
