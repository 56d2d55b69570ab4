"""``diff A B --plan --format markdown``: the PR comment, for a real pair of configs.

A is the tiny Llama of changes_fixtures.py (hidden 64, 2 layers), B the same
with hidden 128 and 3 layers.  Parameter figures are hand computations (see
test_git_history.py); memory deltas are checked against hand lower bounds:
full fine-tuning with AdamW keeps fp32 weights (4 B), fp32 gradients (4 B)
and two fp32 moments (8 B) per parameter, so B needs at least 16 B x the extra
parameters more than A; inference in bf16 at least 2 B x the extra parameters.
"""

from __future__ import annotations

import json

import pytest
from changes_fixtures import BASE_CONFIG

from neurarch.changes import plandiff
from neurarch.changes.plandiff import Side

SMALL, BIG = 202_048, 551_808  # hand figures (test_git_history.py)
EXTRA = BIG - SMALL  # 349,760


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    from neurarch import Options
    from neurarch.inputs import InputOptions
    from neurarch.pipeline import CostOptions, PlanOptions

    tmp = tmp_path_factory.mktemp("configs")
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    (tmp / "a" / "config.json").write_text(json.dumps(BASE_CONFIG))
    (tmp / "b" / "config.json").write_text(json.dumps(dict(BASE_CONFIG, hidden_size=128, num_hidden_layers=3)))
    opts = Options(
        inputs=InputOptions(batch=1, seq_len=32),
        plan=PlanOptions(modes=("full", "inference")),
        cost=CostOptions(),
        verify=False,
    )
    return plandiff.diff(str(tmp / "a"), str(tmp / "b"), opts)


@pytest.mark.slow
def test_markdown_renders_the_plan_diff(planned):
    md = plandiff.markdown(planned)
    assert md.startswith("### neurarch: `")
    assert "| Parameters | 202,048 | 551,808 | +349,760 (+173.1 %) |" in md  # 349,760 / 202,048 = 173.1 %
    assert "**Config:** 2 keys differ: `hidden_size`: 64 -> 128; `num_hidden_layers`: 2 -> 3." in md
    assert "| GPU memory, full fine-tuning (batch 1) |" in md and "| GPU memory, inference (batch 1) |" in md
    assert "**Largest batch per card** (A → B)" in md and "| Card | full fine-tuning | inference |" in md
    for card in planned.a.max_batch:
        assert f"| {card} |" in md
    assert "No card stops or starts fitting batch 1." in md  # both are tiny
    assert "| Run cost on A10G |" in md


@pytest.mark.slow
def test_plan_figures_against_hand_bounds(planned):
    a, b = planned.a, planned.b
    assert (a.parameters, b.parameters) == (SMALL, BIG)
    assert b.memory["full"] - a.memory["full"] >= 16 * EXTRA  # >= 5,596,160 bytes
    assert b.memory["inference"] - a.memory["inference"] >= 2 * EXTRA  # >= 699,520 bytes
    # a bigger model never fits a larger batch on the same card
    for card, modes in a.max_batch.items():
        for mode, n in modes.items():
            assert b.max_batch[card][mode] <= n
    data = json.loads(plandiff.render(planned, "json"))
    assert data["a"]["parameters"] == SMALL and data["b"]["memory"]["full"] == b.memory["full"]


def test_cards_that_stop_and_start_fitting():
    a = Side(spec="a", max_batch={"T4": {"full": 3, "lora": 0}, "H100": {"full": 40}})
    b = Side(spec="b", max_batch={"T4": {"full": 0, "lora": 2}, "H100": {"full": 12}})
    stop, start = plandiff.flips(a, b)
    assert [(f.card, f.mode, f.before, f.after) for f in stop] == [("T4", "full", 3, 0)]
    assert [(f.card, f.mode, f.before, f.after) for f in start] == [("T4", "lora", 0, 2)]
    d = plandiff.PlanDiff(a=a, b=b, stop_fitting=stop, start_fitting=start, planned=True)
    md = plandiff.markdown(d)
    assert "**Stops fitting** (batch 1 no longer fits): T4 full fine-tuning." in md
    assert "**Starts fitting** (batch 1 now fits): T4 LoRA." in md
    assert "| T4 | 3 → 0 | 0 → 2 |" in md and "| H100 | 40 → 12 | — |" in md


@pytest.mark.slow
def test_changes_with_plan_puts_the_plan_on_graph_changes(tmp_path):
    from changes_fixtures import GitRepo, js

    from neurarch import Options
    from neurarch.changes import readers, render, track
    from neurarch.inputs import InputOptions
    from neurarch.pipeline import CostOptions, PlanOptions

    repo = GitRepo(tmp_path / "r")
    repo.commit({"config.json": js(BASE_CONFIG)}, "v1", "2026-01-01T00:00:00+00:00")
    repo.commit({"config.json": js(dict(BASE_CONFIG, hidden_size=128, num_hidden_layers=3))}, "v2", "2026-01-02T00:00:00+00:00")
    opts = Options(inputs=InputOptions(batch=1, seq_len=16), plan=PlanOptions(modes=("full",)), cost=CostOptions(), verify=False)
    (ch,) = track.track(readers.GitReader(repo.path), plan=opts).changes
    assert ch.plan is not None and (ch.plan.a.parameters, ch.plan.b.parameters) == (SMALL, BIG)
    assert ch.plan.b.memory["full"] - ch.plan.a.memory["full"] >= 16 * EXTRA
    md = render.markdown(track.History(**{**track.track(readers.GitReader(repo.path)).model_dump(), "changes": [ch]}))
    assert "The plan at both revisions:" in md and "| Parameters | 202,048 | 551,808 | +349,760 (+173.1 %) |" in md


@pytest.mark.slow
def test_stored_graph_change_gets_its_plan_on_a_later_plan_run(tmp_path):
    from changes_fixtures import GitRepo, js

    from neurarch import Options
    from neurarch.changes import readers, storage
    from neurarch.inputs import InputOptions
    from neurarch.pipeline import PlanOptions

    repo = GitRepo(tmp_path / "r")
    repo.commit({"config.json": js(BASE_CONFIG)}, "v1", "2026-01-01T00:00:00+00:00")
    repo.commit({"config.json": js(dict(BASE_CONFIG, hidden_size=128, num_hidden_layers=3))}, "v2", "2026-01-02T00:00:00+00:00")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    (plain,) = storage.track_stored(readers.GitReader(repo.path), url=url).changes
    assert plain.plan is None
    opts = Options(inputs=InputOptions(batch=1, seq_len=16), plan=PlanOptions(modes=("inference",)), verify=False)
    (planned,) = storage.track_stored(readers.GitReader(repo.path), url=url, plan=opts).changes
    assert (planned.plan.a.parameters, planned.plan.b.parameters) == (SMALL, BIG)
    assert planned.plan.b.memory["inference"] - planned.plan.a.memory["inference"] >= 2 * EXTRA
    (kept,) = storage.stored_history(str(repo.path), url=url).changes
    assert kept.plan is not None  # stored
