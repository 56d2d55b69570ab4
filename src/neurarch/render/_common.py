"""Formatting shared by the renderers (numbers, shapes, sentences)."""

from __future__ import annotations

from ..report import Node, Params, Report


def n(x: int | None) -> str:
    return "—" if x is None else f"{x:,}"


def shape(s: list[int] | None) -> str:
    if s is None:
        return "—"
    return "[" + ", ".join(str(d) for d in s) + "]"


def pct(x: float | None) -> str:
    if x is None:
        return "—"
    if x == 0:
        return "0 %"
    return f"{x:+.4f} %" if abs(x) < 0.01 else f"{x:+.2f} %"


def rows(report: Report, max_rows: int | None) -> list[Node | None]:
    """The layer-table rows to show; None marks the elided middle."""
    nodes = report.structure.nodes
    if max_rows is None or len(nodes) <= max_rows:
        return list(nodes)
    head = max_rows // 2
    tail = max_rows - head
    return [*nodes[:head], None, *nodes[-tail:]]


def pass_line(report: Report) -> str:
    f, b = report.forward_pass, report.backward_pass
    if not f.ok:
        where = f" in {f.module}" if f.module else ""
        return f"forward pass FAILED{where}: {f.error}"
    s = "forward pass ok"
    if b is not None:
        s += ", backward pass ok" if b.ok else f", backward pass FAILED: {b.error}"
    return s


def checkpoint_sentence(p: Params) -> str:
    if p.checkpoint is None:
        return "No checkpoint was read: the published scalar count is unknown (derived is the graph's own count)."
    if p.delta == 0:
        return f"Derived matches the checkpoint exactly ({p.checkpoint:,} scalars)."
    s = f"Derived differs from the checkpoint by {p.delta:+,} scalars ({pct(p.delta_pct)})"
    if p.explained:
        return s + ", fully explained:"
    return s + ("; partly explained:" if p.differences else "; cause unknown.")


def input_line(report: Report) -> str:
    i = report.input
    if i is None:
        return "—"
    tensors = ", ".join(f"{t.name} {shape(t.shape)} {t.dtype}" for t in i.tensors)
    return f"{tensors}  ({i.how})"
