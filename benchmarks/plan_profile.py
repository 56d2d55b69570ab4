"""Where a plan's time goes around its simulated steps: the planner's own functions, profiled.

    python benchmarks/plan_profile.py gpt2
    python benchmarks/plan_profile.py microsoft/swin-tiny-patch4-window7-224 --seq-len 512   # any neurarch-trace option

Runs ``neurarch-trace MODEL --plan --format json --no-cache`` twice in this process,
the jobs in it one after another (``NEURARCH_JOBS=1``, no supervising child), and
profiles the second (cProfile): its imports are done and FakeTensor's cache holds
the first plan's ops, so what is left is the planner's work and the steps
themselves.  Prints, for the functions that make up a simulation, the calls and
the cumulative seconds, and each one's share of all the simulations
(``simulate_by_depth``): the steps (``train``, inference's ``body``) against what
runs around them (copying and preparing the model, turning its weights fake,
the optimizer's warm-up, reading the runs' points, the steady views).  cProfile
slows Python code more than torch's C++: the shares are a guide, not a timing.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile

# (function name, the file it is in under src/neurarch/): what one simulation is made of
FUNCTIONS = [
    ("simulate_by_depth", "plan/by_depth.py"),
    ("_simulate", "plan/simulation.py"),
    ("_run", "plan/simulation.py"),
    ("train", "plan/train/loop.py"),
    ("body", "plan/inference.py"),
    ("warm_up", "plan/train/optimizer.py"),
    ("prepared_copy", "plan/simulation.py"),
    ("meta_copy", "fake/convert.py"),
    ("weights_to_fake", "fake/convert.py"),
    ("quantize_4bit", "plan/train/adapters.py"),
    ("points", "plan/depth.py"),
    ("extrapolate", "plan/depth.py"),
    ("steady_view", "plan/by_depth.py"),
    ("_between", "plan/by_depth.py"),
    ("_predict", "plan/by_depth.py"),
    ("_replay", "plan/simulation.py"),
    ("_count_step", "cost/estimate.py"),
    ("trace", "trace/run.py"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Any other option goes to neurarch-trace as it is (--batch 4, --seq-len 512, ...).")
    ap.add_argument("model", help="a model id, config.json or model folder")
    a, rest = ap.parse_known_args()
    os.environ["NEURARCH_SUPERVISE"] = "0"
    os.environ["NEURARCH_JOBS"] = "1"
    os.environ.setdefault("NEURARCH_CACHE_DIR", tempfile.mkdtemp(prefix="neurarch-profile-"))

    from neurarch.cli import main as cli

    def plan() -> None:
        out, sys.stdout = sys.stdout, open(os.devnull, "w")
        try:
            rc = cli([a.model, "--plan", "--format", "json", "--no-cache", *rest])
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        finally:
            sys.stdout.close()
            sys.stdout = out
        if rc:
            sys.exit(f"plan_profile.py: neurarch-trace ended with exit code {rc} (its error above)")

    plan()
    prof = cProfile.Profile()
    prof.enable()
    plan()
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    found = {}
    for (path, _line, name), (_cc, calls, _tt, cum, _callers) in stats.items():
        for fn, where in FUNCTIONS:
            if name == fn and path.replace(os.sep, "/").endswith("neurarch/" + where):
                n, s = found.get(fn, (0, 0.0))
                found[fn] = (n + calls, s + cum)
    total = found.get("simulate_by_depth", (0, 0.0))[1]
    print(f"`neurarch-trace {' '.join([a.model, *rest])} --plan`, the second plan in one process, the jobs in it (cProfile)\n")
    print("| function | where | calls | cumulative s | of the simulations |")
    print("|---|---|---:|---:|---:|")
    for fn, where in FUNCTIONS:
        if fn in found:
            n, s = found[fn]
            share = f"{100 * s / total:.0f} %" if total and fn not in ("_count_step", "trace") else ""
            print(f"| `{fn}` | {where} | {n} | {s:.3f} | {share} |")


if __name__ == "__main__":
    main()
