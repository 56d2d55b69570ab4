"""Gradient checkpointing on every catalog model: does each training mode simulate,
and how much does it save?

    python benchmarks/grad_checkpointing.py                 # every catalog model, full/lora/qlora
    python benchmarks/grad_checkpointing.py --models gpt2 bert-base-uncased --out docs/grad_checkpointing.md

Per model and mode: the simulated card peak (batch 1, the report's default
input, bf16-mixed, AdamW, CUDA kernel semantics) without and with
``--grad-checkpointing``, or the error.  A mode that does not apply to a model
(QLoRA on a model without linear layers, checkpointing on a class without the
switch) is listed with transformers' or neurarch's reason.  Each model runs in
its own process with a time limit, so one slow model cannot stall the rest.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import sys
import time
from datetime import date

MODES = ("full", "lora", "qlora")


def _one(spec: str, q) -> None:
    from neurarch.build import build
    from neurarch.inputs import InputOptions, plan_inputs
    from neurarch.plan.memory import estimate
    from neurarch.sources import resolve

    out = {"model": spec}
    try:
        source = resolve(spec)
        built = build(source)
        plan = plan_inputs(built.model, built.config, InputOptions(batch=1), source.default_input_shape)
        out["input"] = list(plan.main_shape)
        for mode in MODES:
            row = {}
            for gc in (False, True):
                try:
                    m = estimate(built, plan, mode, precision="bf16-mixed", grad_checkpointing=gc, steady_only=True)
                    row["on" if gc else "off"] = m.peak_bytes
                except Exception as e:  # noqa: BLE001 - reported per mode
                    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
                    row["error_on" if gc else "error_off"] = f"{type(e).__name__}: {msg}"[:200]
            out[mode] = row
    except Exception as e:  # noqa: BLE001
        out["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:200]
    q.put(out)


def run(spec: str, limit: float) -> dict:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_one, args=(spec, q))
    t0 = time.time()
    p.start()
    p.join(limit)
    if p.is_alive():
        p.kill()
        p.join()
        return {"model": spec, "error": f"timed out after {limit:g} s"}
    try:
        out = q.get(timeout=5)
    except Exception:
        out = {"model": spec, "error": f"the worker died (exit code {p.exitcode})"}
    out["seconds"] = round(time.time() - t0, 1)
    return out


def _gib(x):
    return f"{x / 2**30:.2f}"


def markdown(rows: list[dict]) -> str:
    lines = [
        "# Gradient checkpointing on the catalog",
        "",
        f"`python benchmarks/grad_checkpointing.py` on {date.today().isoformat()}, {platform.machine()} CPU, "
        f"Python {platform.python_version()}. Card peak (GiB, `peak_bytes`) at batch 1 and the report's default input, "
        "bf16-mixed, AdamW, CUDA kernel semantics, step 2 (steady state); off = without, on = with `--grad-checkpointing`.",
        "",
        "| model | input | full off | full on | LoRA off | LoRA on | QLoRA off | QLoRA on |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    errors = []
    ok = total = 0
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | — | {r['error']} | | | | | |")
            continue
        cells = []
        for mode in MODES:
            row = r.get(mode, {})
            total += 1
            ok += "on" in row
            for key in ("off", "on"):
                if key in row:
                    cells.append(_gib(row[key]))
                else:
                    cells.append("error")
                    errors.append(f"- {r['model']} {mode} ({key}): {row.get('error_' + key, '?')}")
        lines.append(f"| {r['model']} | {r.get('input')} | " + " | ".join(cells) + " |")
    lines += ["", f"With checkpointing, {ok} of {total} model-mode runs simulate."]
    if errors:
        lines += [
            "",
            "Errors (each is the libraries' own answer, the one a real run would get):",
            *errors,
            "",
            "- *no gradient checkpointing switch*: the transformers class does not support it (`supports_gradient_checkpointing` is False: its CNNs);",
            "- *no linear layer for QLoRA to quantize*: the CNNs have convolutions only (bitsandbytes quantizes linear layers);",
            "- *'tuple' object has no attribute 'requires_grad_'*: with checkpointing on, peft calls "
            "`enable_input_require_grads()`, whose hook expects the input embeddings to return a tensor; "
            "Swin's return a tuple.",
        ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", help="catalog ids (default: every catalog model)")
    ap.add_argument("--limit", type=float, default=600, help="seconds per model (default 600)")
    ap.add_argument("--json", default="benchmarks/grad_checkpointing.json", help="results file (resumed from)")
    ap.add_argument("--out", default="docs/grad_checkpointing.md")
    args = ap.parse_args(argv)
    from neurarch.sources.catalog import entries

    specs = args.models or list(entries())
    try:
        with open(args.json) as f:
            done = {r["model"]: r for r in json.load(f)}
    except (OSError, ValueError):
        done = {}
    for spec in specs:
        if spec in done and "error" not in done[spec]:
            continue
        done[spec] = run(spec, args.limit)
        print(json.dumps(done[spec]), file=sys.stderr, flush=True)
        with open(args.json, "w") as f:
            json.dump([done[s] for s in specs if s in done], f, indent=1)
    rows = [done[s] for s in specs if s in done]
    with open(args.out, "w") as f:
        f.write(markdown(rows))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
