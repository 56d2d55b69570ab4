"""The terminal view: rich tables, printed to a string."""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.table import Table

from ..report import Report
from ._common import (
    MODES,
    SECTIONS,
    checkpoint_sentence,
    cost_summary,
    hours,
    input_line,
    memory_summary,
    money,
    multi_gpu_lines,
    n,
    pass_line,
    pct,
    rows,
    shape,
)
from .verifier import section as verifier_section

# The default text reads cleanly at 100 columns: numbers in the tables, words below them.
WIDTH = 100
_BOX = box.SIMPLE_HEAD
_SHORT = {"full": "full", "lora": "LoRA", "qlora": "QLoRA", "inference": "inference"}


def _gib(x: int | None) -> str:
    return "—" if x is None else f"{x / 2**30:,.2f}"


def _memory_table(con: Console, report: Report) -> None:
    m = report.memory
    assert m is not None
    t = Table(title="Memory: what a CUDA card needs (GiB)", title_justify="left", box=_BOX)
    for i, h in enumerate(("mode", "card peak", "tensors", "weights", "grads", "optim.", "activ.", "temp.", "overhead")):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    below = []
    for mode in MODES:
        x = getattr(m, mode)
        if x is None:
            if mode in m.errors:
                below.append(f"  {_SHORT[mode]}: not simulated: {m.errors[mode]}")
            continue
        b = x.breakdown
        t.add_row(_SHORT[mode], _gib(x.peak_bytes), _gib(x.peak_tensor_bytes), _gib(b.weights), _gib(b.gradients), _gib(b.optimizer), _gib(b.activations), _gib(b.temporary), _gib(b.overhead))
        below.append(f"  {_SHORT[mode]} peaks in {x.phase}" + (f" ({x.module})" if x.module else ""))
    con.print(t)
    for line in below:
        _para(con, line, indent="    ")


def _fit_table(con: Console, report: Report) -> None:
    modes = [mode for mode in MODES if mode in report.cards[0].max_batch]
    t = Table(title="What fits on which card: the largest batch per mode", title_justify="left", box=_BOX)
    t.add_column("card", no_wrap=True)
    t.add_column("memory", justify="right", no_wrap=True)
    for mode in modes:
        t.add_column(_SHORT[mode], justify="right", no_wrap=True)
    nominal = False
    for f in report.cards:
        mark = "" if f.memory_basis == "usable" else "*"
        nominal = nominal or bool(mark)
        t.add_row(f.name, f"{f.memory_bytes / 2**30:,.1f} GiB{mark}", *(f"{f.max_batch[mode]:,}" for mode in modes))
    con.print(t)
    if nominal:
        con.print("  * nominal memory: no figure of what PyTorch can allocate on this card was found", highlight=False)


def _cost_table(con: Console, report: Report) -> None:
    c = report.cost
    assert c is not None
    t = Table(title="What it costs to run", title_justify="left", box=_BOX)
    for i, h in enumerate(("card", "run", "batch", "step", "time", "cost", "MFU", "bound", "")):
        t.add_column(h, justify="right" if 2 <= i <= 6 else "left", no_wrap=True)
    notes: list[str] = []
    for r in c.cards:
        run = _SHORT[r.mode] if r.mode in _SHORT else r.mode
        run += f" x{r.gpus}" if r.gpus > 1 else ""
        mark = " ".join(m for m, on in (("cheapest", r.cheapest), ("fastest", r.fastest)) if on)
        ref = ""
        if r.note:
            if r.note not in notes:
                notes.append(r.note)
            ref = f"[{notes.index(r.note) + 1}]"
        flag = " ".join(x for x in (ref, mark) if x)
        if r.step_seconds is None:
            t.add_row(r.name, run if r.fits is not False else "—", str(r.batch) if r.batch else "—", "—", "—", "—", "—", "—", flag)
            continue
        t.add_row(r.name, run, str(r.batch), f"{r.step_seconds * 1000:,.1f} ms", hours(r.run_hours), money(r.usd), f"{100 * r.mfu:.0f} %" if r.mfu is not None else "—", r.bound or "—", flag)
    con.print(t)
    for i, note in enumerate(notes, 1):
        _para(con, f"  [{i}] {note}", indent="      ")


def _para(con: Console, text: str, indent: str = "  ", style: str | None = None) -> None:
    """One paragraph of plain text (never markup), wrapped at the console width under a hanging indent."""
    import textwrap

    lines = textwrap.wrap(text, width=con.width - 1, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False) or [""]
    for line in lines:
        con.print(line, markup=False, highlight=False, style=style, overflow="ignore", crop=False)


def _header(con: Console, report: Report, max_rows) -> None:
    m = report.model
    _para(con, f"{m.id}  ({m.source}: {m.provenance})")
    built = m.model_class or "?"
    arch = f"{m.architecture} -> " if m.architecture and m.architecture != built else ""
    _para(con, f"architecture: {arch}{built}, {m.library}" + (f", revision {m.revision}" if m.revision else ""))
    for note in m.notes:
        _para(con, f"note: {note}")
    _para(con, f"input: {input_line(report)}")
    ok = report.forward_pass.ok and (report.backward_pass is None or report.backward_pass.ok)
    _para(con, pass_line(report), style="green" if ok else "red")


def _layers(con: Console, report: Report, max_rows) -> None:
    # No rules and one space between columns: names up to ~55 characters stay on one line at 100 columns.
    t = Table(title=f"Layers ({report.structure.layers} rows, {report.structure.modules} modules)", title_justify="left", box=None, padding=(0, 1, 0, 0), pad_edge=False, header_style="bold")
    shown = rows(report, max_rows)
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("name", overflow="fold")
    t.add_column("type", no_wrap=True)
    t.add_column("output shape", no_wrap=True)
    t.add_column("params", justify="right", no_wrap=True)
    for node in shown:
        if node is None:
            hidden = report.structure.layers - (max_rows or 0)
            t.add_row("…", f"({hidden} rows hidden; --max-rows 0 shows all)", "", "", "")
            continue
        t.add_row(str(node.index), node.name, node.type, shape(node.output_shape), n(node.parameters) if node.parameters else "")
    con.print(t)


def _parameters(con: Console, report: Report, max_rows) -> None:
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
        _para(con, f"checkpoint source: {p.checkpoint_source}")
    _para(con, checkpoint_sentence(p))
    for d in p.differences:
        _para(con, f"  {d.scalars:+,}: {d.cause} ({', '.join(d.tensors[:4])}{' …' if len(d.tensors) > 4 else ''})", indent="    ")
    for group in p.tied:
        _para(con, f"tied: {' = '.join(group)}")


def _memory(con: Console, report: Report, max_rows) -> None:
    if report.memory is not None:
        _memory_table(con, report)
        for line in memory_summary(report):
            _para(con, line)


def _cards(con: Console, report: Report, max_rows) -> None:
    if report.cards:
        _fit_table(con, report)


def _multi_gpu(con: Console, report: Report, max_rows) -> None:
    for line in multi_gpu_lines(report):
        _para(con, line)


def _cost(con: Console, report: Report, max_rows) -> None:
    if report.cost is not None:
        _cost_table(con, report)
        for line in cost_summary(report):
            _para(con, line)


def _verifier(con: Console, report: Report, max_rows) -> None:
    if report.verifier is not None:
        con.print(verifier_section(report.findings, report.verifier, width=con.width - 1), markup=False, highlight=False)


def _errors(con: Console, report: Report, max_rows) -> None:
    for section, error in report.errors.items():
        _para(con, f"section {section} failed: {error} (the rest of the report stands)", style="red")


def _warnings(con: Console, report: Report, max_rows) -> None:
    for w in report.warnings:
        _para(con, f"warning: {w}", style="yellow")


# One function per section, named after it: a section added to SECTIONS without one fails at import.
RENDERERS = {name: globals()[f"_{name}"] for name in SECTIONS}


def render_text(report: Report, *, max_rows: int | None = None, color: bool = False, width: int | None = None) -> str:
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=color, color_system="auto" if color else None, width=width or WIDTH, soft_wrap=False)
    for name in SECTIONS:
        RENDERERS[name](con, report, max_rows)
    return buf.getvalue()
