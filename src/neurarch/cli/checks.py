"""``neurarch-trace checks``: list every verifier rule.

neurarch-trace checks                 # id, severity, summary
neurarch-trace checks --format json   # [{"id", "severity", "summary"}]

"""

from __future__ import annotations

import argparse
import json
import sys

from ..verify.engine import list_rules
from ..verify.registry import REGISTRY


def rules_json() -> list[dict]:
    return [{"id": r.id, "severity": r.severity, "summary": r.summary} for r in list_rules()]


def rules_text() -> str:
    rules = list_rules()
    w = max((len(r.id) for r in rules), default=10)
    lines = [f"{'id':<{w}}  severity  summary"]
    for r in rules:
        origin = "" if r.origin == "neurarch" else f"  [{r.origin}]"
        lines.append(f"{r.id:<{w}}  {r.severity:<8}  {r.summary}{origin}")
    lines.append("")
    lines.append(f"{len(rules)} rules. Turn one off with --disable ID; each has a page docs/checks/<id>.md.")
    for e in REGISTRY.load_errors:
        lines.append(f"plugin failed to load: {e.rule}: {e.error}")
    return "\n".join(lines)


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="neurarch-trace checks", description="List the verifier's rules.")
    p.add_argument("--format", "-f", choices=["text", "json"], default="text")
    p.add_argument("--debug", action="store_true")
    args = p.parse_args(argv)
    text = json.dumps(rules_json(), indent=2) if args.format == "json" else rules_text()
    sys.stdout.write(text + "\n")
    return 0
