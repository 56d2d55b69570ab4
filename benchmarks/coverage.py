"""Coverage benchmark: does neurarch trace every transformers architecture?

For every model type transformers knows (``CONFIG_MAPPING``) we take the
default config, and

1. build the type's base model class (``MODEL_MAPPING``) on the meta device
   *independently of neurarch* — the reference parameter count is the sum of
   ``numel`` over the unique parameters of that plain build;
2. build it again the way neurarch does (``build_from_config`` on
   ``config.to_dict()``), plan fake inputs (``plan_inputs``) and trace forward
   and backward on fake tensors (``neurarch.trace.trace``);
3. compare neurarch's parameter count (``count_graph(model).parameters``,
   taken after the trace) with the reference.

Each model type runs in its own process through ``neurarch.sweep`` (a local
dask cluster of ``--jobs`` workers): the time limit interrupts it from outside
(``neurarch.supervise``), one that cannot be interrupted (stuck in C code) is
killed and recorded as a hang, one over the memory limit (resident memory) is
killed and recorded as such, and one that dies (a segfault) is recorded as
crashed, so one bad model cannot stop the run.  ``--results PATH`` keeps the
sweep's JSON-lines file: run the same command again to carry on where it stopped.

Usage::

    nice -n 10 python benchmarks/coverage.py                 # all types -> docs/coverage.{md,csv}
    python benchmarks/coverage.py --only bert,whisper -v     # a few, printed
    python benchmarks/coverage.py --timeout 180 --out docs
    python benchmarks/coverage.py --catalog                  # the catalog models only (~10 s)
    python benchmarks/coverage.py --results /tmp/cov.jsonl   # resumable: a second run skips the types done

The result: ``docs/coverage.md`` (rates and failures grouped by cause) and
``docs/coverage.csv`` (one row per model type).
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import functools
import os
import platform
import re
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
FIELDS = [
    "model_type",
    "model_class",
    "config_ok",
    "meta_build",
    "neurarch_build",
    "forward",
    "backward",
    "count_equal",
    "ref_params",
    "neurarch_params",
    "inputs",
    "seconds",
    "stage",
    "error",
    "ref_error",
    "real_check",
    "guessed",
]
MEMORY_LIMIT_BYTES = 12 * 1024**3  # resident memory per model type: a runaway real allocation is killed, not swapped
HANG_GRACE = 30  # seconds past its time limit before a type that cannot be interrupted is killed as a hang
PRELOAD = ("torch", "transformers", "neurarch.build", "neurarch.inputs", "neurarch.trace")  # once per sweep worker


# --------------------------------------------------------------------------
# One model type, in its own process.
# --------------------------------------------------------------------------


def _err(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg[:300]}" if msg else type(e).__name__


def _unique_numel(model) -> int:
    seen, n = set(), 0
    for p in model.parameters():  # parameters() already yields each tensor once
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def _reference(model_type: str, row: dict):
    """Plain transformers: default config, base class, built on meta. Returns the config."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(model_type)
    if isinstance(name, (list, tuple)):
        name = name[0]
    row["model_class"] = name or ""
    try:
        cfg = CONFIG_MAPPING[model_type]()
        row["config_ok"] = True
    except Exception as e:
        row["stage"], row["error"] = "config", _err(e)
        row["ref_error"] = row["error"]
        return None
    if not name:
        row["stage"], row["error"] = "no model class", "transformers has no MODEL_MAPPING class for this config type"
        row["ref_error"] = row["error"]
        return cfg
    try:
        cls = getattr(transformers, name)
        with torch.device("meta"):
            m = cls(CONFIG_MAPPING[model_type]())
        row["ref_params"] = _unique_numel(m)
        row["meta_build"] = True
        del m
    except Exception as e:
        row["ref_error"] = _err(e)
    return cfg


def _neurarch(cfg, model_type: str, row: dict) -> None:
    from neurarch.build import build_from_config
    from neurarch.inputs import InputOptions, plan_inputs
    from neurarch.trace import trace
    from neurarch.trace.counts import count_graph

    try:
        built = build_from_config(cfg.to_dict(), f"default {model_type} config")
        row["neurarch_build"] = True
    except Exception as e:
        row["stage"], row["error"] = "neurarch build", _err(e)
        return
    try:
        plan = plan_inputs(built.model, built.config, InputOptions())
        row["inputs"] = " ".join(f"{t.name}{list(t.shape)}" for t in plan.tensors)
    except Exception as e:
        row["stage"], row["error"] = "inputs", _err(e)
        return
    res = trace(built.model, plan, backward=True)
    row["inputs"] = " ".join(f"{t.name}{list(t.shape)}" for t in plan.tensors)  # as traced (an alternative may have won)
    row["guessed"] = " ".join(f"{k}x{v}" for k, v in res.guessed_values.items())
    row["forward"] = res.forward.ok
    row["backward"] = bool(res.backward and res.backward.ok)
    if not res.forward.ok:
        row["stage"], row["error"] = "forward", res.forward.error or ""
    elif not row["backward"]:
        row["stage"], row["error"] = "backward", (res.backward.error if res.backward else "") or ""
    row["neurarch_params"] = count_graph(built.model).parameters
    if row["ref_params"] != "":
        row["count_equal"] = row["neurarch_params"] == row["ref_params"]


# Seconds per model type.  The slowest traces that finish (hybrid linear-attention models whose
# reference code loops over chunks in Python) take about two minutes on a 2-core CPU.
DEFAULT_TIMEOUT = 180
REAL_CHECK_MAX_PARAMS = 1_200_000_000  # 4.8 GB in float32: the most a real check may build
REAL_CHECK_TOKENS = 64  # text length of a real check (the failure, not the size, is what it tests)
REAL_CHECK_SECONDS = 15


def _one_layer(cfg) -> None:
    """Cut every layer count of a config (and its sub-configs) to 1, and its experts to a few,
    for a cheap real model."""
    subs = [cfg] + [v for v in vars(cfg).values() if hasattr(v, "to_dict")]
    for c in subs:
        top_k = max((v for k, v in vars(c).items() if re.search(r"experts_per_tok|top_?k", k) and isinstance(v, int)), default=1)
        for k in list(vars(c)):
            v = getattr(c, k, None)
            if not isinstance(v, int) or isinstance(v, bool):
                continue
            new = None
            if re.search(r"(^|_)(num_hidden_layers|num_layers|n_layer|n_layers|encoder_layers|decoder_layers|depth)$", k) and v > 1:
                new = 1
            elif re.search(r"(^|_)(num_experts|n_routed_experts|num_local_experts|moe_num_experts)$", k) and v > max(4, top_k):
                new = max(4, top_k)
            if new is not None:
                try:
                    setattr(c, k, new)
                except Exception:
                    pass


def _real_check(model_type: str, row: dict) -> None:
    """Does the same forward fail outside neurarch, for real?

    The default config is cut to one layer and built for real on the CPU (when
    that stays under REAL_CHECK_MAX_PARAMS); neurarch's planner gives the same
    inputs as real tensors (text shortened to REAL_CHECK_TOKENS).  ``real_check`` says "same failure" when real
    tensors fail with the same error (the default config or the library cannot
    run, not the engine), "runs" when they do not, else why no check was made.
    """
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from neurarch.inputs import InputOptions, plan_inputs

    cfg = CONFIG_MAPPING[model_type]()
    _one_layer(cfg)
    cls = getattr(transformers, row["model_class"])
    try:
        with torch.device("meta"):
            n = _unique_numel(cls(cfg))
    except Exception as e:
        row["real_check"] = f"not built with one layer: {_err(e)[:80]}"
        return
    if n > REAL_CHECK_MAX_PARAMS:
        row["real_check"] = f"too big for a real check ({n / 1e9:.1f} B parameters with one layer)"
        return
    try:
        from transformers.initialization import no_init_weights

        with no_init_weights():  # initialising a big embedding costs seconds; constant weights run the same code
            model = cls(cfg).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(0.02)
        plan = plan_inputs(model, model.config, InputOptions())
        if all(not t.dtype.is_floating_point for t in plan.tensors):  # text only: a short text keeps it cheap
            plan = plan_inputs(model, model.config, InputOptions(seq_len=REAL_CHECK_TOKENS))
        plan.resolve(model)
        errors = []
        for alt in [None, *plan.alternatives]:
            if alt is not None:
                plan.use(alt)
            try:
                with torch.no_grad():
                    model(**plan.make())
                row["real_check"] = "runs"
                return
            except Exception as e:
                errors.append(_err(e))
        row["real_check"] = "same failure" if _cause(errors[0]) == _cause(row["error"]) else f"fails too: {errors[0][:120]}"
    except Exception as e:
        row["real_check"] = f"could not run: {_err(e)[:100]}"


def _new_row(model_type: str) -> dict:
    row = {k: "" for k in FIELDS}
    row.update(model_type=model_type, config_ok=False, meta_build=False, neurarch_build=False, forward=False, backward=False, count_equal=False)
    return row


def run_one(model_type: str, timeout: int) -> dict:
    """One model type's row (the sweep's job: it runs in a process of its own).

    ``timeout`` bounds the build, trace and count; the real check after a
    failure has REAL_CHECK_SECONDS of its own.  The row so far is reported as
    progress, so a type killed from outside still says how far it got.
    """
    import logging

    from neurarch.supervise import TimeLimit, deadline, progress

    logging.disable(logging.WARNING)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    row = _new_row(model_type)
    t0 = time.perf_counter()
    try:
        with deadline(timeout):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cfg = _reference(model_type, row)
                progress(row)
                if cfg is not None and row["model_class"]:
                    _neurarch(cfg, model_type, row)
                    progress(row)
        if row["meta_build"] is True and row["backward"] is not True and "Timeout" not in row["error"]:
            try:
                with deadline(REAL_CHECK_SECONDS):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        _real_check(model_type, row)
            except TimeLimit:
                row["real_check"] = "timed out"
    except TimeLimit:
        row["stage"] = row["stage"] or "timeout"
        row["error"] = f"Timeout: over {timeout} s"
    except Exception as e:  # anything the stages did not catch themselves
        row["stage"], row["error"] = row["stage"] or "other", _err(e)
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def row_of(rec, limit_s: float) -> dict:
    """A sweep record as a CSV row: the job's row, or, for a type killed or crashed, how far it got."""
    return record_row(rec, limit_s, _new_row)


# --------------------------------------------------------------------------
# Shared with plan_coverage.py: sweep records as rows, the sweep, the report's frame.
# --------------------------------------------------------------------------


def record_row(rec, limit_s: float, new_row: Callable[[str], dict]) -> dict:
    """A sweep record as a CSV row: the job's row, or, for a type killed or crashed, the row as it
    stood (its last progress report, else ``new_row(type)``) with how it ended."""
    if rec.ok:
        return rec.value
    row = dict(rec.progress) if isinstance(rec.progress, dict) else new_row(rec.key)
    if rec.status == "crash":
        row["stage"], row["error"] = "crash", f"WorkerCrash: {(rec.stderr_tail[-1] if rec.stderr_tail else f'exit code {rec.exit_code}')[:300]}"
    elif rec.status in ("hang", "timeout"):
        row["stage"], row["error"] = "hang", f"WorkerHang: no answer {limit_s:g} s after it started"
    elif rec.status == "memory":
        row["stage"], row["error"] = "memory", rec.error
    else:  # the job raised past its own handlers
        row["stage"], row["error"] = row.get("stage") or "other", rec.error
    row["seconds"] = round(rec.seconds, 2)
    return row


def sweep_rows(
    types: list[str],
    job: Callable[[str], dict],
    *,
    limit_s: float,
    grace_s: float,
    jobs: int,
    preload: tuple[str, ...],
    to_row: Callable[[object, float], dict],
    print_row: Callable[[dict], None] | None,
    results: str | None,
    prefix: str,
) -> list[dict]:
    """Every type once, ``jobs`` at a time, each in its own process (``neurarch.sweep``); the rows in ``types``' order.

    ``to_row(record, seconds until a hang is killed)`` makes each row; ``print_row``, when given, prints each
    as it finishes.  ``results``: the sweep's JSON-lines file, kept so that a second run skips the types it
    holds; by default a temporary file (named ``prefix``...), removed at the end.
    """
    from neurarch.sweep import run_sweep

    tmp = None
    if results is None:
        fd, tmp = tempfile.mkstemp(suffix=".jsonl", prefix=prefix)
        os.close(fd)
    try:
        records = run_sweep(
            types,
            job=job,
            results_path=results or tmp,
            time_limit_s=limit_s,
            grace_s=grace_s,
            memory_limit_bytes=MEMORY_LIMIT_BYTES,
            workers=max(jobs, 1),
            preload=preload,
            on_record=(lambda r: print_row(to_row(r, limit_s + grace_s))) if print_row is not None else None,
        )
    finally:
        if tmp:
            os.unlink(tmp)
    return [to_row(r, limit_s + grace_s) for r in records]


def write_csv(path: Path, fields: list[str], rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def run_section(command: str, seconds: float, limit: str) -> list[str]:
    """The report's "Run" section: date, machine, library versions, the command (as Markdown), wall time, time limit."""
    import torch
    import transformers

    return [
        "## Run",
        "",
        f"* date: {_dt.date.today().isoformat()}",
        f"* machine: {platform.machine()}, {os.cpu_count()} CPUs (nproc), Python {platform.python_version()}",
        f"* torch {torch.__version__}, transformers {transformers.__version__}",
        f"* command: {command}",
        f"* wall time: {seconds / 60:.1f} min",
        f"* time limit: {limit}",
        "",
    ]


def slowest_section(rows: list[dict], columns: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """The ten slowest types, with their seconds and more ``columns`` ((title, row field) each)."""
    slow = sorted((r for r in rows if isinstance(r["seconds"], (int, float))), key=lambda r: -r["seconds"])[:10]
    lines = ["## Slowest", "", "| model type | seconds |" + "".join(f" {title} |" for title, _ in columns), "|---|---:|" + "---:|" * len(columns)]
    lines.extend(f"| {r['model_type']} | {r['seconds']} |" + "".join(f" {r[field]} |" for _, field in columns) for r in slow)
    lines.append("")
    return lines


# --------------------------------------------------------------------------
# The sweep: every type once, each in its own process.
# --------------------------------------------------------------------------


def all_types() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return sorted(CONFIG_MAPPING_NAMES)


def run_all(types: list[str], timeout: int, verbose: bool, jobs: int = 1, results: str | None = None) -> list[dict]:
    """Every type once, ``jobs`` at a time, each in its own process (``neurarch.sweep``).

    ``results``: the sweep's JSON-lines file, kept so that a second run skips the
    types it holds; by default a temporary file, removed at the end.
    """
    limit = timeout + REAL_CHECK_SECONDS + 10  # the main work, the real check, the row
    job = functools.partial(run_one, timeout=timeout)
    return sweep_rows(types, job, limit_s=limit, grace_s=HANG_GRACE, jobs=jobs, preload=PRELOAD, to_row=row_of, print_row=_print_row if verbose else None, results=results, prefix="coverage-")


def _print_row(row: dict) -> None:
    flags = "".join("y" if row[k] is True else "." for k in ("meta_build", "neurarch_build", "forward", "backward", "count_equal"))
    real = f" [real: {row['real_check']}]" if row.get("real_check") else ""
    print(f"{row['model_type']:40s} {flags} {row['seconds']!s:>6} {row['stage']} {row['error'][:150]}{real}", flush=True)


# --------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------


def _cause(error: str) -> str:
    """An error message with its specifics blanked, so alike failures group together."""
    e = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", error)
    e = re.sub(r"\[[^\]]*\]|\([^)]*\)", "(…)", e)
    e = re.sub(r"\d+", "N", e)
    return e[:110]


def _pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f}%" if b else "n/a"


def read_csv(path: Path) -> list[dict]:
    """Rows of a coverage.csv with their booleans and numbers typed again."""
    rows = []
    for r in csv.DictReader(open(path)):
        for k in ("config_ok", "meta_build", "neurarch_build", "forward", "backward", "count_equal"):
            r[k] = r[k] == "True"
        for k in ("ref_params", "neurarch_params"):
            r[k] = int(r[k]) if r[k] else ""
        r["seconds"] = float(r["seconds"]) if r["seconds"] else ""
        for k in FIELDS:
            r.setdefault(k, "")
        rows.append(r)
    return rows


def write_report(rows: list[dict], out_dir: Path, seconds: float, command: str, timeout: int = DEFAULT_TIMEOUT) -> str:
    write_csv(out_dir / "coverage.csv", FIELDS, rows)

    n_all = len(rows)
    with_class = [r for r in rows if r["model_class"]]
    meta = [r for r in rows if r["meta_build"] is True]
    built = [r for r in meta if r["neurarch_build"] is True]
    fwd = [r for r in meta if r["forward"] is True]
    both = [r for r in meta if r["backward"] is True]
    eq = [r for r in meta if r["count_equal"] is True]
    fails = [r for r in meta if r["backward"] is not True]
    same = [r for r in fails if r["real_check"] == "same failure"]
    other = [r for r in fails if str(r["real_check"]).startswith("fails too")]
    runs = [r for r in fails if r["real_check"] == "runs"]
    guessed = [r for r in both if r["guessed"]]
    count_diff = [r for r in meta if r["count_equal"] is not True and r["neurarch_params"] != ""]
    no_meta = [r for r in with_class if r["meta_build"] is not True]

    lines = [
        "# Coverage: transformers architectures traced by neurarch",
        "",
        "Generated by `benchmarks/coverage.py`; per-type rows in [coverage.csv](coverage.csv).",
        "",
        "For every model type in transformers' `CONFIG_MAPPING`, the default config is built as the type's",
        "`MODEL_MAPPING` base class on the meta device *without neurarch* (the reference parameter count: unique",
        "`p.numel()` summed), then again through neurarch (`build_from_config` → `plan_inputs` → `trace`",
        "forward + backward on fake tensors) and neurarch's `count_graph(model).parameters` is compared with",
        "the reference.",
        "",
        *run_section(f"`{command}`", seconds, f"{timeout} s per model type (build, trace forward + backward, count), past which it counts as a failure"),
        "## Rates",
        "",
        f"**Of {len(meta)} model types that build on meta, {_pct(len(both), len(meta))} trace forward+backward, {_pct(len(eq), len(meta))} count-equal.**",
        "",
        f"Of the {len(fails)} that do not trace, {len(same)} (marked †) fail the same way with *real* tensors (the",
        "default config cut to one layer, built for real on the CPU, fed the same planned inputs; `real_check`",
        "in the CSV): those failures are not artefacts of fake tensors — their cause is the default config,",
        f"transformers itself, or an input neurarch does not know how to make.  {len(other)} more (‡) fail with real",
        f"tensors too, with another message (the one-layer model may differ).  {len(runs)} run with real tensors at the check's short length: {', '.join(r['model_type'] for r in runs) or 'none'}.",
        "The rest were not checked (a timeout, or too big even with one layer).",
        "",
        f"{len(guessed)} of the traced types needed a value that depends on the weights to choose their path",
        "(MoE routing, predicted durations); neurarch took those values as seeded noise (`guessed` in the CSV:",
        "the ops whose outputs were replaced).",
        "",
        "| | model types | of those that build on meta |",
        "|---|---:|---:|",
        f"| config types in `CONFIG_MAPPING` | {n_all} | |",
        f"| with a `MODEL_MAPPING` base class | {len(with_class)} | |",
        f"| build on meta (plain transformers) | {len(meta)} | 100% |",
        f"| neurarch builds | {len(built)} | {_pct(len(built), len(meta))} |",
        f"| forward traces | {len(fwd)} | {_pct(len(fwd), len(meta))} |",
        f"| forward + backward trace | {len(both)} | {_pct(len(both), len(meta))} |",
        f"| parameter count equal to the plain build | {len(eq)} | {_pct(len(eq), len(meta))} |",
        "",
        f"The {n_all - len(with_class)} config types without a `MODEL_MAPPING` class are sub-configs (a vision tower's",
        "or a text model's config inside a composite model) or task-only models; they are not counted.",
        "",
    ]

    def group(rs: list[dict], title: str) -> None:
        if not rs:
            return
        lines.extend([f"## {title} ({len(rs)})", ""])
        by: dict[tuple[str, str], list[str]] = defaultdict(list)
        for r in rs:
            by[(r["stage"], _cause(r["error"]))].append(r["model_type"])
        lines.extend(["| stage | cause | n | model types |", "|---|---|---:|---|"])
        mark = {r["model_type"]: " (†)" if r.get("real_check") == "same failure" else " (‡)" if str(r.get("real_check")).startswith("fails too") else "" for r in rs}
        for (stage, cause), types in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            cause = cause.replace("|", "\\|")
            lines.append(f"| {stage} | `{cause}` | {len(types)} | {', '.join(t + mark[t] for t in sorted(types))} |")
        lines.append("")

    group(fails, "Failures among the types that build on meta, by cause")
    if same:
        lines.extend(["(†) fails the same way with real tensors and the same inputs (not a fake-tensor artefact); (‡) fails with real tensors too, with another message.", ""])
    if count_diff:
        lines.extend([f"## Parameter count differs from the plain build ({len(count_diff)})", ""])
        lines.extend(["| model type | plain build | neurarch |", "|---|---:|---:|"])
        for r in count_diff:
            lines.append(f"| {r['model_type']} | {r['ref_params']:,} | {r['neurarch_params']:,} |")
        lines.append("")
    no_meta = [dict(r, stage="meta build", error=r["ref_error"]) for r in no_meta]
    group(no_meta, "Types whose plain meta build fails (not counted)")

    lines.extend(slowest_section(rows))
    text = "\n".join(lines)
    (out_dir / "coverage.md").write_text(text)
    return text


def check_catalog() -> int:
    """Trace every bundled catalog config forward+backward; the quick check before a commit."""
    from neurarch.build import build_from_config
    from neurarch.inputs import InputOptions, plan_inputs
    from neurarch.sources.catalog import entries
    from neurarch.trace import trace

    bad = 0
    for model_id, e in entries().items():
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            built = build_from_config(e.config(), model_id)
            plan = plan_inputs(built.model, built.config, InputOptions())
            res = trace(built.model, plan)
        ok = res.forward.ok and bool(res.backward and res.backward.ok)
        bad += not ok
        err = res.forward.error or (res.backward.error if res.backward else "") or ""
        shapes = " ".join(f"{t.name}{list(t.shape)}" for t in plan.tensors)
        print(f"{'ok  ' if ok else 'FAIL'} {model_id:45s} {time.perf_counter() - t0:5.1f}s {shapes} {err}", flush=True)
    print(f"{len(entries()) - bad}/{len(entries())} catalog models trace forward+backward")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated model types (default: all of CONFIG_MAPPING)")
    ap.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, help=f"seconds per model type (default {DEFAULT_TIMEOUT})")
    ap.add_argument("--jobs", type=int, default=1, help="model types side by side, each in its own process (default 1)")
    ap.add_argument("--results", help="keep the sweep's JSON-lines file here; run again with it to skip the types done")
    ap.add_argument("--out", default=str(ROOT / "docs"), help="folder for coverage.md and coverage.csv")
    ap.add_argument("--no-write", action="store_true", help="print only, write no files")
    ap.add_argument("-v", "--verbose", action="store_true", help="print one line per model type")
    ap.add_argument("--catalog", action="store_true", help="trace the bundled catalog models only (a quick check)")
    ap.add_argument("--from-csv", help="rewrite coverage.md from a coverage.csv (no run); --minutes gives the wall time")
    ap.add_argument("--minutes", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))

    if args.catalog:
        return check_catalog()
    if args.from_csv:
        rows = read_csv(Path(args.from_csv))
        text = write_report(rows, Path(args.out), args.minutes * 60, "nice -n 10 python benchmarks/coverage.py")
        print("\n".join(line for line in text.splitlines() if line.startswith("**")))
        return 0
    types = args.only.split(",") if args.only else all_types()
    t0 = time.time()
    rows = run_all(types, args.timeout, args.verbose, args.jobs, args.results)
    elapsed = time.time() - t0
    if args.no_write:
        for r in rows:
            if not args.verbose:
                _print_row(r)
        return 0
    command = (
        "nice -n 10 python benchmarks/coverage.py"
        + (f" --jobs {args.jobs}" if args.jobs != 1 else "")
        + (f" --timeout {args.timeout}" if args.timeout != DEFAULT_TIMEOUT else "")
        + (f" --only {args.only}" if args.only else "")
    )
    text = write_report(rows, Path(args.out), elapsed, command, args.timeout)
    print("\n".join(line for line in text.splitlines() if line.startswith("**")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
