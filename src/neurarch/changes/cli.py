"""``neurarch-trace changes SOURCE`` and ``neurarch-trace diff A B`` (thin faces over the library).

Both are dispatched from the ``commands`` table of :func:`neurarch.cli.main`,
which turns any NeurarchError into one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from ..errors import NeurarchError

CHANGES_FORMATS = ("text", "json", "markdown", "osv")
DIFF_FORMATS = ("text", "markdown", "json")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line and exit code 2 (no usage dump)."""

    def error(self, message: str):  # noqa: D401
        raise NeurarchError(f"{self.prog.removeprefix('neurarch-trace ')}: {message}")


def parse_since(value: str) -> datetime:
    """YYYY-MM-DD or an ISO time -> an aware UTC datetime (argparse type)."""
    try:
        dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--since wants a date like 2026-06-01, got {value!r}") from None
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def _changes_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="neurarch-trace changes",
        description="Every revision of a model repo, newest first, with what changed in its config, tokenizer, "
        "chat template, generation config and weights (safetensors headers only). SOURCE is a hub id (org/name) or a "
        "local git clone of a model repo.",
    )
    p.add_argument("source", metavar="SOURCE", help="org/name on the Hub (HF_ENDPOINT is honoured), or a local git clone")
    p.add_argument("--since", type=parse_since, metavar="DATE", help="only revisions from this date on (YYYY-MM-DD, UTC)")
    p.add_argument("--format", "-f", choices=CHANGES_FORMATS, default="text", help="text (default), json, markdown, or osv (a JSON array of OSV records)")
    p.add_argument("--output", "-o", metavar="PATH", help="write to a file instead of stdout")
    p.add_argument("--store", metavar="URL", help="database URL of the store (default: the store's default); revisions read before are not read again")
    p.add_argument("--no-store", action="store_true", help="read everything afresh and store nothing")
    g = p.add_argument_group("plan: graph changes with the plan at both revisions (slower: each side is simulated)")
    g.add_argument("--plan", action="store_true", help="memory per mode, largest batch per card, cost, and the cards that stop or start fitting")
    g.add_argument("--modes", default="full,lora,qlora,inference", help="memory modes to simulate (default: full,lora,qlora,inference)")
    g.add_argument("--seq-len", type=int, help="tokens per sample (default 2048 decoders / 512 encoders, capped by the model's positions)")
    g.add_argument("--batch", type=int, help="batch of the simulation (default 1)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _write(text: str, path: str | None) -> None:
    text = text if text.endswith("\n") else text + "\n"
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def run_changes(argv: list[str]) -> int:
    args = _changes_parser().parse_args(argv)
    from . import readers, render, track

    progress = None if args.quiet else (lambda msg: print(f"neurarch-trace changes: {msg}", file=sys.stderr, flush=True))
    plan = _plan_options(args) if args.plan else None
    reader = readers.open_source(args.source)
    if args.no_store:
        history = track.track(reader, since=args.since, progress=progress, plan=plan)
    else:
        from . import storage

        history = storage.track_stored(reader, since=args.since, url=args.store, progress=progress, plan=plan)
    _write(render.render(history, args.format), args.output)
    return 0


def _plan_options(args):
    """neurarch Options with a plan and a cost, from the changes command's few plan flags."""
    from .. import Options
    from ..inputs import InputOptions
    from ..pipeline import CostOptions, PlanOptions

    inputs = InputOptions(batch=args.batch or 1, seq_len=args.seq_len)
    inputs.validate()
    plan = PlanOptions(modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()))
    plan.validate()
    return Options(inputs=inputs, plan=plan, cost=CostOptions(), verify=False, offline=True)


def _diff_parser() -> argparse.ArgumentParser:
    from ..cli.trace import add_model_options as _add_model_options

    p = _Parser(
        prog="neurarch-trace diff",
        description="Analyse two sources with the same options and show them side by side. A and B: hub ids, "
        "ORG/NAME@REV, catalog ids, config.json files or model folders, or PATH@REV inside a git clone "
        "(read with git show, nothing checked out). With --plan: memory per mode, the largest batch per card, the "
        "cost, and the cards that stop or start fitting.",
    )
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p.add_argument("--format", "-f", choices=DIFF_FORMATS, default="text")
    p.add_argument("--output", "-o", metavar="PATH", help="write to a file instead of stdout")
    _add_model_options(p)
    return p


def run_diff(argv: list[str]) -> int:
    args = _diff_parser().parse_args(argv)
    from ..cli.trace import options_from_args as _options
    from . import plandiff

    args.depth, args.max_rows = None, 0  # what _options reads of the trace command's own flags
    if args.revision:
        raise NeurarchError("diff takes revisions as A@REV and B@REV, not --revision")
    options = _options(args)
    d = plandiff.diff(args.a, args.b, options)
    _write(plandiff.render(d, args.format), args.output)
    return 0
