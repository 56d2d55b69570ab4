"""Does reading a cut model's larger run off its lines give what simulating it gives?

A card's check simulates the model at that card's batch.  For a model cut to 2
and 3 repeats (``neurarch.plan.depth``; 3 and 4 for an encoder-decoder in
training), once two batches of the same runs are known, a third simulates the
smaller cut only and, where every storage of it lies on its line through the two
known batches (or on its parabola through three: CLIP's batch-by-batch
similarities), reads the larger cut's run off its own curves
(``neurarch.plan.by_depth._predict``).  For every bundled catalog model
with a stack worth cutting and each mode, this simulates the steady state at
batches 2 and 3, then at ``--batches`` (default 5, 9, 17, 33) the way the batch
search does, and compares each with the same batch simulated in a fresh copy of
the model that has seen no other batch (both cut runs simulated): the mode's
figures and every op's bytes (the curve the batch search reads).  Where a model's later batches are
simulated whole (two cut runs would cost more than one whole run), the fresh copy's single batch is cut: then
the figures are compared, and the notes that say how each was simulated differ.

    python benchmarks/later_batch_check.py [--modes full,lora,qlora,inference] [--only NAME] [--batches 5,9,17,33]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

from neurarch.build import build
from neurarch.plan import by_depth
from neurarch.plan.memory import estimate_with_curve, with_batch
from neurarch.plan.train import TrainSetup
from neurarch.sources.catalog import entries

sys.path.insert(0, str(Path(__file__).resolve().parent))
from depth_cut_check import short_plan  # noqa: E402  (the same models and inputs as the depth-cut check)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="full,lora,qlora,inference")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batches", default="5,9,17,33")
    ap.add_argument("--only", help="catalog ids containing this (comma-separated: any of them)")
    args = ap.parse_args(argv)
    later = [int(b) for b in args.batches.split(",")]
    print(f"machine: {platform.machine()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; seq {args.seq_len}; batches 2, 3, then {', '.join(map(str, later))}\n")
    print("| model | mode | later batches | larger cut read off its curves | equal to both runs simulated | seconds, read off | seconds, both simulated |")
    print("|---|---|---:|---:|---|---:|---:|")
    bad = 0
    for mid in sorted(entries()):
        if args.only and not any(o in mid for o in args.only.split(",")):
            continue
        src, _, plan = short_plan(mid, args.seq_len)
        if plan is None:
            continue
        for mode in args.modes.split(","):
            setup = TrainSetup(mode=mode)

            def at(model, b, plan=plan, setup=setup):
                return estimate_with_curve(model, with_batch(plan, b), setup, steady_only=setup.mode != "inference")

            try:
                model = build(src)
                for b in (2, 3):
                    at(model, b)
                before = by_depth.predicted_runs()
                t = time.perf_counter()
                got = {b: at(model, b) for b in later}
                tl = time.perf_counter() - t
                read = by_depth.predicted_runs() - before
                same, strict, ts = True, True, 0.0
                for b in later:
                    fresh = build(src)
                    t = time.perf_counter()
                    ref = at(fresh, b)
                    ts += time.perf_counter() - t
                    same = same and ref[0].model_copy(update={"notes": []}) == got[b][0].model_copy(update={"notes": []})
                    strict = strict and ref[0] == got[b][0] and ref[1] == got[b][1]
            except Exception as e:  # a mode that does not apply
                print(f"| {mid} | {mode} | — | — | n/a: {type(e).__name__} | | |", flush=True)
                continue
            bad += not same
            # Not strict but the same figures: the model's later batches ran whole (two cut runs cost more
            # there), the fresh copy's one batch was cut; the notes and the per-op labels say so.
            verdict = "yes" if strict else "figures yes; later batches simulated whole (the cut costs more), so the notes differ" if same else "NO"
            print(f"| {mid} | {mode} | {len(later)} | {read} | {verdict} | {tl:.1f} | {ts:.1f} |", flush=True)
    print(f"\n{bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
