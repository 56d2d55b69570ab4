"""Two commits side by side: ``benchmarks/speed.py``'s cases, old and new alternating.

    python benchmarks/speed_ab.py eaa4340 HEAD              # every case, 2 alternating pairs
    python benchmarks/speed_ab.py eaa4340 HEAD --rounds 4 --cases plan
    python benchmarks/speed_ab.py eaa4340 HEAD --cases "import"   # cases whose name contains this
    python benchmarks/speed_ab.py 1f774e2 HEAD --cases none --models t5-small,gpt2   # a --plan of any models
    python benchmarks/speed_ab.py 1f774e2 HEAD --cases none --models "gpt2 --batch 4"   # ... with an input batch (or --seq-len)

Each commit's ``src/`` is exported (``git archive``) into a temporary folder;
every run is a fresh process of ``speed.py``'s child script with
``PYTHONPATH`` at one tree and a fresh, empty ``NEURARCH_CACHE_DIR`` (so a
newer tree's simulation cache starts cold).  Pairs alternate their order
(old-new, new-old, ...) so a drift in the machine's load falls on both.  It
prints each case's best and every run, per commit, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import speed  # noqa: E402


def export(rev: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", rev, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def once(src: Path, spec: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(src), NEURARCH_CACHE_DIR=tempfile.mkdtemp(prefix="neurarch-ab-"))
    out = subprocess.run([sys.executable, "-c", speed.CHILD, spec], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["total_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cases", default="", help="only the cases whose name contains this text")
    ap.add_argument("--models", default="", help="comma-separated model ids, each optionally with --batch N and --seq-len N: a --plan of each (all modes, all cards), as extra cases")
    a = ap.parse_args()
    cases = {n: s for n, s in {**speed.CASES, **speed.PLAN_CASES}.items() if a.cases in n}
    cases.update({f"--plan {m} (all modes, all cards)": f"{m} --plan" for m in a.models.split(",") if m})
    with tempfile.TemporaryDirectory(prefix="neurarch-ab-trees-") as tmp:
        trees = {a.old: export(a.old, Path(tmp) / "old"), a.new: export(a.new, Path(tmp) / "new")}
        print(f"load average {os.getloadavg()[0]:.2f} at start; {a.rounds} alternating pairs per case\n")
        print(f"| case | {a.old} best s | {a.new} best s | {a.old} runs | {a.new} runs |")
        print("|---|---:|---:|---|---|")
        for name, spec in cases.items():
            runs: dict[str, list[float]] = {a.old: [], a.new: []}
            for r in range(a.rounds):
                for rev in (a.old, a.new) if r % 2 == 0 else (a.new, a.old):
                    runs[rev].append(once(trees[rev], spec))
            fmt = lambda v: ", ".join(f"{x:.1f}" for x in sorted(v))  # noqa: E731
            print(f"| {name} | {min(runs[a.old]):.1f} | {min(runs[a.new]):.1f} | {fmt(runs[a.old])} | {fmt(runs[a.new])} |", flush=True)
        print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
