"""How close one memory simulation's step is to torch's own fake-tensor step: the floor under a plan.

    python benchmarks/fake_floor.py                                   # Swin-tiny, gpt2, BERT-base: lora and full
    python benchmarks/fake_floor.py microsoft/swin-tiny-patch4-window7-224 --modes lora --batch 9 --repeat 7

A plan's time goes into simulated training steps (a steady-state check is one
forward, backward and optimizer step of the recipe's model on fake tensors).
For each model and mode this times, at ``--batch``, two ways of running that
same step, alternating ``--repeat`` times (medians, every run in brackets):

* **simulated**: neurarch's simulation as a card's check runs it
  (``neurarch.plan.simulation.simulate(..., steady_only=True)``: the optimizer's
  warm-up, then step 2 under the live-storage tracker, with CUDA's kernel choices,
  neurarch's fast paths for FakeTensor's cache, and the figures read off);
* **bare**: the same prepared model (peft's adapters, bitsandbytes' 4-bit layers,
  the cast), the same batch, optimizer, warm-up and loop
  (``neurarch.plan.train``) and the same kernels (CUDA's attention, dropout and
  autocast choices, ``neurarch.fake.cuda.CudaKernels``, as the simulation makes
  them; transformers told the batch holds one sequence a row, as a real step
  finds, ``neurarch.fake.gaps.unpacked_sequences``), under torch's ``FakeTensorMode`` alone: no tracker, none of neurarch's
  paths around FakeTensor.  What a plan could not go below while it runs the
  model's own code on torch's fake tensors as they are, one step at a time.

Both run first once at the batch (untimed), so each timed run answers every op
from FakeTensor's cache, as a plan's second run at a batch does; a run at a batch
not seen before (FakeTensor's cache misses, ``new batch`` column, one run each,
simulated first) costs more, on both paths alike.  The ``ops`` columns count, in
one more untimed run of each, the ops that reach FakeTensorMode from the model's
code (a fake tensor's device queries left out): equal, the two paths ran the same
step.

One process, one core; the figures are seconds on this machine (say which).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/: profile_sim.count_ops, as custom_ops.py finds fake_misses

DEFAULT_MODELS = ["microsoft/swin-tiny-patch4-window7-224", "gpt2", "bert-base-uncased"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    ap.add_argument("--modes", default="lora,full", help="training modes, comma-separated (lora, qlora, full)")
    ap.add_argument("--batch", type=int, default=9)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    if a.batch < 1 or a.repeat < 1:
        ap.error("--batch and --repeat must be at least 1")
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not modes or any(m not in ("lora", "qlora", "full") for m in modes):
        ap.error("--modes takes lora, qlora and full")
    warnings.simplefilter("ignore")
    import torch
    import transformers

    print(
        f"machine: {platform.machine()}, python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
    )
    print("| model | mode | batch | simulated s | bare s | simulated / bare | new batch: simulated s | new batch: bare s | ops: simulated | ops: bare |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model_id in a.models:
        for mode in modes:
            print(row(model_id, mode, a.batch, a.repeat), flush=True)


def row(model_id: str, mode: str, batch: int, repeat: int) -> str:
    from neurarch.inputs.prepare import prepare
    from neurarch.options import Options, PlanOptions
    from neurarch.plan.memory import with_batch
    from neurarch.plan.simulation import simulate
    from neurarch.plan.train import TrainSetup

    opts = dataclasses.replace(Options(), plan=PlanOptions())
    p = prepare(model_id, opts)
    setup = TrainSetup.from_plan(opts.plan, mode=mode, precision=opts.precision)

    def simulated(b: int) -> float:
        t = time.perf_counter()
        simulate(p.trained, with_batch(p.plan, b), setup, steady_only=True)
        return time.perf_counter() - t

    def bare(b: int) -> float:
        return bare_step(p.trained, with_batch(p.plan, b), setup)

    simulated(batch), bare(batch)  # every op of the batch in FakeTensor's cache
    sims, bares = [], []
    for _ in range(repeat):
        sims.append(simulated(batch))
        bares.append(bare(batch))
    new_sim, new_bare = simulated(batch + 1), bare(batch + 2)  # batches not seen before (on each path)
    ops_sim, ops_bare = ops_simulated(lambda: simulated(batch)), ops_bare_step(p.trained, with_batch(p.plan, batch), setup)
    s, b = statistics.median(sims), statistics.median(bares)
    runs = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    return f"| {model_id} | {mode} | {batch} | {s:.2f} ({runs(sims)}) | {b:.2f} ({runs(bares)}) | {s / b:.2f}x | {new_sim:.2f} | {new_bare:.2f} | {ops_sim} | {ops_bare} |"


_DEVICE = "prim.device.default"


def ops_simulated(body) -> int:
    """The ops the simulation's live-storage tracker (the mode right above FakeTensorMode)
    sees while ``body()`` runs, device queries left out."""
    from profile_sim import count_ops  # the tracker's op counter, shared with profile_sim.py

    return sum(n for op, n in count_ops(body).items() if op != _DEVICE)


def ops_bare_step(built, plan, setup) -> int:
    """The ops of :func:`bare_step`'s step that reach FakeTensorMode, device queries left out
    (a counting dispatch mode right above it)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = [0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if str(func) != _DEVICE:
                seen[0] += 1
            return func(*args, **(kwargs or {}))

    bare_step(built, plan, setup, above=Count)
    return seen[0]


def bare_step(built, plan, setup, above=None) -> float:
    """One steady-state training step of the recipe's model under torch's FakeTensorMode alone;
    its seconds (from the copy of the prepared model on).  ``above``: a dispatch mode class
    to run right above FakeTensorMode from the batch on (where the simulation's tracker sits)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from neurarch.fake.convert import fake_attributes, weights_to_fake
    from neurarch.fake.cuda import CudaKernels
    from neurarch.fake.gaps import unpacked_sequences
    from neurarch.plan.simulation import prepared_copy
    from neurarch.plan.train import Observer, label_specs, make_batch, make_optimizer, quantize_4bit, train, trainable, warm_up

    t = time.perf_counter()
    model = prepared_copy(built.model, setup)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    weights_to_fake(model, mode)
    held = fake_attributes(model, mode)
    collecting = gc.isenabled()
    gc.disable()  # as the simulation runs
    try:
        with unpacked_sequences(), mode:
            if setup.mode == "qlora":
                quantize_4bit(model)
            kernels = CudaKernels(setup.attn_implementation == "flash_attention_2") if setup.device == "cuda" else contextlib.nullcontext()
            with kernels, above() if above is not None else contextlib.nullcontext():
                batch = make_batch(plan, label_specs(base, built.config, plan), setup, real=False)
                optimizer = make_optimizer(trainable(model), setup)
                warm_up(optimizer, trainable(model), setup.zero_grad_set_to_none)
                train(model, batch, optimizer, setup, 1, Observer(), device_type="cpu", first_step=2)
    finally:
        del held
        if collecting:
            gc.enable()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
