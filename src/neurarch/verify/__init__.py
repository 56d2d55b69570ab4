"""The verifier: rules that read the traced graph and say what is wrong.

    >>> from neurarch import verify
    >>> ctx = verify.CheckContext(report=report, model=built.model, config=built.config)
    >>> result = verify.run(ctx, disable={"dims-not-multiple-of-8"})
    >>> [f.rule for f in result.findings], result.counts
    (['dead-parameters'], {'error': 0, 'warn': 1, 'info': 0})

Each rule has an id (kebab-case), a severity (``error``, ``warn``, ``info``),
a one-line summary and a page ``docs/checks/<id>.md``.  A finding names the
node it points at, a message with the numbers that triggered it, and a fix.
Rules know the context: what the model outputs (features of a backbone,
class logits, a language-model head) and whether the user fine-tunes or
trains from scratch.

Public face:

* :class:`CheckContext` — what rules see;
* :func:`run` — run the rules; :class:`VerifyResult` — findings + summary;
* :func:`list_rules`, :func:`parse_disable` — for ``neurarch-trace checks`` and ``--disable``;
* :func:`rule`, :class:`Rule`, :class:`Hit`, :class:`NotApplicable` — to write rules;
* :func:`load_entry_point_rules` — rules from other packages, entry-point
  group ``neurarch.rules``::

      [project.entry-points."neurarch.rules"]
      my_rules = "my_package.neurarch_rules"      # a module using @neurarch.verify.rule
"""

from ..report.verify import SEVERITIES, Finding, RuleFailure, Verifier
from . import rules as _builtin_rules  # noqa: E402,F401  (registers the built-in rules)
from .context import CheckContext, NotApplicable
from .engine import VerifyResult, list_rules, parse_disable, run
from .registry import ENTRY_POINT_GROUP, REGISTRY, Hit, Registry, Rule, load_entry_point_rules, rule

__all__ = [
    "CheckContext",
    "NotApplicable",
    "run",
    "VerifyResult",
    "list_rules",
    "parse_disable",
    "rule",
    "Rule",
    "Hit",
    "Registry",
    "REGISTRY",
    "ENTRY_POINT_GROUP",
    "load_entry_point_rules",
    "Finding",
    "RuleFailure",
    "Verifier",
    "SEVERITIES",
]
