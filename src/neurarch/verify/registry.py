"""Rules and the registry that holds them.

A rule is a function from a :class:`~neurarch.verify.context.CheckContext` to
zero or more :class:`Hit` (where, what, fix).  The engine turns hits into
:class:`~neurarch.report.verify.Finding` by adding the rule's id and severity,
so a rule never has to repeat them::

    from neurarch.verify import Hit, rule

    @rule("my-check", severity="warn", summary="One line for `neurarch-trace checks`.")
    def my_check(ctx):
        if something_wrong(ctx):
            yield Hit(node="encoder.layer.3", message="... 42 ...", fix="...")

Rules from other packages come in through the ``neurarch.rules`` entry-point
group (see :func:`load_entry_point_rules`); every rule, built in or not, has a
page ``docs/checks/<id>.md``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from ..report.verify import SEVERITIES, RuleFailure, Severity

if TYPE_CHECKING:
    from .context import CheckContext

ENTRY_POINT_GROUP = "neurarch.rules"
_KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


@dataclass(frozen=True)
class Hit:
    """What a rule returns for one problem: the engine adds rule id and severity."""

    node: Optional[str]
    message: str
    fix: str


# What a rule needs before it can say anything:
#   None       -> nothing (config-level rules; also explain failed traces)
#   "forward"  -> the forward pass ran (the layer table is complete)
#   "backward" -> the backward pass ran (gradients were seen)
Requirement = Optional[str]


@dataclass(frozen=True)
class Rule:
    """One check.  ``check(ctx)`` yields :class:`Hit`; ``applies(ctx)`` may veto it first.

    ``applies`` returns ``None`` when the rule applies, or a short reason why
    it does not (shown in the report's ``verifier.skipped``), e.g.
    ``"only when training from scratch"``.
    """

    id: str
    severity: Severity
    summary: str
    check: Callable[["CheckContext"], Iterable[Hit] | None]
    applies: Optional[Callable[["CheckContext"], Optional[str]]] = None
    requires: Requirement = "forward"
    origin: str = "neurarch"  # package that provides it (entry-point rules: the distribution)

    @property
    def doc(self) -> str:
        """Path of the rule's page, relative to the repository root."""
        return f"docs/checks/{self.id}.md"


def validate_rule(r: Rule) -> None:
    """Refuse malformed rules early, with the reason."""
    if not isinstance(r.id, str) or not _KEBAB.match(r.id):
        raise ValueError(f"rule id {r.id!r} is not kebab-case (lowercase words joined by '-')")
    if r.severity not in SEVERITIES:
        raise ValueError(f"rule {r.id}: severity {r.severity!r} is not one of {', '.join(SEVERITIES)}")
    if not r.summary or not isinstance(r.summary, str):
        raise ValueError(f"rule {r.id}: a one-line summary is required")
    if r.requires not in (None, "forward", "backward"):
        raise ValueError(f"rule {r.id}: requires must be None, 'forward' or 'backward'")
    if not callable(r.check):
        raise ValueError(f"rule {r.id}: check must be callable")


class Registry:
    """Rules by id, in registration order.  Duplicate ids are refused."""

    def __init__(self) -> None:
        self._rules: dict[str, Rule] = {}
        self.load_errors: list[RuleFailure] = []  # entry points that failed to load
        self._entry_points_loaded = False

    def add(self, r: Rule) -> Rule:
        validate_rule(r)
        if r.id in self._rules:
            raise ValueError(f"duplicate rule id {r.id!r} (already registered by {self._rules[r.id].origin})")
        self._rules[r.id] = r
        return r

    def rule(
        self,
        id: str,
        *,
        severity: Severity,
        summary: str,
        applies: Optional[Callable[["CheckContext"], Optional[str]]] = None,
        requires: Requirement = "forward",
        origin: str = "neurarch",
    ):
        """Decorator: register the function as the check of a new rule."""

        def deco(fn: Callable[["CheckContext"], Iterable[Hit] | None]):
            self.add(Rule(id=id, severity=severity, summary=summary, check=fn, applies=applies, requires=requires, origin=origin))
            return fn

        return deco

    def get(self, rule_id: str) -> Rule:
        return self._rules[rule_id]

    def __contains__(self, rule_id: object) -> bool:
        return rule_id in self._rules

    def __iter__(self):
        return iter(list(self._rules.values()))

    def __len__(self) -> int:
        return len(self._rules)

    def ids(self) -> list[str]:
        return list(self._rules)

    def load_entry_points(self, entry_points=None) -> list[Rule]:
        """Register the rules other packages publish in the ``neurarch.rules`` group.

        An entry point may name a :class:`Rule`, a list of rules, a callable
        returning rules, or a module whose import registers rules with the
        :func:`rule` decorator.  A plugin that fails to load (import error,
        duplicate id, malformed rule) is recorded in ``load_errors`` and
        reported, never raised: a broken plugin must not take the report down.
        """
        if entry_points is None:
            from importlib.metadata import entry_points as _eps

            entry_points = _eps(group=ENTRY_POINT_GROUP)
        added: list[Rule] = []
        for ep in entry_points:
            origin = _dist_name(ep)
            before = set(self._rules)
            try:
                for r in _rules_from(ep.load()):
                    self.add(r)
            except Exception as e:  # plugin code: anything can happen
                self.load_errors.append(RuleFailure(rule=f"entry point {ep.name}", error=f"{type(e).__name__}: {e}"))
            for rid in [i for i in self._rules if i not in before]:
                if self._rules[rid].origin == "neurarch":
                    self._rules[rid] = dataclasses.replace(self._rules[rid], origin=origin)
                added.append(self._rules[rid])
        self._entry_points_loaded = True
        return added


def _dist_name(ep) -> str:
    dist = getattr(ep, "dist", None)
    return getattr(dist, "name", None) or ep.value.split(":")[0].split(".")[0]


def _rules_from(obj) -> list[Rule]:
    """The rules an entry point's object stands for (a module registers its own)."""
    import types

    if isinstance(obj, Rule):
        return [obj]
    if isinstance(obj, types.ModuleType):
        return []  # importing it ran its @rule decorators
    if isinstance(obj, (list, tuple)):
        if not all(isinstance(r, Rule) for r in obj):
            raise TypeError("a list entry point must hold only neurarch.verify.Rule objects")
        return list(obj)
    if callable(obj):
        return _rules_from(obj())
    raise TypeError(f"entry point object {type(obj).__name__} is not a Rule, a list of rules, a callable or a module")


#: The registry every built-in rule is in, and the one the pipeline runs.
REGISTRY = Registry()


def rule(id: str, *, severity: Severity, summary: str, applies=None, requires: Requirement = "forward"):
    """Register a rule in the default registry (see :class:`Registry.rule`).

    Plugins call this at import time; the origin recorded is the plugin's
    distribution (set when its entry point is loaded).
    """
    return REGISTRY.rule(id, severity=severity, summary=summary, applies=applies, requires=requires)


def load_entry_point_rules(entry_points=None) -> list[Rule]:
    """Load the ``neurarch.rules`` entry points into the default registry (once)."""
    if REGISTRY._entry_points_loaded and entry_points is None:
        return []
    return REGISTRY.load_entry_points(entry_points)
