"""Renderers: a Report in, text out.  They see nothing but the Report.

* ``text``     — rich tables for the terminal (default);
* ``json``     — the Index JSON (``Report.model_dump_json``), see docs/json.md;
* ``jsonl``    — one compact JSON line per report;
* ``markdown`` — the Markdown twin;
* ``html``     — one self-contained page (also what ``--share`` writes).
"""

from __future__ import annotations

from ..report import Report

FORMATS = ("text", "json", "jsonl", "markdown", "html")


def render(report: Report, fmt: str = "text", *, max_rows: int | None = None, color: bool = False, width: int | None = None) -> str:
    if fmt == "json":
        return report.model_dump_json(indent=2)
    if fmt == "jsonl":
        return report.model_dump_json()
    if fmt == "markdown":
        from .markdown import render_markdown

        return render_markdown(report, max_rows=max_rows)
    if fmt == "html":
        from .html import render_html

        return render_html(report)
    if fmt == "text":
        from .text import render_text

        return render_text(report, max_rows=max_rows, color=color, width=width)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
