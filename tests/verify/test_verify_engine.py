"""The verifier's machinery: registry, --disable, crashing rules, entry points, pages, output.

The rules themselves are tested in tests/verify/test_verify_rules.py.
"""

from __future__ import annotations

import json
import re
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from torch import nn

import neurarch.inputs.prepare as prepare
from neurarch import Options, analyze, verify
from neurarch.errors import NeurarchError, UnknownRuleError
from neurarch.inputs import InputOptions
from neurarch.render.verifier import section
from neurarch.verify import Hit, Registry, Rule

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "docs" / "checks"
THIS = Path(__file__).resolve()


class NormAfterHead(nn.Module):
    """64 -> 10 classes, then LayerNorm over the logits: triggers norm-at-output (and only that)."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(64, 10)
        self.norm = nn.LayerNorm(10)

    def forward(self, x):
        return self.norm(self.head(x))


@pytest.fixture(scope="module")
def ctx():
    built = {}
    original = prepare.build  # the build analyze runs (inputs.prepare), kept to hand the model to the rules
    prepare.build = lambda source: built.setdefault("model", original(source))
    try:
        report = analyze(f"python:{THIS}:NormAfterHead", Options(inputs=InputOptions(input_shape=(64,))))
    finally:
        prepare.build = original
    b = built["model"]
    return verify.CheckContext(report=report, model=b.model, config=b.config)


# -- run, counts, disable ---------------------------------------------------------------------------


def test_findings_shape_and_counts(ctx):
    res = verify.run(ctx)
    assert [f.rule for f in res.findings] == ["norm-at-output"]
    assert set(res.findings[0].model_dump()) == {"rule", "severity", "node", "message", "fix"}
    assert res.counts == {"error": 0, "warn": 1, "info": 0}
    assert res.verifier.output_kind == "classification"
    assert len(res.verifier.rules_run) + len(res.verifier.skipped) == len(verify.list_rules())


def test_disable_turns_a_rule_off(ctx):
    res = verify.run(ctx, disable=["norm-at-output"])
    assert res.findings == [] and res.counts["warn"] == 0
    assert res.verifier.disabled == ["norm-at-output"]
    assert "norm-at-output" not in res.verifier.rules_run
    # comma-separated values work like repeated flags
    assert verify.parse_disable(["norm-at-output,dead-parameters", "vocab-not-padded"]) == {"norm-at-output", "dead-parameters", "vocab-not-padded"}


def test_unknown_rule_id_is_one_line_exit_2(ctx):
    with pytest.raises(UnknownRuleError) as e:
        verify.run(ctx, disable=["norm-at-outptu"])
    err = e.value
    assert isinstance(err, NeurarchError) and isinstance(err, KeyError) and err.exit_code == 2
    assert str(err) == "unknown rule id 'norm-at-outptu'; did you mean 'norm-at-output'?"
    assert "\n" not in str(UnknownRuleError("zzz", verify.REGISTRY.ids()))


def test_a_crashing_rule_does_not_take_the_report_down(ctx):
    reg = Registry()

    @reg.rule("always-crashes", severity="error", summary="Divides by zero.")
    def crash(c):
        return [1 / 0]

    reg.add(verify.REGISTRY.get("norm-at-output"))

    @reg.rule("yields-garbage", severity="info", summary="Returns a string, not a Hit.")
    def garbage(c):
        yield "not a hit"

    res = verify.run(ctx, registry=reg)
    assert [(e.rule, e.error) for e in res.rule_errors] == [
        ("always-crashes", "ZeroDivisionError: division by zero"),
        ("yields-garbage", "TypeError: rule yielded str, not a neurarch.verify.Hit"),
    ]
    assert [f.rule for f in res.findings] == ["norm-at-output"]  # the rule after the crash still ran
    assert "rule always-crashes failed on this model (ZeroDivisionError: division by zero)" in section(res.findings, res.verifier)


def test_findings_sorted_by_severity(ctx):
    reg = Registry()
    for rid, sev in (("an-info", "info"), ("a-warn", "warn"), ("an-error", "error")):
        reg.add(Rule(id=rid, severity=sev, summary=rid, check=lambda c: [Hit(None, "m", "f")], requires=None))
    res = verify.run(ctx, registry=reg)
    assert [f.severity for f in res.findings] == ["error", "warn", "info"]
    assert res.counts == {"error": 1, "warn": 1, "info": 1}


# -- registry ----------------------------------------------------------------------------------------


def test_registry_refuses_duplicates_and_bad_ids():
    reg = Registry()
    reg.add(Rule(id="my-rule", severity="warn", summary="s", check=lambda c: []))
    with pytest.raises(ValueError, match="duplicate rule id 'my-rule'"):
        reg.add(Rule(id="my-rule", severity="info", summary="s", check=lambda c: []))
    with pytest.raises(ValueError, match="kebab-case"):
        reg.add(Rule(id="My_Rule", severity="warn", summary="s", check=lambda c: []))
    with pytest.raises(ValueError, match="severity"):
        reg.add(Rule(id="other", severity="fatal", summary="s", check=lambda c: []))  # type: ignore[arg-type]
    # the built-in registry refuses to register a built-in id a second time
    with pytest.raises(ValueError, match="duplicate"):
        verify.rule("dead-parameters", severity="info", summary="again")(lambda c: [])


def test_entry_point_rules(tmp_path, monkeypatch):
    (tmp_path / "acme_rules.py").write_text(
        "from neurarch.verify import Hit, Rule\n"
        "RULE = Rule(id='acme-no-bias', severity='info', summary='Acme house rule.', check=lambda c: [Hit(None, 'm', 'f')], requires=None)\n"
        "MANY = [Rule(id='acme-two', severity='warn', summary='Two.', check=lambda c: [], requires=None)]\n"
        "DUPLICATE = Rule(id='acme-no-bias', severity='info', summary='Again.', check=lambda c: [])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "acme_rules", raising=False)
    group = verify.ENTRY_POINT_GROUP
    eps = [
        EntryPoint(name="one", value="acme_rules:RULE", group=group),
        EntryPoint(name="many", value="acme_rules:MANY", group=group),
        EntryPoint(name="dup", value="acme_rules:DUPLICATE", group=group),
        EntryPoint(name="broken", value="acme_missing_module:RULES", group=group),
    ]
    reg = Registry()
    added = reg.load_entry_points(eps)
    assert [r.id for r in added] == ["acme-no-bias", "acme-two"]
    assert added[0].origin == "acme_rules"
    assert [e.rule for e in reg.load_errors] == ["entry point dup", "entry point broken"]
    assert "duplicate rule id 'acme-no-bias'" in reg.load_errors[0].error
    assert reg.load_errors[1].error.startswith("ModuleNotFoundError")


# -- pages, listing, section ----------------------------------------------------------------------------


def test_every_rule_has_a_page_and_every_page_a_rule():
    ids = {r.id for r in verify.list_rules()}
    pages = {p.stem for p in PAGES.glob("*.md")} - {"index"}
    assert ids == pages, f"rules without a page: {sorted(ids - pages)}; pages without a rule: {sorted(pages - ids)}"
    assert len(ids) >= 15
    index = (PAGES / "index.md").read_text()
    for rid in ids:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rid)
        page = (PAGES / f"{rid}.md").read_text()
        assert page.startswith(f"# {rid}\n"), rid
        severity = verify.REGISTRY.get(rid).severity
        assert f"**Severity:** {severity}" in page, rid
        for heading in ("## When it fires", "## Why", "## Fix", "## Reference"):
            assert heading in page, f"{rid}: missing {heading}"
        assert f"[{rid}]({rid}.md)" in index, f"index.md does not list {rid}"


def test_checks_listing_json(capsys):
    from neurarch.cli import checks as cli

    assert cli.run(["--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in listed] == verify.REGISTRY.ids()
    assert all(set(r) == {"id", "severity", "summary"} for r in listed)
    assert cli.run([]) == 0
    text = capsys.readouterr().out
    assert "norm-at-output" in text and f"{len(listed)} rules." in text


def test_section_says_no_finding():
    text = section([], verify.Verifier(rules_run=["a", "b"], output_kind="features", output_kind_reason="Dinov2Model is a backbone"))
    assert "No finding on the reconstructed graph" in text
    assert "0 error, 0 warn, 0 info (2 rules run)" in text
    assert "Output: features (Dinov2Model is a backbone); assumed: fine-tuning." in text


def test_rules_run_in_the_documented_order():
    """The run order is the report's (verifier.rules_run, findings of one severity): the built-in rules run in
    the order docs/checks/index.md lists them (an import sorter reordering rules/__init__.py would break it)."""
    import re

    documented = re.findall(r"^\| \[([a-z0-9-]+)\]\(", (ROOT / "docs" / "checks" / "index.md").read_text(), re.M)
    builtin = [r.id for r in verify.list_rules() if r.origin == "neurarch"]
    assert builtin == documented
