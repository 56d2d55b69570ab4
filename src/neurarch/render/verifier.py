"""The report section "What the verifier says", as plain text or Markdown (and the lines the HTML uses).

Renderers call :func:`section` with the report's findings and verifier
summary; the output is either the findings, most severe first, with their
fixes and the count by severity, or 'No finding on the reconstructed graph'.
"""

from __future__ import annotations

from typing import Iterable, Optional

from ..report.verify import SEVERITIES, Finding, Verifier

TITLE = "What the verifier says"


def counts_line(v: Verifier) -> str:
    """'1 error, 2 warn, 0 info (19 rules run, 1 disabled, 3 not applicable)'."""
    parts = [f"{v.counts.get(s, 0)} {s}" for s in SEVERITIES]
    extra = [f"{len(v.rules_run)} rules run"]
    if v.disabled:
        extra.append(f"{len(v.disabled)} disabled")
    if v.skipped:
        extra.append(f"{len(v.skipped)} not applicable")
    if v.rule_errors:
        extra.append(f"{len(v.rule_errors)} failed")
    return ", ".join(parts) + f" ({', '.join(extra)})"


def context_line(v: Verifier) -> str:
    mode = "training from scratch" if v.from_scratch else ("fine-tuning" if v.training else "inference only")
    return f"Output: {v.output_kind} ({v.output_kind_reason}); assumed: {mode}."


def _wrap(text: str, indent: str, width: int | None) -> list[str]:
    if not width:
        return [indent + text]
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False) or [indent]


def section(findings: Iterable[Finding], verifier: Optional[Verifier], markdown: bool = False, width: int | None = None) -> str:
    """``width``: wrap plain text at this many columns, each paragraph under its indent."""
    findings = list(findings)
    v = verifier or Verifier()
    lines = [f"## {TITLE}" if markdown else TITLE, ""]
    if not findings:
        lines.append("No finding on the reconstructed graph. See the checks: `neurarch-trace checks`.")
    for f in findings:
        where = f" `{f.node}`" if f.node else ""
        if markdown:
            lines.append(f"- **{f.severity}** [`{f.rule}`](docs/checks/{f.rule}.md){where}: {f.message}  ")
            lines.append(f"  Fix: {f.fix}")
        else:
            lines.append(f"  {f.severity:<5} {f.rule}{where}")
            lines += _wrap(f.message, "        ", width)
            lines += _wrap(f"Fix: {f.fix}", "        ", width)
    for e in v.rule_errors:
        lines += _wrap(f"rule {e.rule} failed on this model ({e.error}); the other rules ran.", "- " if markdown else "  ", None if markdown else width)
    lines += ["", counts_line(v) + ".", *(_wrap(context_line(v), "", None if markdown else width))]
    return "\n".join(lines)
