"""Where a console ``--plan`` spends its wall clock outside the plan itself, two commits side by side.

    python benchmarks/cli_timeline.py 98629e9 HEAD                          # Llama-3.2-1B-Instruct, 3 alternating pairs
    python benchmarks/cli_timeline.py 98629e9 HEAD --models gpt2,t5-small --rounds 4

Each run is ``python -m neurarch.cli MODEL --plan --format json`` exactly as a user
types it (supervised child and all), with ``PYTHONPATH`` at one commit's exported
``src/`` and a fresh, empty ``NEURARCH_CACHE_DIR``; its output goes to files, not
pipes, so the clock stops when the command exits (a pipe's reader would also wait
for every process still holding it).  A ``sitecustomize`` module on the path notes
the time since the command started at four points: each new Python process (the
command, its supervisor), the start and the end of ``neurarch.pipeline.analyze``
in the process that plans (the supervised child), and the command's exit.  Pairs
alternate their order (old-new, new-old, ...) so a drift in the machine's load
falls on both.  Per commit: the median of each point over the rounds, and every
run's wall clock.  Not a test: the seconds depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from snapshot_diff import export  # noqa: E402  (a commit's src/ exported, or WORKTREE: this checkout's)

SITE = r"""
import os, sys, time
_T0 = float(os.environ.get("NEURARCH_TIMELINE_T0", "0"))
_LOG = os.environ.get("NEURARCH_TIMELINE_LOG")
def _note(what):
    with open(_LOG, "a") as fh:
        fh.write(f"{os.getpid()} {time.time() - _T0:.3f} {what}\n")
if _T0 and _LOG:
    _note("python up")
    import importlib.abc, importlib.machinery
    class _Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "neurarch.pipeline":
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            run = spec.loader.exec_module
            def exec_module(module):
                run(module)
                analyze = module.analyze
                def timed(*a, **k):
                    _note("analyze start")
                    try:
                        return analyze(*a, **k)
                    finally:
                        _note("analyze end")
                module.analyze = timed
            spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, _Hook())
"""

POINTS = ("supervisor up", "analyze start", "analyze end", "exit")


def once(src: Path, site: Path, model: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="neurarch-timeline-") as tmp:
        log = Path(tmp) / "log"
        t0 = time.time()
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(site), str(src)]),
            NEURARCH_CACHE_DIR=str(Path(tmp) / "cache"),
            NEURARCH_TIMELINE_T0=repr(t0),
            NEURARCH_TIMELINE_LOG=str(log),
            HF_HUB_OFFLINE="1",
        )
        env.pop("NEURARCH_SUPERVISE", None)
        with open(Path(tmp) / "out", "w") as out, open(Path(tmp) / "err", "w") as err:
            proc = subprocess.run([sys.executable, "-m", "neurarch.cli", model, "--plan", "--format", "json"], stdout=out, stderr=err, env=env, cwd=tmp)
        wall = time.time() - t0
        if proc.returncode != 0:
            sys.exit(f"{model} failed: {(Path(tmp) / 'err').read_text().strip().splitlines()[-1:]}")
        lines = [line.split(" ", 2) for line in log.read_text().splitlines()]
    ups = [float(t) for _, t, what in lines if what == "python up"]
    point = {what: float(t) for _, t, what in lines if what.startswith("analyze")}
    return {"supervisor up": ups[1] if len(ups) > 1 else float("nan"), **point, "exit": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--models", default="meta-llama/Llama-3.2-1B-Instruct")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="neurarch-timeline-trees-") as tmp:
        site = Path(tmp) / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITE)
        trees = {a.old: export(a.old, Path(tmp) / "old"), a.new: export(a.new, Path(tmp) / "new")}
        print(f"load average {os.getloadavg()[0]:.2f} at start; {a.rounds} alternating pairs per model; seconds since the command started, median over the runs\n")
        print("| model | commit | supervisor up | analyze start | analyze end | exit (wall) | every run's wall |")
        print("|---|---|---:|---:|---:|---:|---|")
        for model in [m for m in a.models.split(",") if m]:
            runs: dict[str, list[dict]] = {a.old: [], a.new: []}
            for r in range(a.rounds):
                for rev in (a.old, a.new) if r % 2 == 0 else (a.new, a.old):
                    runs[rev].append(once(trees[rev], site, model))
            for rev in (a.old, a.new):
                med = {p: statistics.median(x[p] for x in runs[rev]) for p in POINTS}
                walls = ", ".join(f"{x['exit']:.2f}" for x in runs[rev])
                print(f"| {model} | {rev} | {med['supervisor up']:.2f} | {med['analyze start']:.2f} | {med['analyze end']:.2f} | {med['exit']:.2f} | {walls} |", flush=True)
        print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
