"""Speed and memory of the core trace (issue targets, measured, not tested).

    python benchmarks/speed.py            # prints a Markdown table
    python benchmarks/speed.py --plan     # also the memory plan (minutes)

Targets (2-core CPU): a full trace (forward + backward) of Llama-3.1-70B's
config at batch 1, seq 4096 in <= 10 s with <= 1.5 GB peak RSS; import +
resnet-50 in <= 3 s; ``--plan`` (all modes, all cards) for Llama-3.1-70B at
seq 4096 in <= 20 s and for a 7B in <= 5 s.  The plan's modes run in forked
worker processes (one per core), forked right after the build so they run
while the parent traces the model (the plan cases' forward/backward columns
are slower for it: three processes share two cores); the workers' peak RSS is
the last column.  Each case runs in a fresh Python process so import time and
peak RSS are the real ones a user sees; trace cases best of 3, plan cases best
of 2.  ``benchmarks/import_floor.py`` measures what a plan must import and
trace before its first simulation.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

PLAN_CASES = {
    "--plan microsoft/resnet-50 (all modes, all cards)": "microsoft/resnet-50 --plan",
    "--plan Llama-3.2-1B, seq 2048 (all modes, all cards)": "meta-llama/Llama-3.2-1B-Instruct --plan",
    "--plan Llama-2-7b, seq 4096 (all modes, all cards)": "meta-llama/Llama-2-7b-hf --seq-len 4096 --plan",
    "--plan Llama-3.1-70B, seq 4096 (all modes, all cards)": "meta-llama/Llama-3.1-70B-Instruct --seq-len 4096 --plan",
}

CASES = {
    "import + microsoft/resnet-50": "microsoft/resnet-50",
    "Llama-3.1-70B, batch 1, seq 4096": "meta-llama/Llama-3.1-70B-Instruct --seq-len 4096",
    "Llama-3.1-8B, batch 1, seq 4096": "meta-llama/Llama-3.1-8B-Instruct --seq-len 4096",
}

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from neurarch import analyze, Options
from neurarch.inputs import InputOptions
t_import = time.perf_counter() - t0
args = sys.argv[1].split()
seq = int(args[args.index("--seq-len") + 1]) if "--seq-len" in args else None
batch = {"batch": int(args[args.index("--batch") + 1])} if "--batch" in args else {}
from neurarch.pipeline import PlanOptions
r = analyze(args[0], Options(inputs=InputOptions(seq_len=seq, **batch), plan=PlanOptions() if "--plan" in args else None))
total = time.perf_counter() - t0
assert r.forward_pass.ok and r.backward_pass.ok
print(json.dumps({"import_s": t_import, "total_s": total, "forward_s": r.forward_pass.seconds,
                  "backward_s": r.backward_pass.seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "child_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "layers": r.structure.layers}))
"""


def run(spec: str, repeats: int = 3) -> dict:
    best = None
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", CHILD, spec], capture_output=True, text=True, check=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        if best is None or res["total_s"] < best["total_s"]:
            best = res
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", action="store_true", help="also the memory plan cases (minutes)")
    with_plan = ap.parse_args().plan
    import torch
    import transformers

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
        f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}; {time.strftime('%Y-%m-%d')}"
    )
    print("best of 3 fresh processes (plan cases: best of 2)\n")
    print("| case | total s | import s | forward s | backward s | peak RSS MB | largest worker RSS MB | rows |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    cases = {**CASES, **(PLAN_CASES if with_plan else {})}
    for name, spec in cases.items():
        r = run(spec, repeats=2 if "--plan" in spec else 3)
        print(f"| {name} | {r['total_s']:.2f} | {r['import_s']:.2f} | {r['forward_s']:.2f} | {r['backward_s']:.2f} | {r['rss_mb']:.0f} | {r.get('child_rss_mb', 0):.0f} | {r['layers']} |")


if __name__ == "__main__":
    main()
