"""The console command's limits hold from a parent process (issue: bounded work).

`neurarch-trace MODEL` runs each model in a child process whose wall clock and
resident memory the parent watches: a model stuck in C code, where the
pipeline's own timer cannot fire, is killed; a run that holds more memory than
``--memory-limit`` is stopped.  Either way: one line on stderr, exit code 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the supervisor reads /proc")

STUCK = """
import signal, time
import torch.nn as nn

def Stuck():
    # Block every signal the pipeline's timer or the supervisor's soft limit could use, then wait in C:
    # only a kill from outside ends this.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT, signal.SIGTERM})
    time.sleep(600)
    return nn.Linear(2, 2)
"""


def _cli(*args, timeout=240, cwd=None):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("NEURARCH_SUPERVISE", None)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "neurarch.cli", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    return proc, time.monotonic() - t0


def test_a_model_stuck_in_c_code_is_killed_at_the_limit(tmp_path):
    model = tmp_path / "stuck.py"
    model.write_text(STUCK)
    proc, seconds = _cli(f"python:{model}:Stuck", "--timeout", "2", "--no-verify", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "over the time limit of 2 s" in lines[0], proc.stderr
    # timeout 2 s + margin 0.5 s + grace 2 s, plus start-up; far below the 600 s the model would wait
    assert seconds < 120, seconds


def test_memory_limit_stops_a_real_run():
    proc, _ = _cli("gpt2", "--memory-limit", "150MB", "--no-verify")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "MemoryLimit" in lines[0] and "--memory-limit" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_supervised_command_gives_the_published_count():
    """Under the supervisor the report is the same one.  all-MiniLM-L6-v2 (BERT, 6 layers, width 384, FFN 1536,
    vocab 30,522, 512 positions) by hand: embeddings 30522*384 + 512*384 + 2*384 + LayerNorm 768 = 11,918,592;
    per layer 4*(384*384+384) + 768 + (384*1536+1536) + (1536*384+384) + 768 = 1,774,464, six of them 10,646,784;
    pooler 384*384+384 = 147,840; in all 22,713,216 parameters.  The published checkpoint holds 22,713,728
    (512 more: the saved position_ids buffer)."""
    proc, _ = _cli("sentence-transformers/all-MiniLM-L6-v2", "--format", "json", "--no-verify", "--no-backward")
    assert proc.returncode == 0, proc.stderr
    import json

    params = json.loads(proc.stdout)["params"]
    assert params["parameters"] == 22_713_216
    assert params["checkpoint"] == 22_713_728


def test_bad_memory_limit_is_one_line():
    proc, seconds = _cli("gpt2", "--memory-limit", "lots")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "--memory-limit" in proc.stderr
