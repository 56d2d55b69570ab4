"""benchmarks/fake_floor.py: its two paths run the same training step.

The script times neurarch's simulated step beside the same step under torch's
FakeTensorMode alone.  The comparison means something only if both run the same
ops: the script counts, for each path, the ops that reach FakeTensorMode (a mode
right above it), and they must be equal; here on a tiny Llama, LoRA and full
fine-tuning (without the CUDA kernel choices or transformers' packed-sequence
answer on the bare path, the counts differed: the check can fail).
"""

from __future__ import annotations

import json
import subprocess
import sys

from benchmark_script import BENCHMARKS
from tiny_configs import LLAMA


def test_both_paths_run_the_same_ops(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "fake_floor.py"), str(tmp_path / "config.json"), "--modes", "lora,full", "--batch", "2", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith(f"| {tmp_path}")]
    assert [r[1].strip() for r in rows] == ["lora", "full"], out.stdout
    for r in rows:
        simulated_ops, bare_ops = int(r[-2]), int(r[-1])
        assert simulated_ops == bare_ops > 100, r
        assert all(float(r[i].split()[0].rstrip("x")) > 0 for i in (3, 4, 5, 6, 7)), r
    lora, full = (int(r[-1]) for r in rows)
    assert lora > full  # the adapters' own ops


def test_bad_arguments_exit_2():
    for args in (["--batch", "0"], ["--modes", "inference"], ["--repeat", "0"]):
        out = subprocess.run([sys.executable, str(BENCHMARKS / "fake_floor.py"), "gpt2", *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "error:" in out.stderr, (args, out.stderr)
