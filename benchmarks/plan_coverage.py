"""Memory-plan coverage: does neurarch simulate the training steps of every architecture it traces?

The counterpart of ``benchmarks/coverage.py`` (which asks whether a model
*traces*).  For every model type whose row in ``docs/coverage.csv`` traces
forward and backward, we take transformers' default config, and

1. shrink it to a few layers (``--layers``, default 2: every layer count of the
   config and its sub-configs, the per-layer lists that go with it, and the
   experts of MoE models) and build it with ``build_from_config``; when
   transformers rejects the shrunk config, the default config is built instead
   (at full depth the planner cuts the layer stack itself);
2. plan fake inputs (``plan_inputs`` with default options);
3. simulate each mode — a ``full`` fine-tuning step, a ``lora`` step, and
   ``inference`` — with ``neurarch.plan.memory.estimate`` at its defaults
   (bf16-mixed, AdamW, CUDA semantics).  A mode that does not apply to the
   model (neurarch raises a ``NeurarchError``, e.g. LoRA on a model with no
   linear layer) is "n/a", not a failure; any other exception is a failure.
   A mode that fails on the shrunk model is simulated again on the default
   config, so a failure that only the shrinking causes is not counted (the CSV
   keeps the shrunk model's error in ``<mode>_note``).

Each model type runs in its own process through ``neurarch.sweep`` (a local
dask cluster of ``--jobs`` workers) under a per-type time limit covering build
and all three modes, enforced from outside (``neurarch.supervise``): a type
still running a minute past it (stuck in C code) is killed and recorded as a
hang, one over the memory limit (resident memory) as such, one that dies (a
segfault) as crashed, each with the modes it finished, so one bad model cannot
stop the run.  ``--results PATH`` keeps the sweep's JSON-lines file: the same
command again carries on where it stopped.  Error strings, grouping of causes
and the memory limit come from ``coverage.py``.

Usage::

    nice -n 10 python benchmarks/plan_coverage.py                # all traced types -> docs/plan_coverage.{md,csv}
    python benchmarks/plan_coverage.py --only bert,llama -v --out /tmp/pc
    python benchmarks/plan_coverage.py --jobs 2 --timeout 180
    python benchmarks/plan_coverage.py --layers 0                # default depth (no shrinking)
    python benchmarks/plan_coverage.py --results /tmp/pc.jsonl   # resumable: a second run skips the types done

The result: ``docs/plan_coverage.md`` (rates per mode, n/a and failures
grouped by cause) and ``docs/plan_coverage.csv`` (one row per model type).
"""

from __future__ import annotations

import argparse
import csv
import functools
import importlib.util
import os
import re
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load_trace_coverage():
    """benchmarks/coverage.py, under a name that cannot clash with the ``coverage`` package."""
    spec = importlib.util.spec_from_file_location("trace_coverage", Path(__file__).with_name("coverage.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


cov = _load_trace_coverage()

MODES = ("full", "lora", "inference")
MODE_FIELDS = ("status", "peak_tensor_bytes", "seconds", "method", "error", "note")  # per mode, as <mode>_<field> (status: <mode>)
FIELDS = [
    "model_type",
    "model_class",
    "depth",
    "inputs",
    *[f"{m}_{f}" if f != "status" else m for m in MODES for f in MODE_FIELDS],
    "seconds",
    "stage",
    "error",
]
DEFAULT_TIMEOUT = 120  # seconds per model type: build, inputs and the three modes together
DEFAULT_LAYERS = 2
HANG_GRACE = 60  # a type still running this long past its time limit is killed (a hang the limit cannot break)
PRELOAD = ("torch", "transformers", "neurarch.build", "neurarch.inputs", "neurarch.plan.memory")  # once per sweep worker
OK, NA, ERROR = "ok", "n/a", "error"


# --------------------------------------------------------------------------
# One model type, in its own process.
# --------------------------------------------------------------------------


_LAYER_COUNT = re.compile(r"(^|_)(num_hidden_layers|num_layers|n_layers?|(num_)?(encoder|decoder)_layers|depth)$")
_EXPERTS = re.compile(r"(^|_)(num_experts|n_routed_experts|num_local_experts|moe_num_experts)$")
_TOP_K = re.compile(r"experts_per_tok|top_?k")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def shrink(raw: dict, layers: int) -> dict:
    """A copy of a config dict (and of every sub-config dict in it) cut to ``layers`` layers.

    Every layer count (``num_hidden_layers``, ``encoder_layers``, ``depth`` ...) above
    ``layers`` is set to it; lists with one entry per layer (``layer_types`` and the like:
    a name with "layer" or "types", as long as the old count) are cut to their first
    ``layers`` entries, ``depths`` lists (Swin-like stages) to at most ``layers`` each,
    and ``per_layer_config`` to the layers that remain.  Experts are cut to
    max(4, top-k), as coverage.py's ``_one_layer`` does.  (``_one_layer`` itself works on
    config objects, where some heterogeneous configs refuse the attribute reads.)
    """
    d = dict(raw)
    old_counts: set[int] = set()
    top_k = max((v for k, v in d.items() if isinstance(k, str) and _TOP_K.search(k) and _is_int(v)), default=1)
    for k, v in d.items():
        if not isinstance(k, str):
            continue
        if isinstance(v, dict) and k != "per_layer_config":
            d[k] = shrink(v, layers)
        elif _is_int(v) and _LAYER_COUNT.search(k) and v > layers:
            d[k] = layers
            old_counts.add(v)
        elif _is_int(v) and _EXPERTS.search(k) and v > max(4, top_k):
            d[k] = max(4, top_k)
    for k, v in d.items():
        if not isinstance(k, str):
            continue
        if isinstance(v, list) and k.endswith("depths") and all(_is_int(x) for x in v):
            d[k] = [min(x, layers) for x in v]
        elif isinstance(v, list) and len(v) in old_counts and ("layer" in k or "types" in k):
            d[k] = v[:layers]
        elif k == "per_layer_config" and isinstance(v, dict) and old_counts:
            d[k] = {i: c for i, c in v.items() if str(i).isdigit() and int(i) < layers}
    if old_counts:  # backbone outputs name stages that may be gone; the config then picks the last
        for k in ("out_features", "out_indices"):
            if d.get(k) is not None:
                d[k] = None
    return d


def _method(notes: list[str]) -> str:
    """How the simulation was made, from the mode's first note: "cut" (the layer stack was
    cut short and extrapolated), "whole", or "whole (cut failed: why)"."""
    first = notes[0] if notes else ""
    if first.startswith("simulated with the layer stack"):
        return "cut"
    if first.startswith("simulated whole"):
        why = first.split("did not apply: ", 1)[-1].rstrip(")")
        return f"whole (cut failed: {why[:150]})"
    return "whole"


def _build(raw: dict, model_type: str):
    from neurarch.build import build_from_config
    from neurarch.inputs import InputOptions, plan_inputs

    built = build_from_config(raw, f"default {model_type}")
    return built, plan_inputs(built.model, built.config, InputOptions())


def _simulate(built, plan, mode: str, row: dict, prefix: str = "") -> bool:
    """One mode into the row; False when it failed (not when it does not apply)."""
    from neurarch.errors import NeurarchError
    from neurarch.plan.memory import estimate

    t0 = time.perf_counter()
    try:
        m = estimate(built, plan, mode)
        row[mode], row[f"{mode}_error"] = OK, ""
        row[f"{mode}_peak_tensor_bytes"] = m.peak_tensor_bytes
        row[f"{mode}_method"] = prefix + _method(m.notes)
    except NeurarchError as e:
        row[mode], row[f"{mode}_error"] = NA, cov._err(e)
    except Exception as e:
        row[mode], row[f"{mode}_error"] = ERROR, cov._err(e)
    row[f"{mode}_seconds"] = round(time.perf_counter() - t0, 2)
    return row[mode] != ERROR


def _plan_modes(model_type: str, row: dict, layers: int) -> None:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from neurarch.supervise import progress

    row["stage"] = "config"
    default = CONFIG_MAPPING[model_type]().to_dict()
    full_depth = None  # (built, plan) of the default config, made when first needed

    row["stage"] = "build"
    if layers:
        try:
            built, plan = _build(shrink(default, layers), model_type)
            row["depth"] = f"{layers} layers"
        except Exception as e:
            built = None
            row["depth"] = f"default ({layers}-layer config rejected: {cov._err(e)[:150]})"
    if not layers or built is None:
        built, plan = full_depth = _build(default, model_type)
        row["depth"] = row["depth"] or "default"
    row["model_class"] = built.model_class
    row["inputs"] = " ".join(f"{t.name}{list(t.shape)}" for t in plan.tensors)

    for mode in MODES:
        row["stage"] = mode
        progress(row)  # a type killed from outside keeps the modes it finished
        if _simulate(built, plan, mode, row) or full_depth is not None:
            continue
        # The shrunk model failed: is it the shrinking?  Try the default config.
        try:
            full_depth = _build(default, model_type)
        except Exception as e:  # keep the shrunk model's error
            row[f"{mode}_note"] = f"the default config does not build: {cov._err(e)[:150]}"
            continue
        row[f"{mode}_note"] = f"{layers}-layer model: {row[f'{mode}_error'][:200]}"
        row[mode] = ""  # a time limit hit in the retry marks it as such
        _simulate(*full_depth, mode, row, prefix="default depth, ")
    row["stage"] = ""


def _fail_the_rest(row: dict) -> dict:
    for mode in MODES:  # modes that were not reached fail with the type
        if not row[mode]:
            row[mode], row[f"{mode}_error"] = ERROR, f"{row['stage']}: {row['error']}"
    return row


def run_one(model_type: str, timeout: int, layers: int) -> dict:
    """One model type's row (the sweep's job: it runs in a process of its own)."""
    import logging

    from neurarch.supervise import TimeLimit, deadline

    logging.disable(logging.WARNING)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    row = _new_row(model_type)
    t0 = time.perf_counter()
    try:
        with deadline(timeout), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _plan_modes(model_type, row, layers)
    except TimeLimit:
        row["error"] = f"Timeout: over {timeout} s"
    except Exception as e:  # config, build or inputs (the modes catch their own)
        row["error"] = cov._err(e)
    _fail_the_rest(row)
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def _new_row(model_type: str) -> dict:
    row = {k: "" for k in FIELDS}
    row["model_type"] = model_type
    return row


def row_of(rec, limit_s: float) -> dict:
    """A sweep record as a CSV row: the job's row, or, for a type killed or crashed, the modes it
    finished (the row as it stood when its last mode began) and the rest failed."""
    row = cov.record_row(rec, limit_s, _new_row)
    return row if rec.ok else _fail_the_rest(row)


# --------------------------------------------------------------------------
# The sweep: every type once, each in its own process.
# --------------------------------------------------------------------------


def traced_types(path: Path = ROOT / "docs" / "coverage.csv") -> list[str]:
    """The model types that trace forward and backward, from the trace-coverage CSV."""
    return [r["model_type"] for r in csv.DictReader(open(path)) if r["forward"] == "True" and r["backward"] == "True"]


def run_all(types: list[str], timeout: int, layers: int, verbose: bool, jobs: int = 1, results: str | None = None) -> list[dict]:
    """Every type once, ``jobs`` at a time, each in its own process (``neurarch.sweep``).

    ``results``: the sweep's JSON-lines file, kept so that a second run skips the
    types it holds; by default a temporary file, removed at the end.
    """
    limit, grace = timeout + 5, HANG_GRACE - 5  # the row's own "Timeout" first; killed HANG_GRACE s past the limit
    job = functools.partial(run_one, timeout=timeout, layers=layers)
    return cov.sweep_rows(types, job, limit_s=limit, grace_s=grace, jobs=jobs, preload=PRELOAD, to_row=row_of, print_row=_print_row if verbose else None, results=results, prefix="plan-coverage-")


def _print_row(row: dict) -> None:
    modes = " ".join(f"{m}:{row[m]:5s}" for m in MODES)
    errors = "; ".join(f"{m}: {row[f'{m}_error'][:100]}" for m in MODES if row[m] == ERROR)
    print(f"{row['model_type']:32s} {modes} {row['seconds']!s:>6}s {errors}", flush=True)


# --------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------


def _read_rows(path: Path) -> list[dict]:
    """Rows of an earlier plan_coverage.csv, numbers as numbers."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            for k, v in r.items():
                if k == "seconds" or k.endswith("_seconds") or k.endswith("_peak_tensor_bytes"):
                    try:
                        r[k] = float(v) if "." in v else int(v)
                    except ValueError:
                        pass
            rows.append(r)
    return rows


def write_report(rows: list[dict], out_dir: Path, seconds: float, command: str, timeout: int, layers: int) -> str:
    cov.write_csv(out_dir / "plan_coverage.csv", FIELDS, rows)

    n = len(rows)
    count = {m: {s: sum(r[m] == s for r in rows) for s in (OK, NA, ERROR)} for m in MODES}
    rate = {m: cov._pct(count[m][OK], n) for m in MODES}
    at_default = {m: sum(r[m] == OK and r[f"{m}_method"].startswith("default depth") for r in rows) for m in MODES}
    depth_fallback = [r for r in rows if r["depth"].startswith("default (")]
    cut = {m: sum(r[m] == OK and r[f"{m}_method"].endswith("cut") for r in rows) for m in MODES}
    depth = f"cut to {layers} layers" if layers else "at their default depth"

    lines = [
        "# Memory-plan coverage: training steps simulated by neurarch",
        "",
        "Generated by `benchmarks/plan_coverage.py`; per-type rows in [plan_coverage.csv](plan_coverage.csv).",
        "",
        "For every model type that traces forward and backward in [coverage.md](coverage.md), transformers' default",
        f"config, {depth} (every layer count of the config and its sub-configs, with the per-layer lists and",
        "MoE experts that go with it), is built through neurarch (`build_from_config` → `plan_inputs`), and",
        "`neurarch.plan.memory.estimate` simulates each mode at its defaults (bf16-mixed, AdamW, CUDA semantics):",
        "a full fine-tuning step, a LoRA step, and inference.  A mode neurarch declines for the model (a",
        "`NeurarchError`, e.g. LoRA with no linear layer) is n/a; any other exception is a failure."
        + (
            " When transformers rejects the shrunk config, or a mode fails on the shrunk model, the default config is used instead (at full depth neurarch cuts the layer stack itself)."
            if layers
            else ""
        ),
        "",
        *cov.run_section(command, seconds, f"{timeout} s per model type (build, inputs and the three modes together), past which the modes not yet simulated count as failures"),
        "## Rates",
        "",
        f"**Of {n} types neurarch traces, {rate['full']} simulate a full fine-tuning step, {rate['lora']} LoRA, {rate['inference']} inference.**",
        "",
        "| mode | ok | n/a | failed | ok, of all | ok, of those it applies to |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m in MODES:
        c = count[m]
        lines.append(f"| {m} | {c[OK]} | {c[NA]} | {c[ERROR]} | {rate[m]} | {cov._pct(c[OK], n - c[NA])} |")
    lines.append("")
    if layers:
        lines.extend(
            [
                f"{len(depth_fallback)} types were built at their default depth because transformers rejects the",
                f"{layers}-layer config; modes that passed only at the default depth (they fail on the {layers}-layer model,",
                f"`<mode>_note` in the CSV): {', '.join(f'{m} {at_default[m]}' for m in MODES)}.",
                "",
            ]
        )
    lines.extend([f"Simulated with the layer stack cut short and extrapolated: {', '.join(f'{m} {cut[m]}' for m in MODES)}.", ""])

    def group(mode_status: str, title: str) -> None:
        by: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for r in rows:
            for m in MODES:
                if r[m] == mode_status:
                    by[cov._cause(r[f"{m}_error"])][r["model_type"]].append(m)
        if not by:
            return
        total = len({t for types in by.values() for t in types})
        lines.extend([f"## {title} ({total} types)", "", "| cause | n | model types (modes) |", "|---|---:|---|"])
        for cause, types in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            listed = ", ".join(f"{t} ({', '.join(ms)})" for t, ms in sorted(types.items()))
            lines.append(f"| `{cause.replace('|', chr(92) + '|')}` | {len(types)} | {listed} |")
        lines.append("")

    group(ERROR, "Failures by cause")
    group(NA, "Not applicable (n/a), by cause")

    lines.extend(cov.slowest_section(rows, tuple((m, f"{m}_seconds") for m in MODES)))
    text = "\n".join(lines)
    (out_dir / "plan_coverage.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated model types (default: those docs/coverage.csv says trace)")
    ap.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, help=f"seconds per model type (default {DEFAULT_TIMEOUT})")
    ap.add_argument("--jobs", type=int, default=1, help="model types side by side, each in its own process (default 1)")
    ap.add_argument("--results", help="keep the sweep's JSON-lines file here; run again with it to skip the types done")
    ap.add_argument("--layers", type=int, default=DEFAULT_LAYERS, help=f"cut configs to this many layers; 0: default depth (default {DEFAULT_LAYERS})")
    ap.add_argument("--out", default=str(ROOT / "docs"), help="folder for plan_coverage.md and plan_coverage.csv")
    ap.add_argument("-v", "--verbose", action="store_true", help="print one line per model type")
    ap.add_argument("--rerun-failed", action="store_true", help="rerun only the types with a failed mode in --out's plan_coverage.csv, merge, rewrite the report")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))

    previous: list[dict] = []
    if args.rerun_failed:
        previous = _read_rows(Path(args.out) / "plan_coverage.csv")
        types = [r["model_type"] for r in previous if any(r[m] == ERROR for m in MODES)]
    else:
        types = args.only.split(",") if args.only else traced_types()
    t0 = time.time()
    rows = run_all(types, args.timeout, args.layers, args.verbose, args.jobs, args.results)
    elapsed = time.time() - t0
    base = (
        "nice -n 10 python benchmarks/plan_coverage.py"
        + (f" --jobs {args.jobs}" if args.jobs != 1 else "")
        + (f" --timeout {args.timeout}" if args.timeout != DEFAULT_TIMEOUT else "")
        + (f" --layers {args.layers}" if args.layers != DEFAULT_LAYERS else "")
    )
    command = f"`{base}" + (f" --only {args.only}" if args.only and not args.rerun_failed else "") + "`"
    if args.rerun_failed:  # the earlier rows, the failed ones replaced by this run's
        again = {r["model_type"]: r for r in rows}
        rows = [again.get(r["model_type"], r) for r in previous]
        command += f", then `{base} --rerun-failed` for the {len(types)} types with a failed mode ({elapsed / 60:.1f} min)"
        md = Path(args.out) / "plan_coverage.md"
        before = re.search(r"wall time: ([\d.]+) min", md.read_text()) if md.exists() else None
        elapsed += float(before.group(1)) * 60 if before else 0.0  # the wall time of both runs
    text = write_report(rows, Path(args.out), elapsed, command, args.timeout, args.layers)
    print("\n".join(line for line in text.splitlines() if line.startswith("**")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
