"""``benchmarks/snapshot_diff.py --rel``: two reports compared field by field (what the docs quote for the cost's
change: every number within a relative 7.1e-14, every integer equal, one note differing)."""

from __future__ import annotations

import json

from benchmark_script import load

snapshot_diff = load("snapshot_diff")

OLD = {"cost": {"assumptions": {"work_method": "cut one"}, "cards": [{"usd": 0.9632348577879297, "steps": 15625, "name": "L4"}]}}


def _with(**changes) -> str:
    new = json.loads(json.dumps(OLD))
    card = new["cost"]["cards"][0]
    for k, v in changes.items():
        if k == "work_method":
            new["cost"]["assumptions"]["work_method"] = v
        else:
            card[k] = v
    return json.dumps(new)


def test_floats_within_the_tolerance_are_the_same():
    ok, how = snapshot_diff.within(json.dumps(OLD), _with(usd=0.9632348577879386), 1e-12)
    assert ok and "largest relative difference 9.2e-15 at cost.cards[0].usd" in how


def test_a_float_beyond_the_tolerance_is_named():
    ok, how = snapshot_diff.within(json.dumps(OLD), _with(usd=0.97), 1e-12)
    assert not ok and "off by 7.0e-03 (relative) at cost.cards[0].usd" in how


def test_an_integer_or_a_text_that_differs_is_named_not_tolerated():
    ok, how = snapshot_diff.within(json.dumps(OLD), _with(steps=15626, work_method="cut two"), 1e-12)
    assert not ok and "other fields differ: cost.assumptions.work_method, cost.cards[0].steps" in how
