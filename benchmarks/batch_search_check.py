"""Is each card's largest batch really the largest?  An independent check of the batch search.

    python benchmarks/batch_search_check.py openai/clip-vit-base-patch16 --modes full,lora
    python benchmarks/batch_search_check.py gpt2 google/vit-base-patch16-224
    python benchmarks/batch_search_check.py microsoft/resnet-50 --batch 8   # an input batch above 1

For each model and mode, runs the planner's batch search over the built-in cards
(``plan.fit.mode_result``, as ``--plan`` does, one process, no cache) and counts
the batches it took (the input batch, ``--batch``, 1 by default, is the first of them:
its two steps, or step 2 with the first step read off it, as a plan runs it) and how many of them were read off the lines through
simulated ones (``neurarch.plan.by_depth._between``) instead of simulated.  Then, per card, simulates the answer B and B + 1 again
from scratch, each on its own (the earlier batches the planner reads a cut model's
later runs off are forgotten first, so both cut runs are simulated): B must fit the card (``peak_bytes x headroom <=
memory``) and B + 1 must not.  Prints a Markdown table per model.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import time


def check(spec: str, modes: list[str], batch: int = 1) -> bool:
    import neurarch.cards as cards_mod
    from neurarch.inputs.prepare import prepare
    from neurarch.options import DEFAULT_HEADROOM, Options, PlanOptions
    from neurarch.plan import by_depth
    from neurarch.plan.fit import mode_result, workspace_saving
    from neurarch.plan.memory import estimate_with_curve, with_batch
    from neurarch.plan.train import TrainSetup

    opts = dataclasses.replace(Options(), plan=PlanOptions())
    opts = dataclasses.replace(opts, inputs=dataclasses.replace(opts.inputs, batch=batch))
    assert opts.plan is not None
    p = prepare(spec, opts)
    cards = list(cards_mod.builtin_cards())
    ok = True
    print(f"\n### {spec}" + (f", input batch {batch}" if batch != 1 else "") + "\n")
    print("| mode | batches | of them read off the lines | seconds | card | largest batch | it fits | the next fits |")
    print("|---|---:|---:|---:|---|---:|---|---|")
    for mode in modes:
        setup = TrainSetup.from_plan(opts.plan, mode=mode, precision=opts.precision)
        sims: dict = {}

        def at(b: int, sims=sims, setup=setup):
            if b not in sims:
                sims[b] = estimate_with_curve(p.trained, with_batch(p.plan, b), setup, steady_only=b != p.plan.batch, first_read_off=b == p.plan.batch, cache=False)
            return sims[b]

        t, read = time.perf_counter(), by_depth.read_batches()
        try:
            out = mode_result(at, p.plan.batch, cards, mode)
        except Exception as e:  # a mode that does not apply (QLoRA on a model without linear layers)
            print(f"| {mode} | | | | | {type(e).__name__}: {str(e).splitlines()[0][:80]} | | |")
            continue
        seconds, read = time.perf_counter() - t, by_depth.read_batches() - read
        for i, card in enumerate(cards):
            b, _ = out.fits[card.name]
            budget = card.memory_bytes / DEFAULT_HEADROOM + workspace_saving(card, mode)

            def fits(n: int, setup=setup, budget=budget) -> bool:
                forget(p.trained.model)  # simulated on its own: nothing read off earlier batches' lines
                return estimate_with_curve(p.trained, with_batch(p.plan, n), setup, steady_only=True, cache=False)[0].peak_bytes <= budget

            this = fits(b) if b else True
            nxt = fits(b + 1)
            ok &= this and not nxt
            head = f"| {mode} | {len(sims)} | {read} | {seconds:.1f} " if i == 0 else "| | | | "
            print(f"{head}| {card.name} | {b} | {'yes' if this else 'NO'} | {'YES' if nxt else 'no'} |", flush=True)
    return ok


def forget(model) -> None:
    """Drop what the planner learnt from this model's earlier batches (the cut runs it reads later
    batches off, ``neurarch.plan.by_depth``): the next simulation runs both cuts itself."""
    from neurarch.plan import by_depth

    by_depth._REFS.pop(model, None)
    by_depth._SPANS.pop(model, None)
    by_depth._WHOLE.pop(model, None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="model ids, config.json files or model folders")
    ap.add_argument("--modes", default="full,lora,qlora,inference", help="comma-separated modes (default: all four)")
    ap.add_argument("--batch", type=int, default=1, help="the input batch (default 1)")
    a = ap.parse_args()
    if a.batch < 1:
        ap.error("--batch must be at least 1")
    args, modes, batch = a.models, a.modes.split(","), a.batch
    import torch
    import transformers

    print(
        f"machine: {platform.machine()}, python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    bad = [spec for spec in args if not check(spec, modes, batch)]
    print(f"\n{len(args) - len(bad)} of {len(args)} models: every card's batch fits and the next does not" + (f"; not: {', '.join(bad)}" if bad else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
