"""benchmarks/plan_coverage.py: the config shrink and the report, without running a sweep."""

from __future__ import annotations

import pytest

from benchmark_script import load


@pytest.fixture(scope="module")
def pc():
    return load("plan_coverage")


def test_shrink_cuts_counts_per_layer_lists_and_sub_configs(pc):
    raw = {
        "num_hidden_layers": 6,
        "layer_types": ["sliding", "full"] * 3,
        "per_layer_config": {"01": {"head_dim": 8}, "05": {"head_dim": 8}},
        "num_local_experts": 64,
        "num_experts_per_tok": 8,
        "hidden_size": 64,
        "vision_config": {"depth": 12, "depths": [2, 2, 6, 2], "out_indices": [12]},
    }
    d = pc.shrink(raw, 2)
    assert d["num_hidden_layers"] == 2 and d["layer_types"] == ["sliding", "full"]
    assert d["per_layer_config"] == {"01": {"head_dim": 8}}
    assert d["num_local_experts"] == 8 and d["hidden_size"] == 64
    assert d["vision_config"] == {"depth": 2, "depths": [2, 2, 2, 2], "out_indices": None}
    assert raw["num_hidden_layers"] == 6  # a copy


def test_report_counts_modes_and_groups_causes(pc, tmp_path):
    def row(t, **modes):
        r = {k: "" for k in pc.FIELDS}
        r.update(model_type=t, seconds=1.0)
        for m in pc.MODES:
            r[m], r[f"{m}_error"] = modes.get(m, ("ok", ""))
        return r

    rows = [row("a"), row("b", lora=("n/a", "PlanOptionError: no linear layer")), row("c", full=("error", "RuntimeError: shape [3] bad"), lora=("error", "RuntimeError: shape [4] bad"))]
    text = pc.write_report(rows, tmp_path, 1.0, "cmd", 120, 2)
    assert "**Of 3 types neurarch traces, 66.7% simulate a full fine-tuning step, 33.3% LoRA, 100.0% inference.**" in text
    assert "| c (full, lora) |" in text and "| b (lora) |" in text
    assert (tmp_path / "plan_coverage.csv").read_text().count("\n") == 4
