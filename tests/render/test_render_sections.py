"""The three renderers write one shared list of sections, in one order."""

from __future__ import annotations

import pytest

from neurarch.render import _common, html, markdown, render, text
from neurarch.report import ModelInfo, Node, Params, PassResult, Report, Structure


def _report() -> Report:
    return Report(
        tool="neurarch test",
        model=ModelInfo(id="tiny/model", source="local", provenance="a test's own config", library="transformers 0"),
        forward_pass=PassResult(ok=True),
        params=Params(parameters=1234, trainable=1234, buffers=0, derived=1234),
        structure=Structure(layers=1, modules=1, nodes=[Node(index=1, name="layer_named_zeta", type="Linear", parameters=1234)]),
        errors={"cost": "counting the step's work failed: a failure only this test makes"},
        warnings=["a warning only this test makes"],
    )


@pytest.mark.parametrize("module", [text, markdown, html])
def test_every_renderer_has_every_section(module):
    assert set(module.RENDERERS) == set(_common.SECTIONS)


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_sections_appear_in_the_shared_order(fmt):
    out = render(_report(), fmt, max_rows=80)
    # header, parameters, layers ... errors, warnings: each section's own text, in SECTIONS order
    marks = ["tiny/model", "1,234", "layer_named_zeta", "a failure only this test makes", "a warning only this test makes"]
    where = [out.find(m) for m in marks]
    assert all(i >= 0 for i in where), dict(zip(marks, where))
    assert where == sorted(where), dict(zip(marks, where))
