"""benchmarks/cli_timeline.py: a real console run, its four points in the order they happen.

One run of the console command on a tiny local config, with this checkout's ``src/``:
the supervisor is up before the plan starts, the plan ends before the command exits,
and the command's own exit is the wall clock the script reports (measured here too).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from benchmark_script import load
from tiny_configs import LLAMA

SRC = Path(__file__).resolve().parents[2] / "src"


def test_one_run_notes_the_points_in_order(tmp_path):
    tl = load("cli_timeline")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(tl.SITE)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(dict(LLAMA, num_hidden_layers=2)))
    t0 = time.time()
    points = tl.once(SRC, site, str(config))
    outside = time.time() - t0
    assert list(points) == list(tl.POINTS)
    assert 0 < points["supervisor up"] < points["analyze start"] < points["analyze end"] < points["exit"] <= outside
