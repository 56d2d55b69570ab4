"""QLoRA's card check against two simulated steps, on models whose quantized layers have a bias.

    python benchmarks/qlora_bias_check.py                        # the catalog models with biased 4-bit layers
    python benchmarks/qlora_bias_check.py gpt2 --batches 2,3,7

bitsandbytes' ``Linear4bit`` casts its bias in place to the dtype it computes in on
its first forward, so a real QLoRA step 2 finds the biases already cast.  A card's
check simulates step 2 alone, after a warm-up that makes the optimizer state; that
run casts the biases in its own forward.  The check now carries each cast bias back
to where the fp32 one was (made in step 1, the fp32 one gone before step 2), as a
real step 1 leaves them.  For each model and batch this prints the check as a plan
runs it, with the casts carried back (``now``) and without (``before``), beside
step 2 of two simulated steps (the path the tests check against real CPU steps):
the steady peak and its breakdown, the peak with CUDA's rounding, and every op
label's bytes on the curve the cards' batches are read off.  Each run builds the
model afresh, so no run reads another's simulations.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="model ids, config.json files or model folders (default: the catalog models whose QLoRA layers have a bias)")
    ap.add_argument("--batches", default="2,3", help="comma-separated batches to check (default 2,3)")
    a = ap.parse_args()
    try:
        batches = [int(b) for b in a.batches.split(",")]
    except ValueError:
        ap.error(f"--batches: integers separated by commas, got {a.batches!r}")
    if not batches or min(batches) < 1:
        ap.error("--batches: every batch at least 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import neurarch.plan.simulation as simulation
    from neurarch.inputs.prepare import prepare
    from neurarch.options import Options, PlanOptions
    from neurarch.plan.memory import estimate_with_curve, with_batch
    from neurarch.plan.train import TrainSetup, qlora_quantized
    from neurarch.sources.catalog import entries

    options = Options(plan=PlanOptions())
    setup = TrainSetup.from_plan(options.plan, mode="qlora", precision=options.precision)
    models = a.models
    if not models:
        for m in sorted(entries()):
            model = prepare(m, options).trained.model
            if any(model.get_submodule(n).bias is not None for n in qlora_quantized(model, setup)):
                models.append(m)

    def run(model: str, batch: int, *, steady: bool, carry: bool = True):
        p = prepare(model, options)  # a fresh model: the planner's books of earlier runs are per model
        simulation.CARRY_BACK = carry
        try:
            mem, curve = estimate_with_curve(p.trained, with_batch(p.plan, batch), setup, steady_only=steady, cache=False)
        finally:
            simulation.CARRY_BACK = True
        return mem, curve

    def figures(mem, curve):
        return {"peak": mem.peak_tensor_bytes, "rounded": mem.peak_bytes, "breakdown": mem.breakdown.model_dump(), "curve": curve.values, "exact": curve.exact, "sharded": curve.sharded}

    print(f"QLoRA, default recipe ({setup.precision}, rank {setup.lora_rank}); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| model | batch | two steps' step 2: peak B | check now: peak B | labels | now = two steps | check before: peak B | labels | before = two steps | labels that differ before |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---|---:|")
    bad = 0
    for model in models:
        for b in batches:
            ref = figures(*run(model, b, steady=False))
            now = figures(*run(model, b, steady=True))
            old = figures(*run(model, b, steady=True, carry=False))
            same_now = now == ref
            same_old = old == ref
            bad += not same_now
            differ = len(set(old["curve"]) ^ set(ref["curve"])) + sum(old["curve"][k] != v for k, v in ref["curve"].items() if k in old["curve"])
            print(
                f"| {model} | {b} | {ref['peak']:,} | {now['peak']:,} | {len(now['curve'])} | {'yes' if same_now else 'NO'} | "
                f"{old['peak']:,} | {len(old['curve'])} | {'yes' if same_old else 'no'} | {differ} |",
                flush=True,
            )
    print(f"\n{'every check equals two steps' if not bad else f'{bad} checks differ from two steps'} (peak, breakdown, rounded peak, every label of the curve)")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
