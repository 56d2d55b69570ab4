"""What copying a model costs a simulation: neurarch's deep_copy against copy.deepcopy.

    python benchmarks/model_copy.py                      # Swin-tiny, Llama-3.2-1B, t5-small
    python benchmarks/model_copy.py gpt2 --rounds 20

Every simulation runs on its own copy of the model (``neurarch.fake.convert.meta_copy``:
every parameter and buffer made anew on meta, then the module tree copied with the
same memo), and LoRA and QLoRA copy the model peft and bitsandbytes prepared.  Per model
and mode (the plain model for full fine-tuning, the prepared one for LoRA) it times the
copy both ways, best of ``--rounds``, after checking that both give the same object graph
(the walk of tests/plan/test_deep_copy.py).  Milliseconds a copy, and the modules copied.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["microsoft/swin-tiny-patch4-window7-224", "meta-llama/Llama-3.2-1B-Instruct", "t5-small"])
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()

    import torch

    from neurarch.fake import convert
    from neurarch.inputs.prepare import prepare
    from neurarch.options import Options, PlanOptions
    from neurarch.plan import simulation
    from neurarch.plan.train import TrainSetup
    from plan.test_deep_copy import same_graph

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; python {platform.python_version()}, torch {torch.__version__}")
    print(f"best of {a.rounds}, milliseconds a copy; both copies walked side by side first (the same object graph)\n")
    print("| model | mode | modules | copy.deepcopy ms | deep_copy ms |")
    print("|---|---|---:|---:|---:|")
    opts = dataclasses.replace(Options(), plan=PlanOptions())
    for spec in a.models:
        p = prepare(spec, opts)
        for mode in ("full", "lora"):
            model = p.trained.model
            if mode == "lora":
                setup = TrainSetup.from_plan(opts.plan, mode=mode, precision=opts.precision)
                simulation.prepared_copy(model, setup)  # peft's injection, kept
                model = next(iter(simulation._PREPARED[model].values()))
            memo = convert.meta_memo(model)
            same_graph(copy.deepcopy(model, dict(memo)), convert.deep_copy(model, dict(memo)), {}, {})
            times = {}
            for name, fn in (("deepcopy", copy.deepcopy), ("deep_copy", convert.deep_copy)):
                best = float("inf")
                for _ in range(a.rounds):
                    m = dict(memo)
                    t = time.perf_counter()
                    fn(model, m)
                    best = min(best, time.perf_counter() - t)
                times[name] = best
            print(f"| {spec} | {mode} | {sum(1 for _ in model.modules())} | {times['deepcopy'] * 1e3:.1f} | {times['deep_copy'] * 1e3:.1f} |")


if __name__ == "__main__":
    main()
