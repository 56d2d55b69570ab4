"""What cyclic garbage collection costs a plan's worker processes, and what turning it off keeps in memory.

    python benchmarks/worker_gc.py                                   # Swin-tiny, Llama-3.2-1B, t5-small
    python benchmarks/worker_gc.py gpt2 --rounds 3

A plan's workers (neurarch.pipeline._worker_init) run with no cyclic collection.
Each row runs ``neurarch-trace MODEL --plan --format json`` in fresh processes,
with the jobs forked as the console command forks them (no supervising child,
``NEURARCH_SUPERVISE=0``) and an empty simulation cache each time, two ways
alternating: as shipped (the workers' collection off) and with the workers'
collection turned back on (``gc.enable()`` after ``_worker_init``).  Prints per
way the best wall time, the seconds the workers spent collecting (gc.callbacks,
summed over the workers) and the largest worker's peak resident memory
(``RUSAGE_CHILDREN``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

CHILD = r"""
import gc, json, os, resource, sys, time
t0 = time.perf_counter()
collect = sys.argv[1] == "on"
import neurarch.jobs as jobs
import neurarch.pipeline as pl
read, write = os.pipe()
init = pl._worker_init
def worker_init():
    init()
    if collect:
        gc.enable()
    spent = [0.0, 0.0]
    def cb(phase, info):
        if phase == "start":
            spent[1] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - spent[1]
    gc.callbacks.append(cb)
    run = jobs._call_job
    def call(name):
        try:
            return run(name)
        finally:
            os.write(write, (json.dumps(spent[0]) + "\n").encode())
            spent[0] = 0.0
    jobs._call_job = call
pl._worker_init = worker_init
from neurarch.cli import main
sys.argv = ["neurarch-trace", sys.argv[2], "--plan", "--format", "json", "-o", os.devnull]
try:
    main()
except SystemExit:
    pass
wall = time.perf_counter() - t0
os.close(write)
with os.fdopen(read) as f:
    gc_s = sum(json.loads(line) for line in f if line.strip())
print(json.dumps({"wall": wall, "gc": gc_s, "rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def run(model: str, way: str) -> dict:
    env = dict(os.environ, NEURARCH_SUPERVISE="0", NEURARCH_CACHE_DIR=tempfile.mkdtemp(prefix="neurarch-gc-"))
    env.pop("NEURARCH_NO_CACHE", None)
    out = subprocess.run([sys.executable, "-c", CHILD, way, model], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        sys.exit(f"{model} ({way}): exit {out.returncode}: {(out.stderr.strip().splitlines() or [''])[-1]}")
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["microsoft/swin-tiny-patch4-window7-224", "meta-llama/Llama-3.2-1B-Instruct", "t5-small"])
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; python {platform.python_version()}")
    print(f"{a.rounds} alternating pairs per model; best wall time, the workers' collecting time in that run, the largest worker's peak memory\n")
    print("| model | workers collecting: off (as shipped) s | gc s | worker peak MB | on s | gc s | worker peak MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for model in a.models:
        runs: dict[str, list[dict]] = {"off": [], "on": []}
        for i in range(a.rounds):
            for way in ("off", "on") if i % 2 == 0 else ("on", "off"):
                runs[way].append(run(model, way))
        best = {w: min(r, key=lambda x: x["wall"]) for w, r in runs.items()}
        peak = {w: max(x["rss_mb"] for x in r) for w, r in runs.items()}
        off, on = best["off"], best["on"]
        print(f"| {model} | {off['wall']:.2f} | {off['gc']:.2f} | {peak['off']:.0f} | {on['wall']:.2f} | {on['gc']:.2f} | {peak['on']:.0f} |")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
