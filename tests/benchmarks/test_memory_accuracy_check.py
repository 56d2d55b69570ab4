"""benchmarks/memory_accuracy.py --check-estimates: the simulator's side of the accuracy table, again.

The file benchmarks/memory_accuracy.json holds each row's estimate as the simulator gave it when the
row was measured beside a real CPU step, and that step's measured peak; simulating the gpt2 rows again
must give those estimates (and so the measured peaks, to a millionth), and a row whose estimate is
changed in a copy of the file must be reported as differing (exit 1).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from benchmark_script import BENCHMARKS


def _check(script, *args):
    return subprocess.run([sys.executable, str(script), "--check-estimates", "--only", "gpt2", *args], capture_output=True, text=True, timeout=600)


def test_the_gpt2_rows_simulate_to_the_files_estimates():
    out = _check(BENCHMARKS / "memory_accuracy.py")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 of 4 estimates the same" in out.stdout
    # and those are the peaks real CPU steps measured (the file's "measured"), to a millionth
    measured = json.loads((BENCHMARKS / "memory_accuracy.json").read_text())
    for line in out.stdout.splitlines():
        if line.startswith("gpt2|"):
            key, rest = line.split(": the same (", 1)
            steady = int(rest.split(" bytes steady")[0].replace(",", ""))
            assert abs(steady - measured[key]["measured"]) <= 1e-6 * measured[key]["measured"], (key, steady)


def test_a_changed_estimate_is_reported(tmp_path):
    script = tmp_path / "benchmarks" / "memory_accuracy.py"
    script.parent.mkdir()
    shutil.copy(BENCHMARKS / "memory_accuracy.py", script)
    rows = json.loads((BENCHMARKS / "memory_accuracy.json").read_text())
    rows["gpt2|full|fp32"]["estimate"] += 512
    (script.parent / "memory_accuracy.json").write_text(json.dumps(rows))
    (tmp_path / "src").symlink_to(BENCHMARKS.parent / "src")  # the catalog configs the script reads
    out = _check(script)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "gpt2|full|fp32: DIFFERS" in out.stdout and "3 of 4 estimates the same" in out.stdout
