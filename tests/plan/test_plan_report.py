"""--plan in the report: memory per mode, what fits on which card, sharded plans."""

import json

from neurarch import Options, analyze
from neurarch.cards import builtin_cards
from neurarch.cli import main
from neurarch.inputs import InputOptions
from neurarch.pipeline import CostOptions, PlanOptions
from neurarch.plan.memory import estimate, with_batch
from tiny_configs import LLAMA_WIDE as TINY


def test_plan_json_paths_and_card_fit(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    rc = main([str(cfg), "--plan", "--modes", "full,inference", "--seq-len", "1024", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    full = doc["memory"]["full"]
    for key in ("peak_tensor_bytes", "peak_bytes", "phase", "breakdown"):
        assert key in full
    b = full["breakdown"]
    assert sum(b[k] for k in ("weights", "gradients", "optimizer", "activations", "temporary", "overhead")) == full["peak_bytes"]
    assert doc["memory"]["assumptions"]["headroom"] == 1.15
    assert {c["name"] for c in doc["cards"]} == {c.name for c in builtin_cards()}
    t4 = next(c for c in doc["cards"] if c["name"] == "T4")
    assert t4["max_batch"]["full"] > 1 and t4["checked"]["full"]
    # The cost uses the plan: every priced card runs a batch that fits it.
    fits = {c["name"]: c["max_batch"]["full"] for c in doc["cards"]}
    for row in doc["cost"]["cards"]:
        assert row["batch"] <= max(fits[row["name"]], 0) or row["batch"] == 0


def test_chosen_batch_fits_and_the_next_does_not():
    # The search picks a batch by a line through batch 1 and 2, then simulates it.
    # Check against independent simulations at the chosen batch and one above.
    from neurarch.build import build_from_config
    from neurarch.inputs import plan_inputs

    built = build_from_config(dict(TINY), "tiny")
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=1024))
    card_bytes = 2 * 2**30  # a 2 GiB card
    from neurarch.cards import Card
    from neurarch.plan.fit import card_batch
    from neurarch.plan.memory import estimate_with_curve
    from neurarch.plan.train import TrainSetup

    cache = {}

    def at(b):
        if b not in cache:
            cache[b] = estimate_with_curve(built, with_batch(plan, b), TrainSetup(mode="full"))
        return cache[b]

    card = Card("H100-tiny", 2 * 2**30 / 1e9, None, None, None, True, None, None)  # Hopper: the workspace peak_bytes assumes
    b, checked = card_batch(at, card, "full", headroom=1.0)  # the planner's own search
    assert b >= 1 and checked
    # The reference: whole simulations (no cut-depth shortcut) at b and b + 1.
    assert estimate(built, with_batch(plan, b), "full", cut_depth=False).peak_bytes <= card_bytes
    assert estimate(built, with_batch(plan, b + 1), "full", cut_depth=False).peak_bytes > card_bytes


def test_mode_that_does_not_apply_is_reported_not_raised():
    # ResNet-18 has no nn.Linear besides its head: QLoRA has nothing to quantize.
    r = analyze("microsoft/resnet-18", Options(plan=PlanOptions(modes=("qlora",))))
    assert r.memory.qlora is None and "qlora" in r.memory.errors


def test_multi_gpu_plans_where_batch_1_does_not_fit(tmp_path):
    # A 6-layer Llama with a 32k vocabulary: full fine-tuning needs ~0.77 GB on a
    # card (0.41 GB of tensors + 0.35 GB CUDA context and workspaces).  A 0.75 GB
    # card (0.652 GB with headroom) cannot hold batch 1; two can, by either plan.
    from neurarch.render.markdown import render_markdown as render_md

    cfg = dict(TINY, num_hidden_layers=6, vocab_size=32000)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = analyze(str(tmp_path), Options(inputs=InputOptions(seq_len=256), plan=PlanOptions(modes=("full",)), cost=CostOptions(cards=["Tiny:0.75", "Speck:0.3"])))
    budget = 0.75e9 / 1.15
    assert r.memory.full.peak_bytes > budget
    assert next(c for c in r.cards if c.name == "Tiny").max_batch["full"] == 0
    plans = {p.strategy: p for p in r.multi_gpu if p.card == "Tiny"}
    pipe, fsdp = plans["pipeline"], plans["fsdp"]
    assert pipe.gpus == 2 and max(pipe.stage_bytes) == pipe.per_gpu_bytes <= budget
    assert pipe.cut_after.startswith("model.layers.")  # the balanced cut falls inside the layer stack
    # Each card holds the CUDA overhead once, and together they hold at least all of the state.
    overhead = r.memory.full.breakdown.overhead
    b = r.memory.full.breakdown
    assert sum(pipe.stage_bytes) >= 2 * overhead + b.weights + b.gradients + b.optimizer
    assert fsdp.gpus >= 2 and fsdp.per_gpu_bytes <= budget and fsdp.max_batch_per_gpu >= 1
    md = render_md(r)
    assert "PIPELINE on 2 x Tiny" in md and "FSDP on" in md
    # No number of 0.3 GB cards helps: each keeps the CUDA context and workspaces (0.35 GB) whole.
    (speck,) = [p for p in r.multi_gpu if p.card == "Speck"]
    assert speck.strategy == "fsdp" and speck.gpus == 0 and speck.per_gpu_bytes >= overhead > 0.3e9 / 1.15
    assert "no number of Speck holds batch 1" in md
