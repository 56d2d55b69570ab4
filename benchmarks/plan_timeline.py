"""When each part of one real ``--plan`` runs: the parent's steps and every job in its worker.

    python benchmarks/plan_timeline.py meta-llama/Llama-3.2-1B-Instruct
    python benchmarks/plan_timeline.py gpt2 --args "--seq-len 512"

One fresh process runs ``neurarch-trace ID --plan --format json`` as the console
command does, with the jobs forked over the cores, but without the supervising
child process (``NEURARCH_SUPERVISE=0``: the same work, timed in one place), on an
empty simulation cache.  Prints, in seconds from the process's start, when the
parent finished importing neurarch's pipeline, resolved the source (which
imports the model's modeling code), built it and planned its inputs, traced it
and had every job's result, and when each job (a memory mode, the cost count)
started and ended, in which worker.  Beside ``plan_phases.py`` (each phase alone,
one process), this shows what overlaps and where the cores wait.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
import tempfile

CHILD = r"""
import os, sys, time
T0 = time.time()
def log(what):
    print(f"{time.time() - T0:.3f}\t{os.getpid()}\t{what}", file=sys.stderr, flush=True)
import neurarch.jobs as jobs
run_one = jobs._call_job
def call(name):
    log(f"start {name}")
    out = run_one(name)
    log(f"end {name}")
    return out
jobs._call_job = call
import neurarch.pipeline as pl
log("imported neurarch.pipeline (torch, transformers)")
def wrap(name, label):
    f = getattr(pl, name)
    def inner(*a, **k):
        out = f(*a, **k)
        log(label)
        return out
    setattr(pl, name, inner)
wrap("resolve_spec", "resolved the source (its modeling code imported)")
wrap("prepare", "built on meta, inputs planned; jobs start")
wrap("trace", "traced forward + backward (the layer table)")
results = jobs.Jobs.results
def waited(self):
    out = results(self)
    log("every job's result in")
    return out
jobs.Jobs.results = waited
from neurarch.cli import main
sys.argv = ["neurarch-trace", *sys.argv[1:], "--plan", "--format", "json", "-o", os.devnull]
try:
    main()
except SystemExit:
    pass
log("report written")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--args", default="", help="more neurarch-trace options, quoted")
    a = ap.parse_args()
    env = dict(os.environ, NEURARCH_SUPERVISE="0", NEURARCH_CACHE_DIR=tempfile.mkdtemp(prefix="neurarch-timeline-"))
    load = os.getloadavg()[0]
    out = subprocess.run([sys.executable, "-c", CHILD, a.model, *shlex.split(a.args)], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    rows = []
    for line in out.stderr.splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            try:
                rows.append((float(parts[0]), int(parts[1]), parts[2]))
            except ValueError:
                pass
    if not rows:
        sys.exit(f"no timeline: exit {out.returncode}: {(out.stderr.strip().splitlines() or [''])[-1]}")
    parent = rows[0][1]
    workers = {p: f"worker {i + 1}" for i, p in enumerate(sorted({p for _, p, _ in rows if p != parent}))}
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {load:.2f} at start; python {platform.python_version()}")
    print(f"`neurarch-trace {a.model} {a.args} --plan --format json`, empty cache, jobs forked, no supervising child\n".replace("  ", " "))
    print("| s | where | what |\n|---:|---|---|")
    for t, p, what in rows:
        print(f"| {t:.2f} | {'parent' if p == parent else workers[p]} | {what} |")
    starts = {w: t for t, p, w in rows if w.startswith("start ")}
    print()
    for t, p, w in rows:
        if w.startswith("end "):
            name = w[4:]
            print(f"{name}: {t - starts['start ' + name]:.2f} s in {workers.get(p, 'the parent')}")
    if out.returncode != 0:
        sys.exit(f"the plan exited {out.returncode}")


if __name__ == "__main__":
    main()
