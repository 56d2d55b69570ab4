"""A card's check on a model with a parameter its forward does not use, against two steps and a real CPU step 2.

    python benchmarks/unused_state_check.py                      # all-MiniLM-L6-v2 and DINOv2-small, full, batch 4
    python benchmarks/unused_state_check.py facebook/dinov2-small --mode lora --batch 8 --seq-len 64

A card's check simulates step 2 alone, after a warm-up that makes the optimizer's
state for every trainable parameter.  A parameter the forward does not use (the
BERT pooler under a sentence embedding, DINOv2's ``mask_token`` without a mask)
gets no gradient, so a real AdamW makes no state for it, in step 1 or step 2; the
check forgets the warm-up's state for it (docs/accuracy.md, "The input batch's
first step, read off step 2").  For each model this builds the model a plan
trains (its default recipe, fp32 so that the CPU runs what is simulated) and
prints, in bytes: the parameters without a gradient and the state the warm-up
makes for them; step 2's peak as a card's check simulates it (step 2 alone), as
two simulated steps give it, and as a real CPU step 2 allocates it (random
weights, ``torch.profiler``, one thread).  Seconds to a minute a model.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings


def check(model: str, mode: str, batch: int, seq_len: int | None) -> None:
    import torch

    from neurarch.inputs import InputOptions
    from neurarch.inputs.prepare import prepare
    from neurarch.options import Options, PlanOptions
    from neurarch.plan.memory import simulate
    from neurarch.plan.real_step import measure_cpu, real_factory
    from neurarch.plan.train import TrainSetup, make_optimizer, warm_up

    options = Options(inputs=InputOptions(batch=batch, seq_len=seq_len), plan=PlanOptions(), precision="fp32")
    p = prepare(model, options)
    setup = TrainSetup(mode=mode, precision="fp32", device="cpu")
    check = simulate(p.trained, p.plan, setup, steady_only=True)
    two = simulate(p.trained, p.plan, setup)
    real = measure_cpu(real_factory(p.trained, p.source), p.trained.config, p.plan, setup)

    # The parameters the real run's AdamW made no state for, and the state a warm-up makes for them.
    unused = [(n, torch.zeros_like(t, device="cpu")) for n, t in real.without_state.items()]
    state = warm_up(make_optimizer([q for _, q in unused], setup), [q for _, q in unused]) if unused else []
    state_bytes = sum(t.untyped_storage().nbytes() for t in state)

    names = ", ".join(n for n, _ in unused[:4]) + (", ..." if len(unused) > 4 else "")
    print(f"\n{model}, {mode}, fp32, input {list(p.plan.main_shape)}")
    print(f"  parameters the real steps gave no state: {len(unused)} ({sum(q.numel() for _, q in unused):,} scalars{': ' + names if names else ''})")
    print(f"  the warm-up's state for them:  {state_bytes:,} B (not counted since 2026-12-07)")
    print("  | step 2's peak | bytes | - real |")
    print("  |---|---:|---:|")
    rows = [
        ("a card's check (step 2 alone)", check.steady.bytes),
        ("the same, with the warm-up's state for them (before)", check.steady.bytes + state_bytes),
        ("two steps simulated", two.steady.bytes),
        ("real CPU step 2", real.step_peaks[1]),
    ]
    for label, got in rows:
        print(f"  | {label} | {got:,} | {got - real.step_peaks[1]:+,} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=["sentence-transformers/all-MiniLM-L6-v2", "facebook/dinov2-small"])
    ap.add_argument("--mode", default="full", choices=["full", "lora"], help="the training mode (default full)")
    ap.add_argument("--batch", type=int, default=4, help="the batch (default 4)")
    ap.add_argument("--seq-len", type=int, default=None, help="tokens per sample, for text models (default: the plan's)")
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"{platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model in a.models:
            check(model, a.mode, a.batch, a.seq_len)


if __name__ == "__main__":
    main()
