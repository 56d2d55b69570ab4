"""What bitsandbytes' ops cost a QLoRA simulation, answered by FakeTensorMode and from neurarch's entries.

    python benchmarks/custom_ops.py
    python benchmarks/custom_ops.py --model meta-llama/Llama-3.2-1B-Instruct --batches 12

FakeTensorMode never caches an op outside torch's namespaces; :mod:`neurarch.fake.custom`
keeps entries for six of bitsandbytes' ops.  Two measurements, each with the entries
off (``neurarch.fake.custom.CACHE = False``: every call through FakeTensorMode's whole
path, as before) and on:

* per call: microseconds of one call of the 4-bit matrix product and the two
  dequantizations of its backward, at shapes already met (a 2048 x 2048 layer, 16
  rows), asked from a dispatch mode right above FakeTensorMode as the simulation's
  tracker asks, inside ``neurarch.fake.views.fast_fake``; best of ``--rounds``;
* per simulation: a catalog model's QLoRA batch checks (step 2 alone, as the batch
  search runs them; the simulation cache off) at ``--batches`` batches after the
  first, alternating off and on, one process: wall-clock and CPU seconds each
  (``time.process_time``: less moved by whatever else the machine runs), the median
  of each side, and how many calls the entries answered.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/: fake_misses.Asks


def per_call(rounds: int, calls: int) -> None:
    import bitsandbytes  # noqa: F401  (registers its ops)
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fake_misses import Asks  # the tracker's way of asking, as fake_misses.py times misses
    from neurarch.fake import custom
    from neurarch.fake.views import fast_fake

    bnb = torch.ops.bitsandbytes
    n = k = 2048
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        x = torch.empty(16, k, dtype=torch.bfloat16)
        packed = torch.empty(n * k // 2, 1, dtype=torch.uint8)
        absmax = torch.empty(n * k // 64, dtype=torch.float32)
        qabsmax = torch.empty(n * k // 64, dtype=torch.uint8)
        absmax2 = torch.empty(n * k // 64 // 256, dtype=torch.float32)
        code = torch.empty(256, dtype=torch.float32)
    cases = [
        ("gemm_4bit (the 4-bit matrix product)", lambda: bnb.gemm_4bit.default(x, packed, [n, k], absmax, 64, "nf4")),
        ("dequantize_4bit (the weight, for the gradient)", lambda: bnb.dequantize_4bit.default(packed, absmax, 64, "nf4", [n, k], torch.bfloat16)),
        ("dequantize_blockwise (its scales, first)", lambda: bnb.dequantize_blockwise.default(qabsmax, absmax2, code, 256, torch.float32)),
    ]
    print("| op | FakeTensorMode, us a call | from an entry, us a call |\n|---|---:|---:|")
    for name, call in cases:
        row = []
        for on in (False, True):
            custom.CACHE = on
            best = float("inf")
            with fast_fake(), mode, Asks(mode):
                call()  # the entry made (or FakeTensorMode's bypass recorded)
                for _ in range(rounds):
                    t = time.perf_counter()
                    for _ in range(calls):
                        call()
                    best = min(best, (time.perf_counter() - t) / calls)
            row.append(best * 1e6)
        print(f"| {name} | {row[0]:.0f} | {row[1]:.0f} |")
    custom.CACHE = True


def per_simulation(spec: str, batches: int) -> None:
    from neurarch.fake import custom
    from neurarch.inputs.prepare import prepare
    from neurarch.options import Options, PlanOptions
    from neurarch.plan.memory import estimate_with_curve, with_batch
    from neurarch.plan.train import TrainSetup

    gc.disable()  # as in a plan's worker
    opts = dataclasses.replace(Options(), plan=PlanOptions())
    p = prepare(spec, opts)
    setup = TrainSetup.from_plan(opts.plan, mode="qlora", precision=opts.precision)

    def run(b: int) -> tuple[float, float]:
        t, c = time.perf_counter(), time.process_time()
        estimate_with_curve(p.trained, with_batch(p.plan, b), setup, steady_only=True, cache=False)
        return time.perf_counter() - t, time.process_time() - c

    run(2)
    run(3)  # the references a later check is compared with (a cut model simulates both runs here)
    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    hits = custom.HITS[0]
    print(f"\n{spec}, QLoRA batch checks (step 2 alone), off and on alternating:\n")
    print("| batch | entries | wall s | CPU s |\n|---:|---|---:|---:|")
    for i, b in enumerate(range(4, 4 + batches)):
        on = i % 2 == 1
        custom.CACHE = on
        wall, cpu = run(b)
        times[on].append((wall, cpu))
        print(f"| {b} | {'on' if on else 'off'} | {wall:.3f} | {cpu:.3f} |")
    custom.CACHE = True
    for k, what in ((0, "wall"), (1, "CPU")):
        off, on_ = (statistics.median(t[k] for t in times[side]) for side in (False, True))
        print(f"\nmedian {what}: off {off:.3f} s, on {on_:.3f} s ({100 * (off - on_) / off:.1f} % less)", end="")
    print(f"; calls answered from entries: {custom.HITS[0] - hits} ({(custom.HITS[0] - hits) / max(1, len(times[True])):.0f} a check)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="microsoft/swin-tiny-patch4-window7-224")
    ap.add_argument("--batches", type=int, default=24, help="checks simulated, half with the entries off")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; python {platform.python_version()}, torch {torch.__version__}\n")
    per_call(a.rounds, a.calls)
    per_simulation(a.model, a.batches)


if __name__ == "__main__":
    main()
