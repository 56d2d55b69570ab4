"""One self-contained HTML page (no external assets), what --share writes."""

from __future__ import annotations

from html import escape

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
    shape,
)
from .charts import batch_chart, memory_charts
from .verifier import context_line, counts_line


def _table(header, body) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{escape(x)}</td>" for x in r) + "</tr>" for r in body)
    return f"<table><tr>{head}</tr>{rows}</table>"


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#1b1f24}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0}td,th{padding:.2em .7em;border-bottom:1px solid #eee;text-align:left}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}code{font-size:.92em}
.ok{color:#116329}.bad{color:#b3261e}.meta{color:#57606a}
figure{margin:.6em 0}table{display:block;overflow-x:auto;max-width:100%}
"""


def _header(report: Report) -> list[str]:
    m, e = report.model, escape
    ok = report.forward_pass.ok and (report.backward_pass is None or report.backward_pass.ok)
    parts = [
        f"<h1>{e(m.id)}</h1>",
        f"<p class=meta>{e(m.source)} — {e(m.provenance)}<br>architecture {e(m.architecture or '—')} (built <code>{e(m.model_class or '?')}</code>, {e(m.library)})"
        + (f"<br>revision <code>{e(m.revision)}</code>" if m.revision else "")
        + "</p>",
    ]
    if report.input:
        tensors = ", ".join(f"<code>{e(t.name)}</code> {e(shape(t.shape))} {e(t.dtype)}" for t in report.input.tensors)
        parts.append(f"<p>Input: {tensors} <span class=meta>({e(report.input.how)})</span></p>")
    parts.append(f"<p class={'ok' if ok else 'bad'}>{e(pass_line(report))}</p>")
    for note in m.notes:
        parts.append(f"<p class=meta>Note: {e(note)}</p>")
    return parts


def _parameters(report: Report) -> list[str]:
    p, e = report.params, escape
    parts = ["<h2>Parameters</h2><table>"]
    rows = [("parameters (unique, tied once)", n(p.parameters)), ("buffers (persistent)", n(p.buffers))]
    if p.trainable != p.parameters:
        rows.insert(1, ("of which trainable", n(p.trainable)))
    if p.counters:
        rows.append(("step counters (not counted)", n(p.counters)))
    if p.non_persistent_buffers:
        rows.append(("non-persistent buffers (not saved)", n(p.non_persistent_buffers)))
    rows += [("<b>derived</b> = parameters + buffers", f"<b>{n(p.derived)}</b>"), ("<b>checkpoint</b>", f"<b>{n(p.checkpoint) if p.checkpoint is not None else 'not read'}</b>")]
    if p.checkpoint is not None:
        rows.append(("delta", f"{p.delta:+,} ({e(pct(p.delta_pct))})"))
    for k, v in rows:
        parts.append(f"<tr><td>{k}</td><td class=num>{v}</td></tr>")
    parts.append("</table>")
    if p.checkpoint_source:
        parts.append(f"<p class=meta>Checkpoint source: {e(p.checkpoint_source)}</p>")
    parts.append(f"<p>{e(checkpoint_sentence(p))}</p>")
    if p.differences or p.tied:
        parts.append("<ul>")
        for d in p.differences:
            parts.append(f"<li>{d.scalars:+,}: {e(d.cause)} ({', '.join(f'<code>{e(t)}</code>' for t in d.tensors[:4])})</li>")
        for group in p.tied:
            parts.append(f"<li>tied: {' = '.join(f'<code>{e(g)}</code>' for g in group)}</li>")
        parts.append("</ul>")
    return parts


def _layers(report: Report) -> list[str]:
    s, e = report.structure, escape
    parts = [f"<h2>Layers ({s.layers} rows, {s.modules} modules)</h2><table><tr><th class=num>#</th><th>name</th><th>type</th><th>output shape</th><th class=num>params</th></tr>"]
    for node in s.nodes:
        parts.append(
            f"<tr><td class=num>{node.index}</td><td><code>{e(node.name)}</code></td><td>{e(node.type)}</td>"
            f"<td>{e(shape(node.output_shape))}</td><td class=num>{n(node.parameters) if node.parameters else ''}</td></tr>"
        )
    parts.append("</table>")
    return parts


def _memory(report: Report) -> list[str]:
    if report.memory is None:
        return []
    parts = ["<h2>Memory: what a CUDA card needs</h2>"]
    parts += [f"<figure>{svg}</figure>" for _, svg in memory_charts(report)]
    parts.append(_table(MEMORY_HEADER, memory_rows(report)))
    return parts + [f"<p class=meta>{escape(x)}</p>" for x in memory_summary(report)]


def _cards(report: Report) -> list[str]:
    if not report.cards:
        return []
    parts = ["<h2>What fits on which card</h2>"]
    chart = batch_chart(report)
    if chart:
        parts.append(f"<figure>{chart}</figure>")
    return parts + [_table(fit_header(report), fit_rows(report))]


def _multi_gpu(report: Report) -> list[str]:
    return [f"<p>{escape(x)}</p>" for x in multi_gpu_lines(report)]


def _cost(report: Report) -> list[str]:
    if report.cost is None:
        return []
    e = escape
    summary = cost_summary(report)
    parts = [f"<h2>What it costs to run</h2><p>{e(summary[0])}</p><table><tr>" + "".join(f"<th>{e(h)}</th>" for h in COST_HEADER) + "</tr>"]
    for r in cost_rows(report):
        parts.append("<tr>" + "".join(f"<td{' class=num' if 1 <= i <= 5 else ''}>{e(x)}</td>" for i, x in enumerate(r)) + "</tr>")
    parts.append("</table>" + "".join(f"<p class=meta>{e(x)}</p>" for x in summary[1:]))
    return parts


def _verifier(report: Report) -> list[str]:
    if report.verifier is None:
        return []
    e = escape
    parts = ["<h2>What the verifier says</h2>"]
    if not report.findings:
        parts.append("<p>No finding on the reconstructed graph. See the checks: <code>neurarch-trace checks</code>.</p>")
    else:
        parts.append("<ul>")
        for f in report.findings:
            node = f" <code>{e(f.node)}</code>" if f.node else ""
            parts.append(f"<li><b>{e(f.severity)}</b> <code>{e(f.rule)}</code>{node}: {e(f.message)}<br>Fix: {e(f.fix)}</li>")
        parts.append("</ul>")
    for err in report.verifier.rule_errors:
        parts.append(f"<p class=bad>rule {e(err.rule)} failed on this model ({e(err.error)}); the other rules ran.</p>")
    parts.append(f"<p class=meta>{e(counts_line(report.verifier))}. {e(context_line(report.verifier))}</p>")
    return parts


def _errors(report: Report) -> list[str]:
    if not report.errors:
        return []
    return ["<h2>Sections that failed</h2><p>The rest of the report stands.</p><ul>" + "".join(f"<li><code>{escape(k)}</code>: {escape(v)}</li>" for k, v in report.errors.items()) + "</ul>"]


def _warnings(report: Report) -> list[str]:
    return ["<h2>Warnings</h2><ul>" + "".join(f"<li>{escape(w)}</li>" for w in report.warnings) + "</ul>"] if report.warnings else []


# One function per section, named after it: a section added to SECTIONS without one fails at import.
RENDERERS = {name: globals()[f"_{name}"] for name in SECTIONS}


def render_html(report: Report) -> str:
    e = escape
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content='width=device-width,initial-scale=1'>",
        f"<title>{e(report.model.id)} — neurarch</title><style>{_CSS}</style></head><body>",
    ]
    for name in SECTIONS:
        parts += RENDERERS[name](report)
    parts.append(f"<p class=meta>{e(report.tool)}, report schema {e(report.schema_version)}</p></body></html>\n")
    return "\n".join(parts)
