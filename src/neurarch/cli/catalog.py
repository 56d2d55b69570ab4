"""``neurarch-trace catalog``: the bundled offline catalog of published configs."""

from __future__ import annotations

import argparse
import json

from .common import write


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neurarch-trace catalog", description="List the bundled offline catalog of published configs.")
    p.add_argument("--format", "-f", choices=["text", "json"], default="text")
    p.add_argument("--debug", action="store_true")
    return p


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from ..sources.catalog import entries

    es = list(entries().values())
    if args.format == "json":
        write(
            json.dumps(
                [
                    {
                        "id": e.id,
                        "tier": e.tier,
                        "architecture": e.architecture,
                        "model_type": e.model_type,
                        "checkpoint": e.checkpoint_count,
                        "provenance": e.provenance,
                        "checkpoint_source": e.checkpoint_source,
                    }
                    for e in es
                ],
                indent=2,
            ),
            None,
        )
        return 0
    import io

    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Bundled catalog ({len(es)} published configs; tier A = from the Hub page, B = verbatim copy in public code, C = reconstructed)", title_justify="left")
    for col in ("id", "tier", "architecture", "checkpoint scalars"):
        t.add_column(col, justify="right" if col.startswith("checkpoint") else "left")
    for e in es:
        t.add_row(e.id, e.tier, e.architecture or "—", f"{e.checkpoint_count:,}" if e.checkpoint_count else "—")
    buf = io.StringIO()
    Console(file=buf, width=120, color_system=None).print(t)
    write(buf.getvalue(), None)
    return 0
