"""benchmarks/trace_cut.py: a deep tiny Llama's layer table is the same whole and cut, and the cut is used.

The script compares the two ways on every run and exits 1 on a difference; here
it runs on a 9-layer Llama (above ``neurarch.pipeline.CUT_TRACE_UNITS``, so the
cut is offered) and a 2-layer one (not offered: traced whole both ways).
"""

from __future__ import annotations

import json
import subprocess
import sys

from benchmark_script import BENCHMARKS
from tiny_configs import LLAMA


def test_same_table_both_ways_and_the_cut_used_where_offered(tmp_path):
    deep, shallow = tmp_path / "deep", tmp_path / "shallow"
    deep.mkdir()
    shallow.mkdir()
    (deep / "config.json").write_text(json.dumps(dict(LLAMA, num_hidden_layers=9)))
    (shallow / "config.json").write_text(json.dumps(LLAMA))
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "trace_cut.py"), str(deep / "config.json"), str(shallow / "config.json"), "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {r[0].strip(): [c.strip() for c in r[1:]] for r in (line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith(f"| {tmp_path}"))}
    d, s = rows[str(deep / "config.json")], rows[str(shallow / "config.json")]
    assert d[0] == "`model.layers`, 9 repeats of 1" and d[3:] == ["yes", "yes"], d
    assert s[0] == "none" and s[3:] == ["no", "yes"], s
    assert "2 of 2 the same table both ways" in out.stdout


def test_bad_repeat_exits_2():
    out = subprocess.run([sys.executable, str(BENCHMARKS / "trace_cut.py"), "gpt2", "--repeat", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "error:" in out.stderr, out.stderr
