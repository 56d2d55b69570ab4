"""Does the cut-depth shortcut give the whole simulation's figures on real configs?

For every bundled catalog model with a layer stack worth cutting, each memory
mode is simulated twice at a short input (``--seq-len``, default 128 tokens;
images at their default size): whole, and by the shortcut of
``neurarch.plan.depth`` (the stack cut to 2 and 3 repeats, extrapolated op by
op).  The table says whether peak_tensor_bytes, peak_bytes, the breakdown,
phase and module are equal, and which method the shortcut ended up using
(it falls back to the whole model when the cut runs do not line up).

    python benchmarks/depth_cut_check.py [--modes full,lora,inference] [--only NAME] [--config PATH ...]
"""

from __future__ import annotations

import argparse
import platform
import re
import time

from neurarch.build import build
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.depth import describe, stacks_of
from neurarch.plan.memory import estimate, stack_of
from neurarch.sources import resolve
from neurarch.sources.catalog import entries

FIELDS = ("peak_tensor_bytes", "peak_bytes", "first_step_peak_tensor_bytes", "breakdown", "phase", "module", "kv_cache_bytes", "trainable_parameters")


def short_plan(mid: str, seq_len: int):
    """``(source, built model, inputs at seq_len tokens)`` for a model with a stack worth cutting
    (four or more repeats), the inputs None otherwise; a shorter position table caps the tokens
    (CLIP's 77)."""
    src = resolve(mid)
    built = build(src)
    stack = stack_of(built.model)
    if stack is None or stack.units < 4:
        return src, built, None
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=seq_len), src.default_input_shape)
    cap = plan_inputs(built.model, built.config, InputOptions(), src.default_input_shape).seq_len
    if cap and plan.seq_len and cap < plan.seq_len:
        plan = plan_inputs(built.model, built.config, InputOptions(seq_len=cap), src.default_input_shape)
    return src, built, plan


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="full,lora,inference")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--only")
    ap.add_argument("--config", action="append", default=[], help="a config.json (repeatable) to check instead of the catalog")
    args = ap.parse_args(argv)
    print(f"machine: {platform.machine()}, {time.strftime('%Y-%m-%d')}; seq {args.seq_len}; modes {args.modes}\n")
    print("| model | stack | mode | whole peak_bytes | equal | shortcut | whole s | shortcut s |")
    print("|---|---|---|---:|---|---|---:|---:|")
    bad = 0
    for mid in args.config or sorted(entries()):
        if args.only and args.only not in mid:
            continue
        src, built, plan = short_plan(mid, args.seq_len)
        if plan is None:
            continue
        stacks = describe(stacks_of(built.model))
        for mode in args.modes.split(","):
            try:
                t = time.perf_counter()
                whole = estimate(built, plan, mode, cut_depth=False)
                tw = time.perf_counter() - t
                t = time.perf_counter()
                cut = estimate(built, plan, mode)
                tc = time.perf_counter() - t
            except Exception as e:  # a mode that does not apply
                print(f"| {mid} | {stacks} | {mode} | — | n/a: {type(e).__name__} | | | |")
                continue
            same = all(getattr(whole, f) == getattr(cut, f) for f in FIELDS)
            bad += not same
            note = next((n for n in cut.notes if n.startswith("simulated with the layer stack")), None)
            m = re.search(r"cut to (\d+) and (\d+) (layers|repeats)", note or "")
            how = f"cut to {m[1]} and {m[2]} {m[3]}" if m else "fell back to whole"
            print(f"| {mid} | {stacks} | {mode} | {whole.peak_bytes:,} | {'yes' if same else 'NO'} | {how} | {tw:.1f} | {tc:.1f} |", flush=True)
    print(f"\n{bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
