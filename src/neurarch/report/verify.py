"""The verifier's output types (pydantic, so they serialize into the report JSON).

* :class:`Finding` — one problem a rule found: ``rule``, ``severity``, the
  ``node`` it points at (a row name of the layer table, a module or parameter
  name, or ``None`` for the whole model), a ``message`` carrying the numbers
  that triggered it, and a ``fix``.
* :class:`RuleFailure` — a rule that crashed on this model.  A crash never takes
  the report down: it is recorded here and the other rules still run.
* :class:`Verifier` — the run as a whole: counts by severity, which rules ran,
  which were disabled or skipped, and the context the rules saw.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from .base import ReportModel

Severity = Literal["error", "warn", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warn", "info")


class Finding(ReportModel):
    rule: str = Field(description="Id of the rule (kebab-case); its page is docs/checks/<rule>.md.")
    severity: Severity
    node: Optional[str] = Field(None, description="Row, module or parameter the finding points at; None for the whole model.")
    message: str = Field(description="What is wrong, with the numbers that triggered the rule.")
    fix: str = Field(description="What to change.")


class RuleFailure(ReportModel):
    rule: str = Field(description="Id of the rule that crashed (or the entry point that failed to load).")
    error: str = Field(description="Exception type and message.")


class Verifier(ReportModel):
    counts: dict[str, int] = Field(default_factory=lambda: {str(s): 0 for s in SEVERITIES}, description="Findings by severity.")
    rules_run: list[str] = Field(default_factory=list, description="Rules that ran to completion (with or without findings).")
    disabled: list[str] = Field(default_factory=list, description="Rules turned off with --disable.")
    skipped: list[str] = Field(default_factory=list, description="'<rule>: <why>' for rules that did not apply to this model or run.")
    rule_errors: list[RuleFailure] = Field(default_factory=list, description="Rules that crashed on this model; the others still ran.")
    output_kind: str = Field("unknown", description="What the model outputs, as the rules understood it: features, classification, lm, seq2seq-lm or unknown.")
    output_kind_reason: str = Field("", description="Why the verifier decided output_kind.")
    from_scratch: bool = Field(False, description="Rules assumed training from random initialisation (--from-scratch).")
    training: bool = Field(True, description="Rules assumed the model is trained (fine-tuned or from scratch), not only run.")
