"""The terminal view: rich tables, printed to a string."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from ..report import Report
from ._common import (
    COST_HEADER,
    MEMORY_HEADER,
    checkpoint_sentence,
    cost_rows,
    cost_summary,
    fit_header,
    fit_rows,
    input_line,
    memory_rows,
    memory_summary,
    multi_gpu_lines,
    n,
    pass_line,
    pct,
    rows,
    shape,
)


def render_text(report: Report, *, max_rows: int | None = None, color: bool = False, width: int | None = None) -> str:
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=color, color_system="auto" if color else None, width=width or 120, soft_wrap=False)
    m = report.model
    con.print(f"[bold]{m.id}[/bold]  ({m.source}: {m.provenance})")
    built = m.model_class or "?"
    arch = f"{m.architecture} -> " if m.architecture and m.architecture != built else ""
    con.print(f"architecture: {arch}{built}, {m.library}" + (f", revision {m.revision}" if m.revision else ""))
    for note in m.notes:
        con.print(f"note: {note}")
    con.print(f"input: {input_line(report)}")
    ok = report.forward_pass.ok and (report.backward_pass is None or report.backward_pass.ok)
    con.print(("[green]" if ok else "[red]") + pass_line(report) + ("[/green]" if ok else "[/red]"))

    t = Table(title=f"Layers ({report.structure.layers} rows, {report.structure.modules} modules)", title_justify="left")
    t.add_column("#", justify="right")
    t.add_column("name")
    t.add_column("type")
    t.add_column("output shape")
    t.add_column("params", justify="right")
    for node in rows(report, max_rows):
        if node is None:
            hidden = report.structure.layers - (max_rows or 0)
            t.add_row("…", f"({hidden} rows hidden; --max-rows 0 shows all)", "", "", "")
            continue
        t.add_row(str(node.index), node.name, node.type, shape(node.output_shape), n(node.parameters) if node.parameters else "")
    con.print(t)

    p = report.params
    c = Table(title="Parameters", title_justify="left", show_header=False)
    c.add_column("what")
    c.add_column("scalars", justify="right")
    c.add_row("parameters (unique, tied once)", n(p.parameters))
    if p.trainable != p.parameters:
        c.add_row("  of which trainable", n(p.trainable))
    c.add_row("buffers (persistent)", n(p.buffers))
    if p.counters:
        c.add_row("step counters (not counted)", n(p.counters))
    if p.non_persistent_buffers:
        c.add_row("non-persistent buffers (not saved)", n(p.non_persistent_buffers))
    c.add_row("[bold]derived[/bold] = parameters + buffers", n(p.derived))
    c.add_row("[bold]checkpoint[/bold]", n(p.checkpoint) if p.checkpoint is not None else "not read")
    if p.checkpoint is not None:
        c.add_row("delta", f"{p.delta:+,} ({pct(p.delta_pct)})")
    con.print(c)
    if p.checkpoint_source:
        con.print(f"checkpoint source: {p.checkpoint_source}")
    con.print(checkpoint_sentence(p))
    for d in p.differences:
        con.print(f"  {d.scalars:+,}: {d.cause} ({', '.join(d.tensors[:4])}{' …' if len(d.tensors) > 4 else ''})")
    for group in p.tied:
        con.print(f"tied: {' = '.join(group)}")
    if report.memory is not None:
        mt = Table(title="Memory: what a CUDA card needs", title_justify="left")
        for i, h in enumerate(MEMORY_HEADER):
            mt.add_column(h, justify="right" if 1 <= i <= 8 else "left")
        for r in memory_rows(report):
            mt.add_row(*r)
        con.print(mt)
        for line in memory_summary(report):
            con.print(line)
    if report.cards:
        ft = Table(title="What fits on which card", title_justify="left")
        for i, h in enumerate(fit_header(report)):
            ft.add_column(h, justify="left" if i == 0 else "right")
        for r in fit_rows(report):
            ft.add_row(*r)
        con.print(ft)
    for line in multi_gpu_lines(report):
        con.print(line)
    if report.cost is not None:
        ct = Table(title="What it costs to run", title_justify="left")
        for i, h in enumerate(COST_HEADER):
            ct.add_column(h, justify="right" if 1 <= i <= 5 else "left")
        for r in cost_rows(report):
            ct.add_row(*r)
        con.print(ct)
        for line in cost_summary(report):
            con.print(line)
    if report.verifier is not None:
        from ..verify.text import section

        con.print(section(report.findings, report.verifier), markup=False, highlight=False)
    for w in report.warnings:
        con.print(f"[yellow]warning:[/yellow] {w}")
    return buf.getvalue()
