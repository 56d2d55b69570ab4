"""What the HTML pages say, computed from a Report (the templates only lay it out)."""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from ..render import _common as C
from ..render.charts import MODE_LABELS, batch_chart, memory_charts
from ..report import Report
from . import options as O

TRAINING = ("full", "lora", "qlora")


@functools.lru_cache(maxsize=1)
def env() -> Environment:
    e = Environment(loader=PackageLoader("neurarch.web", "templates"), autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
    e.filters["n"] = C.n
    e.filters["gib"] = C.gib
    return e


def short_name(model_id: str) -> str:
    return model_id.split("/")[-1].split(":")[-1]


def smallest_fit(report: Report, mode: str):
    """``(card, batch)``: the smallest card holding batch 1 of ``mode``, or None."""
    fits = [c for c in report.cards if c.max_batch.get(mode, 0) >= 1]
    if not fits:
        return None
    c = min(fits, key=lambda c: c.memory_bytes)
    return c, c.max_batch[mode]


def summary_sentence(report: Report) -> str:
    """One sentence a reader takes away: what each mode needs and the smallest card that holds it."""
    name = short_name(report.model.id)
    mem = report.memory
    if mem is None or not any(getattr(mem, m, None) for m in C.MODES):
        if not report.forward_pass.ok:
            return f"{name} builds, but its forward pass fails: {report.forward_pass.error or 'see below'}."
        return f"{name} has {report.params.derived:,} scalars (parameters and buffers); the memory plan was not run."
    batch = mem.assumptions.batch if mem.assumptions else 1
    parts = []
    for mode in TRAINING:
        mm = getattr(mem, mode, None)
        if mm is None:
            continue
        fit = smallest_fit(report, mode)
        where = f"fits one {fit[0].name} of {fit[0].memory_bytes / 2**30:.1f} GiB" if fit else "fits no single card"
        label = {"full": "for a full fine-tune", "lora": "with LoRA", "qlora": "with QLoRA"}[mode]
        parts.append(f"{C.gib(mm.peak_bytes)} {label} ({where})")
    out = ""
    if parts:
        out = f"Fine-tuning {name} at batch {batch} takes about " + _join(parts)
    inf = mem.inference
    if inf is not None:
        fit = smallest_fit(report, "inference")
        where = f"fits one {fit[0].name}" if fit else "fits no single card"
        serve = f"serving it takes {C.gib(inf.peak_bytes)} ({where})"
        out = f"{out}; {serve}" if out else serve[0].upper() + serve[1:]
    return out + "."


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def cli_line(report_id: str, revision: str | None, values: dict) -> str:
    args = ["neurarch-trace", report_id] + ([f"--revision {revision}"] if revision else []) + O.cli_args(values)
    return " ".join(shlex.quote(a) if " " not in a else " ".join(shlex.quote(x) for x in a.split(" ")) for a in args)


def context(report: Report, *, values: dict, revision: str | None, base: str, cache: str, permalink: str | None = None) -> dict:
    """Everything model.html shows."""
    p = report.params
    mem_charts = [(m, MODE_LABELS.get(m, m), Markup(svg)) for m, svg in memory_charts(report)]  # charts.py escapes its text
    chart = batch_chart(report)
    cli_id = report.model.id if not report.model.id.startswith("paste:") else "config.json"
    findings = [{"severity": f.severity, "rule": f.rule, "node": f.node, "message": f.message, "fix": f.fix} for f in report.findings]
    verifier = None
    if report.verifier is not None:
        from ..render.verifier import context_line, counts_line

        verifier = {"counts": counts_line(report.verifier), "context": context_line(report.verifier), "errors": [(x.rule, x.error) for x in report.verifier.rule_errors]}
    return {
        "r": report,
        "name": short_name(report.model.id),
        "summary": summary_sentence(report),
        "pass_line": C.pass_line(report),
        "pass_ok": report.forward_pass.ok and (report.backward_pass is None or report.backward_pass.ok),
        "params": p,
        "delta": (f"{p.delta:+,} ({C.pct(p.delta_pct)})" if p.checkpoint is not None and p.delta is not None else None),
        "checkpoint_sentence": C.checkpoint_sentence(p),
        "memory_charts": mem_charts,
        "memory_header": C.MEMORY_HEADER,
        "memory_rows": C.memory_rows(report) if report.memory is not None else [],
        "memory_summary": C.memory_summary(report) if report.memory is not None else [],
        "batch_chart": Markup(chart) if chart else None,
        "fit_header": C.fit_header(report) if report.cards else [],
        "fit_rows": C.fit_rows(report) if report.cards else [],
        "multi_gpu": C.multi_gpu_lines(report),
        "cost_summary": C.cost_summary(report) if report.cost is not None else [],
        "cost_header": C.COST_HEADER,
        "cost_rows": C.cost_rows(report) if report.cost is not None else [],
        "nodes": report.structure.nodes,
        "shape": C.shape,
        "findings": findings,
        "verifier": verifier,
        "cli": cli_line(cli_id, revision, values),
        "cli_own": cli_line("./my-model/config.json", None, values),
        "base": base,
        "cache": cache,
        "permalink": permalink,
        "values": values,
        "revision": revision,
        "fields": form_fields(values),
    }


def form_fields(values: dict) -> list[dict]:
    """The options form: one input per option, prefilled with what this page used."""
    out = []
    for f in O.fields():
        v = values.get(f.name, f.default)
        if f.kind == "bool":
            text = "true" if v else "false"
        elif f.kind.startswith("list"):
            text = ",".join(map(str, v or []))
        elif f.kind == "dict":
            text = ",".join(f"{k}={x}" for k, x in (v or {}).items())
        else:
            text = "" if v is None else str(v)
        out.append({"name": f.name, "kind": f.kind, "value": text, "help": f.help})
    return out


_LT = re.compile(r"(`+)(.+?)\1", re.S)


def markdown_safe(md: str) -> str:
    """The Markdown twin with ``<`` outside code spans written ``&lt;``: a ``<script>``
    from a config shows as text wherever the Markdown is rendered."""
    out, last = [], 0
    for m in _LT.finditer(md):
        out.append(md[last : m.start()].replace("<", "&lt;"))
        out.append(m.group(0))
        last = m.end()
    out.append(md[last:].replace("<", "&lt;"))
    return "".join(out)


@functools.lru_cache(maxsize=None)
def _docs_dir() -> Path | None:
    here = Path(__file__).resolve()
    for parent in here.parents:
        d = parent / "docs" / "checks"
        if d.is_dir():
            return d
    return None


def rule_doc_html(rule_id: str) -> Markup | None:
    """The rule's page (docs/checks/<id>.md) as HTML; raw HTML in it is escaped."""
    d = _docs_dir()
    if d is None or not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule_id):
        return None
    path = d / f"{rule_id}.md"
    if not path.is_file():
        return None
    from markdown_it import MarkdownIt

    return Markup(MarkdownIt("commonmark", {"html": False}).enable("table").render(path.read_text(encoding="utf-8")))
