"""Seconds a plan spends in Python's cyclic garbage collection, per process, with and without the hold.

    python benchmarks/collection_time.py                                   # Llama-3.2-1B-Instruct
    python benchmarks/collection_time.py gpt2 microsoft/swin-tiny-patch4-window7-224

Each model's ``--plan --format json`` runs three times, each time in a fresh Python
process with an empty cache and the jobs forked as the console command forks
them (no supervising child, so the run is this script's child itself): once as a
library caller runs it (collection as Python sets it); once held until the model
is built (:func:`neurarch.jobs.hold_collection`: no collection until then, then the
start-up's objects frozen and collection back on), as the console command's child
did before; once as it does now, held for the whole run
(``hold_collection(whole_run=True)``: frozen once built, no collection at all).  ``gc.callbacks``
time every collection.  Per run: the wall clock, the seconds until the jobs
start (imports, resolving the source, the build), and per process (the parent,
each job's worker) the collections' count and seconds, full ones apart.  Not a
test: the seconds depend on the machine.
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
import gc, json, os, sys, time
T0 = time.perf_counter()
HOLD = sys.argv[2] in ("hold", "whole")
stats = {"n": 0, "s": 0.0, "full_n": 0, "full_s": 0.0}
start = [0.0]
def timed(phase, info):
    if phase == "start":
        start[0] = time.perf_counter()
        return
    d = time.perf_counter() - start[0]
    stats["n"] += 1; stats["s"] += d
    if info["generation"] == 2:
        stats["full_n"] += 1; stats["full_s"] += d
gc.callbacks.append(timed)
import neurarch.jobs as jobs
if HOLD:
    jobs.hold_collection(whole_run=sys.argv[2] == "whole")
rows = []
run_one = jobs._call_job
def call(name):
    stats.update(n=0, s=0.0, full_n=0, full_s=0.0)
    out = run_one(name)
    print(json.dumps({"process": f"worker: {name}", **stats}), file=sys.stderr, flush=True)
    return out
jobs._call_job = call
import neurarch.pipeline as pl
prepare = pl.prepare
def built(*a, **k):
    out = prepare(*a, **k)
    print(json.dumps({"jobs start": time.perf_counter() - T0}), file=sys.stderr, flush=True)
    return out
pl.prepare = built
from neurarch.cli import main
try:
    main([sys.argv[1], "--plan", "--format", "json", "-o", os.devnull])
except SystemExit:
    pass
print(json.dumps({"process": "parent", **stats, "wall": time.perf_counter() - T0}), file=sys.stderr, flush=True)
"""


def run(model: str, how: str) -> list[dict]:
    env = dict(os.environ, NEURARCH_SUPERVISE="0", NEURARCH_CACHE_DIR=tempfile.mkdtemp(prefix="neurarch-gc-"))
    out = subprocess.run([sys.executable, "-c", CHILD, model, how], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    rows = []
    for line in out.stderr.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    if not any("wall" in r for r in rows):
        sys.exit(f"{model} ({how}) failed: {(out.stderr.strip().splitlines() or [''])[-1]}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=["meta-llama/Llama-3.2-1B-Instruct"], help="model ids (default: Llama-3.2-1B-Instruct)")
    models = ap.parse_args().models
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; python {platform.python_version()}\n")
    print("| model | collection | wall s | jobs start s | process | collections (full) | seconds in them (full) |")
    print("|---|---|---:|---:|---|---:|---:|")
    for model in models:
        for how in ("python's", "hold", "whole"):
            rows = run(model, how)
            parent = next(r for r in rows if r.get("process") == "parent")
            start = next(r["jobs start"] for r in rows if "jobs start" in r)
            label = {"python's": "as Python sets it", "hold": "held until built, then frozen", "whole": "held for the whole run, frozen once built"}[how]
            for r in [parent, *(r for r in rows if str(r.get("process", "")).startswith("worker"))]:
                print(f"| {model} | {label} | {parent['wall']:.2f} | {start:.2f} | {r['process']} | {r['n']} ({r['full_n']}) | {r['s']:.3f} ({r['full_s']:.3f}) |")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
