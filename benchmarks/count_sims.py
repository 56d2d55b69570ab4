"""How many simulations one real ``--plan`` runs, per mode and batch.

    python benchmarks/count_sims.py microsoft/resnet-50
    python benchmarks/count_sims.py meta-llama/Llama-3.2-1B-Instruct --batch 4
    PYTHONPATH=/tmp/old/src python benchmarks/count_sims.py gpt2   # another tree's code (git archive REV src)

Runs ``neurarch-trace MODEL --plan --format json [options]`` in this process, with
the jobs forked over the cores as the console command forks them (no
supervising child, ``NEURARCH_SUPERVISE=0``) and the simulation cache off
(``NEURARCH_NO_CACHE=1``).  Every call of the simulator is counted where it
happens, in the worker: a model cut short counts one call per cut run (the
smaller and the larger cut), a model simulated whole one per batch.  Prints a
line per mode (the batches simulated, in order, and how many runs each; in
training, the steps those runs simulated: two for a run of the input batch's two
steps, one for a steady-state run) and the total.  Counts, not seconds: the same
on any machine.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Any other option goes to neurarch-trace as it is (--batch 4, --seq-len 512, ...).")
    ap.add_argument("model", help="a model id, config.json or model folder")
    a, rest = ap.parse_known_args()
    argv = [a.model, *rest]
    os.environ["NEURARCH_SUPERVISE"] = "0"
    os.environ["NEURARCH_NO_CACHE"] = "1"
    os.environ.setdefault("NEURARCH_CACHE_DIR", tempfile.mkdtemp(prefix="neurarch-count-"))
    read, write = os.pipe()
    os.set_inheritable(write, True)

    from neurarch.plan import by_depth

    def spy(fn, label):
        def call(built, plan, setup, *a, **kw):
            steps = 1 if kw.get("steady_only") or label else kw.get("steps", 2)  # inference: one pass
            os.write(write, f"{label or setup.mode} {plan.batch} {steps}\n".encode())
            return fn(built, plan, setup, *a, **kw)

        return call

    by_depth.simulate = spy(by_depth.simulate, None)
    by_depth.simulate_inference = spy(by_depth.simulate_inference, "inference")

    from neurarch.cli import main as cli

    with open(os.devnull, "w") as null:
        out, sys.stdout = sys.stdout, null
        try:
            cli([a.model, "--plan", "--format", "json", *rest])
        except SystemExit:
            pass
        finally:
            sys.stdout = out
    os.close(write)
    with os.fdopen(read) as f:
        calls = [line.split() for line in f.read().splitlines()]
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    steps: collections.Counter = collections.Counter()
    for mode, batch, n in calls:
        per[mode][int(batch)] += 1
        steps[mode] += int(n)
    print(f"{' '.join(argv)}: {len(calls)} simulator runs")
    for mode, batches in per.items():
        took = "" if mode == "inference" else f"; {steps[mode]} training steps"
        print(f"  {mode}: {sum(batches.values())} ({', '.join(f'batch {b} x{n}' for b, n in batches.items())}){took}")


if __name__ == "__main__":
    main()
