"""Run the rules over one traced model.

:func:`run` visits every registered rule in order, skipping the disabled
ones and those whose preconditions fail (``requires``, ``applies``,
:class:`~neurarch.verify.context.NotApplicable`), turns each
:class:`~neurarch.verify.registry.Hit` into a
:class:`~neurarch.report.verify.Finding`, and catches any exception a rule
raises: a rule that crashes on an odd model becomes a
:class:`~neurarch.report.verify.RuleFailure` and the others still run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from ..errors import UnknownRuleError
from ..report.verify import SEVERITIES, Finding, RuleFailure, Verifier
from .context import CheckContext, NotApplicable
from .registry import REGISTRY, Hit, Registry, Rule

_SEVERITY_ORDER = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass
class VerifyResult:
    """Findings (most severe first) plus the run's summary (``verifier``)."""

    findings: list[Finding] = field(default_factory=list)
    verifier: Verifier = field(default_factory=Verifier)

    @property
    def rule_errors(self) -> list[RuleFailure]:
        return self.verifier.rule_errors

    @property
    def counts(self) -> dict[str, int]:
        return self.verifier.counts


def parse_disable(values: Iterable[str] | None, registry: Registry | None = None) -> set[str]:
    """Rule ids from ``--disable`` values (repeatable, comma-separated); unknown ids raise.

    Raises :class:`~neurarch.errors.UnknownRuleError` (a NeurarchError: one
    line on stderr, exit code 2) naming the first unknown id.
    """
    reg = registry or _default_registry()
    ids: set[str] = set()
    for value in values or ():
        for rid in str(value).split(","):
            rid = rid.strip()
            if not rid:
                continue
            if rid not in reg:
                raise UnknownRuleError(rid, reg.ids())
            ids.add(rid)
    return ids


def _default_registry() -> Registry:
    from . import rules  # noqa: F401  (registers the built-in rules)
    from .registry import load_entry_point_rules

    load_entry_point_rules()
    return REGISTRY


def _why_not(rule: Rule, ctx: CheckContext) -> Optional[str]:
    """Why the rule cannot run on this context, or None when it can."""
    if rule.requires == "forward" and not ctx.forward_ok:
        return "the forward pass did not complete"
    if rule.requires == "backward" and not ctx.backward_ok:
        return "the backward pass did not run" if ctx.report.backward_pass is None else "the backward pass did not complete"
    if rule.applies is not None:
        return rule.applies(ctx)
    return None


def _describe(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if len(msg) > 300:
        msg = msg[:297] + "..."
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def _finding(rule: Rule, hit) -> Finding:
    if not isinstance(hit, Hit):
        raise TypeError(f"rule yielded {type(hit).__name__}, not a neurarch.verify.Hit")
    return Finding(rule=rule.id, severity=rule.severity, node=hit.node, message=hit.message, fix=hit.fix)


def run(ctx: CheckContext, disable: Iterable[str] = (), registry: Registry | None = None) -> VerifyResult:
    """Run every enabled rule on ``ctx``.  Unknown ids in ``disable`` raise UnknownRuleError."""
    reg = registry or _default_registry()
    disabled = parse_disable(disable, reg)
    result = VerifyResult()
    v = result.verifier
    v.from_scratch, v.training = ctx.from_scratch, ctx.training
    v.rule_errors.extend(reg.load_errors)
    v.disabled = sorted(disabled)
    for rule in reg:
        if rule.id in disabled:
            continue
        try:
            reason = _why_not(rule, ctx)
            if reason:
                v.skipped.append(f"{rule.id}: {reason}")
                continue
            found = [_finding(rule, h) for h in (rule.check(ctx) or ())]
        except NotApplicable as e:
            v.skipped.append(f"{rule.id}: {e}")
            continue
        except Exception as e:  # a crashing rule must not take the report down
            v.rule_errors.append(RuleFailure(rule=rule.id, error=_describe(e)))
            continue
        v.rules_run.append(rule.id)
        result.findings.extend(found)
    result.findings.sort(key=lambda f: _SEVERITY_ORDER[f.severity])  # stable: rule order within a severity
    v.counts = {s: sum(f.severity == s for f in result.findings) for s in SEVERITIES}
    try:
        out = ctx.output
        v.output_kind, v.output_kind_reason = out.kind, out.reason
    except Exception as e:
        v.output_kind_reason = f"could not be decided: {_describe(e)}"
    return result


def list_rules(registry: Registry | None = None) -> list[Rule]:
    """Every registered rule (built in and from entry points), in run order."""
    return list(registry or _default_registry())
