"""The Markdown twin of the report (GitHub-flavoured tables)."""

from __future__ import annotations

from ..report import Report
from ._common import (
    COST_HEADER,
    MEMORY_HEADER,
    SECTIONS,
    checkpoint_sentence,
    cost_rows,
    cost_summary,
    fit_header,
    fit_rows,
    memory_rows,
    memory_summary,
    multi_gpu_lines,
    n,
    pass_line,
    pct,
    rows,
    shape,
)
from .verifier import section as verifier_section


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(_esc(x) for x in r) + " |" for r in body]


def _esc(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _header(report: Report, max_rows) -> list[str]:
    m = report.model
    out = [f"# {m.id}", ""]
    out.append(f"- **Source**: {m.source} — {_esc(m.provenance)}")
    out.append(f"- **Architecture**: {m.architecture or '—'} (built `{m.model_class}`, {m.library})")
    if m.revision:
        out.append(f"- **Revision**: `{m.revision}`")
    if report.input:
        tensors = ", ".join(f"`{t.name}` {shape(t.shape)} {t.dtype}" for t in report.input.tensors)
        out.append(f"- **Input**: {tensors} — {_esc(report.input.how)}")
    out.append(f"- **Trace**: {_esc(pass_line(report))}")
    for note in m.notes:
        out.append(f"- **Note**: {_esc(note)}")
    return out


def _parameters(report: Report, max_rows) -> list[str]:
    p = report.params
    out = ["", "## Parameters", "", "| | scalars |", "|---|---:|"]
    out.append(f"| parameters (unique, tied once) | {n(p.parameters)} |")
    if p.trainable != p.parameters:
        out.append(f"| of which trainable | {n(p.trainable)} |")
    out.append(f"| buffers (persistent) | {n(p.buffers)} |")
    if p.counters:
        out.append(f"| step counters (not counted) | {n(p.counters)} |")
    if p.non_persistent_buffers:
        out.append(f"| non-persistent buffers (not saved) | {n(p.non_persistent_buffers)} |")
    out.append(f"| **derived** = parameters + buffers | **{n(p.derived)}** |")
    out.append(f"| **checkpoint** | **{n(p.checkpoint) if p.checkpoint is not None else 'not read'}** |")
    if p.checkpoint is not None:
        out.append(f"| delta | {p.delta:+,} ({pct(p.delta_pct)}) |")
    out.append("")
    if p.checkpoint_source:
        out.append(f"Checkpoint source: {_esc(p.checkpoint_source)}")
        out.append("")
    out.append(checkpoint_sentence(p))
    for d in p.differences:
        out.append(f"- {d.scalars:+,}: {_esc(d.cause)} ({', '.join(f'`{t}`' for t in d.tensors[:4])})")
    for group in p.tied:
        out.append(f"- tied: {' = '.join(f'`{g}`' for g in group)}")
    return out


def _layers(report: Report, max_rows) -> list[str]:
    s = report.structure
    out = ["", f"## Layers ({s.layers} rows, {s.modules} modules)", "", "| # | name | type | output shape | params |", "|---:|---|---|---|---:|"]
    for node in rows(report, max_rows):
        if node is None:
            out.append(f"| … | ({s.layers - (max_rows or 0)} rows hidden) | | | |")
            continue
        out.append(f"| {node.index} | `{node.name}` | {node.type} | {shape(node.output_shape)} | {n(node.parameters) if node.parameters else ''} |")
    return out


def _memory(report: Report, max_rows) -> list[str]:
    if report.memory is None:
        return []
    return ["", "## Memory: what a CUDA card needs", ""] + _table(MEMORY_HEADER, memory_rows(report)) + [""] + memory_summary(report)


def _cards(report: Report, max_rows) -> list[str]:
    return ["", "## What fits on which card", ""] + _table(fit_header(report), fit_rows(report)) if report.cards else []


def _multi_gpu(report: Report, max_rows) -> list[str]:
    return [""] + [f"- {x}" for x in multi_gpu_lines(report)] if report.multi_gpu else []


def _cost(report: Report, max_rows) -> list[str]:
    if report.cost is None:
        return []
    out = ["", "## What it costs to run", ""]
    out += cost_summary(report)[:1] + [""]
    out.append("| " + " | ".join(COST_HEADER) + " |")
    out.append("|---|---:|---:|---:|---:|---:|---|---|")
    out += ["| " + " | ".join(_esc(x) for x in r) + " |" for r in cost_rows(report)]
    return out + [""] + cost_summary(report)[1:]


def _verifier(report: Report, max_rows) -> list[str]:
    return ["", verifier_section(report.findings, report.verifier, markdown=True)] if report.verifier is not None else []


def _errors(report: Report, max_rows) -> list[str]:
    if not report.errors:
        return []
    return ["", "## Sections that failed", "", "The rest of the report stands.", ""] + [f"- `{_esc(k)}`: {_esc(v)}" for k, v in report.errors.items()]


def _warnings(report: Report, max_rows) -> list[str]:
    return ["", "## Warnings", ""] + [f"- {_esc(w)}" for w in report.warnings] if report.warnings else []


# One function per section, named after it: a section added to SECTIONS without one fails at import.
RENDERERS = {name: globals()[f"_{name}"] for name in SECTIONS}


def render_markdown(report: Report, *, max_rows: int | None = None) -> str:
    out: list[str] = []
    for name in SECTIONS:
        out += RENDERERS[name](report, max_rows)
    out += ["", f"<sub>{report.tool}, report schema {report.schema_version}</sub>", ""]
    return "\n".join(out)
