"""The floor under the 7B ``--plan`` target: what a run must import and trace
before it simulates anything.

    python benchmarks/import_floor.py      # prints a Markdown table

Each row is measured in a fresh Python process, best of 3, adding one step to
the previous row's: neurarch itself (torch, pydantic), transformers' Llama
modeling code (what building the model imports), peft (LoRA injection, which
imports bitsandbytes for QLoRA), then the whole-model forward + backward trace
the layer table needs (Llama-2-7b at seq 4096).  A ``--plan`` run does all of
these before its first memory simulation; the plan's worker processes are
forked after the build, so the peft import is paid in each LoRA/QLoRA worker.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

STEPS = [
    ("import neurarch (torch, pydantic)", "import neurarch.pipeline"),
    ("+ import transformers' Llama modeling code", "import transformers.models.llama.modeling_llama"),
    ("+ import peft (and bitsandbytes)", "import peft"),
    (
        "+ build Llama-2-7b on meta and trace forward + backward at seq 4096",
        "from neurarch.sources import resolve; from neurarch.build import build; from neurarch.inputs import plan_inputs, InputOptions; "
        "from neurarch.trace import trace; s = resolve('meta-llama/Llama-2-7b-hf'); b = build(s); "
        "p = plan_inputs(b.model, b.config, InputOptions(seq_len=4096), s.default_input_shape); r = trace(b.model, p); assert r.backward.ok",
    ),
]

CHILD = r"""
import json, sys, time
codes = json.loads(sys.argv[1])
out = []
t0 = time.perf_counter()
for code in codes:
    exec(code, {})
    out.append(time.perf_counter() - t0)
print(json.dumps(out))
"""


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    codes = [c for _, c in STEPS]
    best = None
    for _ in range(3):
        res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(codes)], capture_output=True, text=True, check=True)
        times = json.loads(res.stdout.strip().splitlines()[-1])
        if best is None or times[-1] < best[-1]:
            best = times
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; python {platform.python_version()}")
    print("best of 3 fresh processes (cumulative seconds)\n")
    print("| step | seconds | cumulative s |")
    print("|---|---:|---:|")
    prev = 0.0
    for (name, _), t in zip(STEPS, best):
        print(f"| {name} | {t - prev:.2f} | {t:.2f} |")
        prev = t


if __name__ == "__main__":
    main()
