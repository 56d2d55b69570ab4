"""``neurarch-trace sweep`` / ``python -m neurarch.sweep``: many models, each under its own limits.

    python -m neurarch.sweep bert-base-uncased gpt2 --plan --out results.jsonl
    python -m neurarch.sweep --ids-file ids.txt --out results.jsonl --workers 4 --memory-limit 16GiB
    python -m neurarch.sweep --ids-file ids.txt --out results.jsonl --scheduler tcp://10.0.0.5:8786

Each model is analysed as ``neurarch-trace MODEL`` would (the same model flags:
``--plan``, ``--seq-len``, ...) in its own process; its record (status, the
Index JSON report when ok, the error line otherwise) is appended to ``--out``
as it finishes.  Run the same command again to carry on: models already in
the file are skipped (``--no-resume`` starts afresh).  Exit code 0 when every
model has an ``ok`` record, 3 when some failed, 2 for bad flags.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
from pathlib import Path

from ..errors import NeurarchError

EXIT_SOME_FAILED = 3
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
PRELOAD = ("torch", "transformers", "neurarch.pipeline")  # imported once per worker; each model forks warm
MARGIN_S = 30.0  # the process is killed this long after --timeout: the pipeline's own limit answers first


def parse_bytes(text: str) -> int:
    """``"16GiB"``, ``"8GB"``, ``"500MB"`` or a plain number of bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise NeurarchError(f"--memory-limit must look like 16GiB, 8GB or 500MB, got {text!r}")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise NeurarchError(f"--memory-limit must be more than 0, got {text!r}")
    return value


def _machine_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def parser() -> argparse.ArgumentParser:
    from ..cli.trace import add_model_options

    p = argparse.ArgumentParser(
        prog="neurarch-trace sweep",
        description="Analyse many models, each in its own process under a time and a memory limit, on a local "
        "dask cluster or an existing one; results go to a JSON-lines file as they finish (resumable).",
    )
    p.add_argument("models", nargs="*", metavar="MODEL", help="hub id, catalog id, config.json, model folder, timm:NAME ...")
    p.add_argument("--ids-file", metavar="PATH", help="more models, one per line (# starts a comment)")
    p.add_argument("--out", required=True, metavar="PATH", help="the results file (JSON lines): appended to, and read to resume")
    p.add_argument("--workers", type=int, help="local worker processes side by side (default: one per CPU core)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="a dask scheduler address (tcp://host:8786): run on that cluster instead of a local one")
    p.add_argument("--memory-limit", metavar="SIZE", help="resident memory per model, its processes summed, e.g. 16GiB (default: the machine's memory / --workers)")
    p.add_argument("--grace", type=float, default=10.0, help="seconds a model may take to stop after its time limit before it is killed as a hang (default 10)")
    p.add_argument("--no-resume", action="store_true", help="start the results file afresh instead of skipping the models already in it")
    p.add_argument("--retry-failed", action="store_true", help="run again the models whose record in --out is not ok (the others are skipped)")
    p.add_argument("--depth", type=int, help="layer-table granularity in the reports (as neurarch-trace --depth)")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the summary line")
    add_model_options(p)
    return p


def read_ids(path: str) -> list[str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise NeurarchError(f"cannot read --ids-file {path!r}: {e.strerror or e}") from None
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


def analyze_model(spec: str, options) -> dict:
    """The sweep's job: the Index JSON report of one model (raises as ``analyze`` does)."""
    from ..pipeline import analyze

    return json.loads(analyze(spec, options).model_dump_json())


def _summary(rec) -> str:
    if rec.ok and isinstance(rec.value, dict):
        params = (rec.value.get("params") or {}).get("derived")
        return f"{params:,} parameters" if isinstance(params, int) else ""
    return rec.error


def main(argv: list[str] | None = None) -> int:
    from ..cli.trace import options_from_args

    args = parser().parse_args(argv)
    args.max_rows = None
    opts = options_from_args(args)  # bad model flags are answered here, before anything starts
    models = list(args.models) + (read_ids(args.ids_file) if args.ids_file else [])
    models = list(dict.fromkeys(models))  # a model listed twice runs once
    if not models:
        raise NeurarchError("no models: name some, or pass --ids-file")
    if args.workers is not None and args.workers < 1:
        raise NeurarchError(f"--workers must be 1 or more, got {args.workers}")
    if args.grace < 0:
        raise NeurarchError(f"--grace must be 0 or more seconds, got {args.grace}")
    workers = args.workers or max(1, os.cpu_count() or 1)
    memory: int | None
    if args.memory_limit:
        memory = parse_bytes(args.memory_limit)
    else:
        total = _machine_memory()
        memory = total // workers if total else None
    out = Path(args.out)
    if out.exists() and out.is_dir():
        raise NeurarchError(f"--out {args.out!r} is a folder; give a file path")
    from . import run_sweep

    def show(rec) -> None:
        if not args.quiet:
            print(f"{rec.status:8s} {rec.key}  {rec.seconds:.1f} s  {_summary(rec)}", flush=True)

    records = run_sweep(
        models,
        job=functools.partial(analyze_model, options=opts),
        results_path=out,
        time_limit_s=opts.time_limit_s + MARGIN_S,
        memory_limit_bytes=memory,
        grace_s=args.grace,
        scheduler=args.scheduler,
        workers=workers,
        resume=not args.no_resume,
        retry_failed=args.retry_failed,
        preload=PRELOAD,
        on_record=show,
    )
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    print(f"{len(records)} models in {out}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())), flush=True)
    return 0 if counts.get("ok", 0) == len(models) else EXIT_SOME_FAILED


def run(argv: list[str] | None = None) -> int:
    """``python -m neurarch.sweep``: :func:`main` with one-line errors and exit code 2 for bad input."""
    try:
        return main(argv)
    except NeurarchError as e:
        print(f"neurarch-trace sweep: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("neurarch-trace sweep: interrupted (the results file keeps what finished; run again to resume)", file=sys.stderr)
        return 130
