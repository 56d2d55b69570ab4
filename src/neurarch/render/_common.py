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


def money(x: float | None) -> str:
    if x is None:
        return "—"
    return f"${x:,.2f}" if x >= 0.01 else f"${x:.4f}"


def hours(x: float | None) -> str:
    if x is None:
        return "—"
    if x < 1:
        return f"{x * 60:.1f} min"
    return f"{x:,.1f} h"


def flops(x: float | None) -> str:
    if x is None:
        return "—"
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if x >= scale:
            return f"{x / scale:,.2f} {unit}"
    return f"{x:,.0f} FLOP"


def cost_rows(report: Report) -> list[list[str]]:
    """The "What it costs to run" table: one row per card."""
    c = report.cost
    out = []
    for r in c.cards:
        mark = " ".join(m for m, on in (("cheapest", r.cheapest), ("fastest", r.fastest)) if on)
        if r.step_seconds is None:
            out.append([r.name, str(r.batch) if r.batch else "—", "—", "—", "—", "—", "—", r.note or ""])
            continue
        out.append(
            [
                r.name,
                str(r.batch),
                f"{r.step_seconds * 1000:,.1f} ms",
                hours(r.run_hours),
                money(r.usd),
                f"{100 * r.mfu:.0f} %" if r.mfu is not None else "—",
                r.bound or "—",
                "; ".join(x for x in (mark, r.note or "") if x),
            ]
        )
    return out


COST_HEADER = ["card", "batch", "step", "run", "cost", "MFU", "bound", ""]


def cost_summary(report: Report) -> list[str]:
    c = report.cost
    a = c.assumptions
    data = f"{a.epochs} epochs x {a.tokens:,} tokens" if a.tokens else f"{a.epochs} epochs x {a.samples:,} samples"
    lines = [
        f"Estimated one run on {c.headline.card}: {money(c.headline.usd)}, {hours(c.headline.run_hours)} at batch {c.headline.batch} "
        f"({data}, {a.precision}, roofline estimate)."
    ]
    per = f"{flops(c.flops_per_sample)} per sample forward+backward"
    if c.flops_per_token:
        per += f", {flops(c.flops_per_token)} per token"
    lines.append(per + ".")
    lines.append(
        f"Assumes {a.compute_efficiency:.0%} of peak tensor rate and {a.bandwidth_efficiency:.0%} of bandwidth ({a.sources}); "
        f"{a.launch_seconds * 1e6:.0f} us per operator; optimizer {a.optimizer}."
    )
    if c.ops_without_formula:
        lines.append(f"Ops counted as 0 FLOPs (formula failed): {', '.join(c.ops_without_formula)}.")
    return lines
