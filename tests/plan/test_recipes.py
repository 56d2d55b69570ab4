"""The recipe options published fine-tuning runs use, against independent figures.

Each simulation is compared with a real training step on CPU (the allocator's
own events, see test_memory_measure.py) or with a count by hand written beside
the expected value.  Configs are tiny so the real steps take well under a second.
"""

import json

import pytest
import torch

from neurarch.build import build_from_config
from neurarch.errors import NeurarchError
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.memory import simulate
from neurarch.plan.real_step import measure_cpu
from neurarch.plan.train import TrainSetup
from tiny_configs import BERT as BERT_MLM
from tiny_configs import LLAMA, MIXTRAL


def _compare(raw, setup, batch=2, seq=64, onednn=True, **build):
    built = build_from_config(dict(raw), "test", **build)
    plan = plan_inputs(built.model, built.config, InputOptions(batch=batch, seq_len=seq))
    sim = simulate(built, plan, setup)

    def make():
        with torch.device("cpu"):
            return type(built.model)(built.config)

    meas = measure_cpu(make, built.config, plan, setup, onednn=onednn)
    return built, sim, meas


def _err(a, b):
    return abs(a - b) / b


# --- gradient checkpointing ----------------------------------------------------


@pytest.mark.parametrize("mode", ["full", "lora", "qlora"])
def test_grad_checkpointing_simulates_with_cuda_kernels(mode):
    # Before the fix every mode failed here: autograd does not carry the simulator's
    # torch-function mode (CUDA's attention kernels) into the recomputation, so torch's
    # checkpoint saw a different number of saved tensors and refused.
    built = build_from_config(dict(LLAMA), "test")
    plan = plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=64))
    on = simulate(built, plan, TrainSetup(mode=mode, precision="bf16-mixed", grad_checkpointing=True))
    off = simulate(built, plan, TrainSetup(mode=mode, precision="bf16-mixed"))
    # Checkpointing keeps fewer activations through the forward pass than the plain run.
    assert on.trainable_parameters == off.trainable_parameters
    assert on.steady.bytes < off.steady.bytes


@pytest.mark.parametrize(
    "setup",
    [
        TrainSetup(mode="lora", precision="bf16-mixed", grad_checkpointing=True, device="cpu"),
        TrainSetup(mode="full", precision="bf16-mixed", grad_checkpointing=True, device="cpu"),
    ],
    ids=["lora-bf16", "full-bf16"],
)
def test_grad_checkpointing_matches_real_cpu_step(setup):
    # PyTorch's native CPU kernels: with checkpointing the bf16 peak falls inside a recomputed
    # matmul, where oneDNN's bf16 path allocates reorder scratch that is no tensor and has no
    # CUDA counterpart (3 % of this tiny model's peak with oneDNN on; 0.03 % with it off).
    # What is left is torch.utils.checkpoint's stash of the CPU RNG state, 5,056 bytes per
    # checkpointed layer (2 here, about 0.4 % of this peak): host memory, made outside the
    # dispatcher, which a CUDA card does not hold.
    _, sim, meas = _compare(LLAMA, setup, onednn=False)
    assert 0 <= meas.step_peaks[1] - sim.steady.bytes <= 2 * 5056 + 512


# --- attention implementation --------------------------------------------------


def test_eager_attention_matches_real_step_and_keeps_the_probabilities():
    setup = TrainSetup(mode="full", precision="fp32", device="cpu")
    _, eager, meas = _compare(BERT_MLM, setup, batch=4, seq=128, attn_implementation="eager")
    assert _err(eager.steady.bytes, meas.step_peaks[1]) < 1e-3
    built = build_from_config(dict(BERT_MLM), "test")
    plan = plan_inputs(built.model, built.config, InputOptions(batch=4, seq_len=128))
    sdpa = simulate(built, plan, TrainSetup(mode="full", precision="fp32"))
    eager_cuda = simulate(build_from_config(dict(BERT_MLM), "test", attn_implementation="eager"), plan, TrainSetup(mode="full", precision="fp32"))
    # By hand: eager attention saves, per layer, the softmax output (batch 4 x 4 heads x 128 x 128
    # fp32 = 1 MiB) for softmax's backward and the dropped-out probabilities (1 MiB) for the matmul
    # with V; CUDA's fused kernel keeps neither.  2 layers: at least 4 MiB more.
    probs = 2 * 4 * 4 * 128 * 128 * 4
    assert eager_cuda.steady.bytes - sdpa.steady.bytes >= 2 * probs


def test_flash_attention_2_follows_the_flash_kernel_and_refuses_fp32():
    built = build_from_config(dict(LLAMA), "test")
    plan = plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=64))
    sim = simulate(built, plan, TrainSetup(mode="full", precision="bf16-mixed", attn_implementation="flash_attention_2"))
    assert sim.steady.bytes > 0
    with pytest.raises(NeurarchError, match="fp16/bf16 only"):
        TrainSetup(mode="full", precision="fp32", attn_implementation="flash_attention_2").validate()


# --- LoRA targets, dropout, adapter dtype ---------------------------------------


def test_lora_targets_q_v_trains_the_hand_counted_adapters_and_matches_real_step():
    setup = TrainSetup(mode="lora", precision="bf16-mixed", lora_rank=16, lora_targets=("q_proj", "v_proj"), device="cpu")
    _, sim, meas = _compare(LLAMA, setup)
    # By hand, rank 16: q_proj 64 -> 64: A 16x64 + B 64x16 = 2,048; v_proj 64 -> 32 (2 KV heads
    # of 16): A 16x64 + B 32x16 = 1,536; 2 layers: 2 x 3,584 = 7,168.
    assert sim.trainable_parameters == 7_168
    assert _err(sim.steady.bytes, meas.step_peaks[1]) < 1e-3


def test_lora_targets_that_match_nothing_are_a_one_line_error():
    built = build_from_config(dict(LLAMA), "test")
    plan = plan_inputs(built.model, built.config, InputOptions(batch=1, seq_len=16))
    with pytest.raises(NeurarchError) as e:
        simulate(built, plan, TrainSetup(mode="lora", lora_targets=("query_key_value",)))
    assert "matches no module" in str(e.value) and "\n" not in str(e.value)


def test_lora_dropout_keeps_more_and_matches_real_step():
    base = TrainSetup(mode="lora", precision="fp32", device="cpu")
    _, plain, _ = _compare(LLAMA, base)
    _, dropped, meas = _compare(LLAMA, TrainSetup(mode="lora", precision="fp32", lora_dropout=0.1, device="cpu"))
    assert _err(dropped.steady.bytes, meas.step_peaks[1]) < 1e-3
    # Dropout on each adapted layer's input keeps its dropped copy for the backward of lora_A.
    assert dropped.steady.bytes > plain.steady.bytes


def test_adapter_dtype_bf16_keeps_adapters_and_their_state_in_bf16():
    built = build_from_config(dict(LLAMA), "test")
    plan = plan_inputs(built.model, built.config, InputOptions(batch=1, seq_len=16))
    targets = ("q_proj", "v_proj")
    fp32 = simulate(built, plan, TrainSetup(mode="lora", precision="bf16", lora_targets=targets))
    bf16 = simulate(built, plan, TrainSetup(mode="lora", precision="bf16", lora_targets=targets, adapter_dtype="bf16"))
    # 7,168 adapter weights (hand count above): AdamW keeps two moments in the weights' dtype,
    # so bf16 adapters save 2 bytes on each weight and on each of its two moments.
    saved = bf16.steady.breakdown["optimizer"] - fp32.steady.breakdown["optimizer"]
    assert saved == -2 * 7_168 * 2


# --- optimizer implementation ---------------------------------------------------


def test_fused_adamw_matches_real_step_and_drops_the_foreach_scratch():
    setup = TrainSetup(mode="full", precision="fp32", optimizer="adamw-fused", device="cpu")
    built, sim, meas = _compare(LLAMA, setup)
    assert _err(sim.steady.bytes, meas.step_peaks[1]) < 1e-3
    # With few activations (batch 1, 4 tokens) the step peaks in the optimizer, where torch's
    # foreach AdamW holds a scratch list of parameter-sized tensors and the fused kernel holds none.
    plan = plan_inputs(built.model, built.config, InputOptions(batch=1, seq_len=4))
    foreach = simulate(built, plan, TrainSetup(mode="full", precision="fp32", optimizer="adamw"))
    fused = simulate(built, plan, TrainSetup(mode="full", precision="fp32", optimizer="adamw-fused"))
    assert foreach.steady.phase == "optimizer"
    assert fused.steady.bytes < foreach.steady.bytes


# --- the head a user fine-tunes -------------------------------------------------


def test_task_seq_cls_trains_a_classifier_head_and_matches_real_step():
    setup = TrainSetup(mode="full", precision="fp32", device="cpu")
    built, sim, meas = _compare(BERT_MLM, setup, batch=4, seq=64, task="seq-cls", num_labels=3)
    assert built.model_class == "BertForSequenceClassification"
    assert _err(sim.steady.bytes, meas.step_peaks[1]) < 1e-3
    # By hand: BERT's encoder (embeddings 1000x64 + 128x64 + 2x64 + LayerNorm 128; per layer
    # q, k, v, o 4 x (64x64 + 64), LayerNorms 2 x 128, MLP 64x128 + 128 + 128x64 + 64) plus
    # the pooler 64x64 + 64 and the classifier 64x3 + 3.
    emb = 1000 * 64 + 128 * 64 + 2 * 64 + 128
    layer = 4 * (64 * 64 + 64) + 2 * 128 + 64 * 128 + 128 + 128 * 64 + 64
    assert sim.trainable_parameters == emb + 2 * layer + 64 * 64 + 64 + 64 * 3 + 3


def test_cli_task_keeps_the_published_head_for_the_checkpoint_comparison(tmp_path, capsys):
    from neurarch.cli import main

    (tmp_path / "config.json").write_text(json.dumps(BERT_MLM))
    rc = main([str(tmp_path), "--plan", "--modes", "full", "--task", "seq-cls", "--seq-len", "32", "--attn-implementation", "eager", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["model"]["model_class"] == "BertForMaskedLM"
    a = out["memory"]["assumptions"]
    assert (a["task"], a["model_class"], a["attn_implementation"]) == ("seq-cls", "BertForSequenceClassification", "eager")


# --- a failing section does not take the report down ----------------------------


def test_fp32_moe_plan_has_its_cost(tmp_path, capsys):
    # Before: the cost count ran the grouped expert matmul on plain fake tensors, whose meta
    # kernel refuses fp32, and the whole report ended in "internal error".
    from neurarch.cli import main

    (tmp_path / "config.json").write_text(json.dumps(MIXTRAL))
    rc = main([str(tmp_path), "--plan", "--modes", "full", "--precision", "fp32", "--seq-len", "32", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["errors"] == {}
    assert out["memory"]["full"]["peak_bytes"] > 0
    assert out["cost"]["flops_per_sample"] > 0


def test_a_failing_cost_section_leaves_the_memory_plan(tmp_path, capsys, monkeypatch):
    import neurarch.cost.price as price
    from neurarch.cli import main

    def broken(*a, **k):
        raise RuntimeError("the roofline broke\nsecond line")

    monkeypatch.setattr(price, "estimate", broken)
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    rc = main([str(tmp_path), "--plan", "--modes", "inference", "--seq-len", "16", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["errors"] == {"cost": "RuntimeError: the roofline broke"}
    assert out["cost"] is None and out["memory"]["inference"]["peak_bytes"] > 0
    rc = main([str(tmp_path), "--plan", "--modes", "inference", "--seq-len", "16"])
    text = capsys.readouterr().out
    assert rc == 0 and "section cost failed: RuntimeError: the roofline broke" in text
    for fmt in ("markdown", "html"):
        rc = main([str(tmp_path), "--plan", "--modes", "inference", "--seq-len", "16", "--format", fmt])
        out = capsys.readouterr().out
        assert rc == 0 and "Sections that failed" in out and "RuntimeError: the roofline broke" in out


# --- cost prices what fits ------------------------------------------------------


def test_cost_prices_lora_and_fsdp_where_full_fits_no_card():
    from neurarch.cards import Card
    from neurarch.cost.estimate import runs_for

    card = Card("X", 80, 79.0, 989, 67, True, 3350, 4.0, interconnect_gb_s=900)
    runs = runs_for(card, 32, {"full": 0, "lora": 3, "qlora": 2, "inference": 100}, (4, 2), {"lora": 10, "qlora": 10})
    assert [(r.mode, r.gpus, r.batch) for r in runs] == [("lora", 1, 3), ("full", 4, 2)]
    # Full fine-tuning fits: that one run, at the asked batch where it fits.
    assert [(r.mode, r.gpus, r.batch) for r in runs_for(card, 8, {"full": 9}, None, {})] == [("full", 1, 8)]
    # Only inference simulated: capped at the serving batch, said as an upper bound.
    (only,) = runs_for(card, 100_000, {"inference": 1529}, None, {})
    assert only.batch == 1529 and "upper bound" in only.note


def test_fsdp_communication_by_hand():
    from neurarch.cards import Card
    from neurarch.cost.estimate import fsdp_comm_seconds

    card = Card("X", 80, 79.0, 989, 67, True, 3350, 4.0, interconnect_gb_s=900)
    # 8e9 bf16 weights = 16e9 bytes, 4 cards: 3 transfers x 16e9 x 3/4 = 36e9 bytes per card,
    # over one direction of a 900 GB/s link (450 GB/s) at 0.90: 36e9 / 405e9 = 0.0889 s.
    assert fsdp_comm_seconds(16_000_000_000, 4, card) == pytest.approx(36e9 / 405e9)


GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 128, "vocab_size": 500}


def test_qlora_quantizes_gpt2_conv1d_layers_and_matches_real_bitsandbytes_step():
    # transformers' replace_with_bnb_linear quantizes GPT-2's Conv1D projections too (its
    # weight is [in, out]); neurarch refused QLoRA for GPT-2 before.
    setup = TrainSetup(mode="qlora", precision="bf16-mixed", device="cpu")
    _, sim, meas = _compare(GPT2, setup, onednn=False)
    # LoRA rank 16 by hand, per layer: c_attn 64 -> 192: 16x64 + 192x16 = 4,096; attn.c_proj
    # 64 -> 64: 2,048; c_fc 64 -> 256: 16x64 + 256x16 = 5,120; mlp.c_proj 256 -> 64: 16x256 +
    # 64x16 = 5,120; 2 layers: 32,768.
    assert sim.trainable_parameters == 32_768
    assert _err(sim.steady.bytes, meas.step_peaks[1]) < 5e-3


# --- gradient accumulation ------------------------------------------------------


def test_grad_accumulation_keeps_the_gradients_through_the_next_micro_batch_and_matches_real_step():
    one = TrainSetup(mode="full", precision="fp32", device="cpu")
    acc = TrainSetup(mode="full", precision="fp32", grad_accumulation=4, device="cpu")
    built, plain, _ = _compare(LLAMA, one)
    _, accumulated, meas = _compare(LLAMA, acc)
    # The real step runs the same micro-batches (the third and fourth repeat the second's state).
    assert abs(accumulated.steady.bytes - meas.step_peaks[1]) <= 64
    # By hand: from the second micro-batch on, every trainable weight's fp32 gradient is alive
    # through forward and backward: at most 4 bytes x 202,048 parameters more at the peak.
    # Parameters by hand: embedding and head 2 x 1000x64 = 128,000; per layer q, o 2 x 64x64,
    # k, v (2 KV heads of 16) 2 x 64x32, MLP 3 x 64x128, 2 norms x 64 = 36,992; 2 layers and the
    # final norm: 128,000 + 73,984 + 64 = 202,048.
    params = 202_048
    assert sum(p.numel() for p in built.model.parameters()) == params
    assert 0 < accumulated.steady.bytes - plain.steady.bytes <= 4 * params


# --- the decoder's length -------------------------------------------------------

T5 = {
    "architectures": ["T5ForConditionalGeneration"],
    "model_type": "t5",
    "d_model": 64,
    "d_ff": 128,
    "d_kv": 16,
    "num_heads": 4,
    "num_layers": 2,
    "num_decoder_layers": 2,
    "vocab_size": 500,
    "feed_forward_proj": "gated-gelu",
}


def test_decoder_seq_len_sets_the_labels_length_and_matches_real_step():
    # peft's seq2seq examples train on 3-token labels under a 64-token encoder input.
    built = build_from_config(dict(T5), "test")
    plan = plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=64, decoder_seq_len=3))
    assert {t.name: t.shape for t in plan.tensors}["decoder_input_ids"] == (2, 3)
    setup = TrainSetup(mode="lora", precision="fp32", device="cpu")
    sim = simulate(built, plan, setup)

    def make():
        with torch.device("cpu"):
            return type(built.model)(built.config)

    meas = measure_cpu(make, built.config, plan, setup)
    assert _err(sim.steady.bytes, meas.step_peaks[1]) < 1e-3
    same = simulate(built, plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=64)), setup)
    assert sim.steady.bytes < same.steady.bytes  # 3 decoder tokens keep less than 64
