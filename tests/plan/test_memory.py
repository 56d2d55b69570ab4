"""The training-step memory simulator against independent figures.

Two kinds of reference, never the simulator's own output:

* a real training step on CPU, measured at the allocator by the profiler
  (neurarch.plan.real_step, itself checked in test_memory_measure.py against
  tensors of known size), with the same random-weight model;
* hand computations written beside the expected value (weights, optimizer
  state, LoRA adapter sizes, KV cache).

Configs are tiny so the real steps take well under a second.
"""

import pytest
import torch
from torch import nn

from neurarch.build import BuiltModel, build_from_config
from neurarch.errors import NeurarchError
from neurarch.inputs import InputOptions, InputPlan, TensorSpec, plan_inputs
from neurarch.plan.memory import estimate, simulate
from neurarch.plan.real_step import measure_cpu
from neurarch.plan.train import PlanOptionError, TrainSetup
from tiny_configs import BERT, LLAMA, MIXTRAL
from tiny_modules import MLP, meta_built


def _built(raw):
    return build_from_config(dict(raw), "test")


def _real_factory(built):
    def make():
        with torch.device("cpu"):
            return type(built.model)(built.config)

    return make


def _compare(raw, setup, batch=2, seq=64):
    built = _built(raw)
    plan = plan_inputs(built.model, built.config, InputOptions(batch=batch, seq_len=seq))
    sim = simulate(built, plan, setup)
    meas = measure_cpu(_real_factory(built), built.config, plan, setup)
    return sim, meas


def _err(a, b):
    return abs(a - b) / b


def test_full_finetune_fp32_matches_real_cpu_step():
    sim, meas = _compare(LLAMA, TrainSetup(mode="full", precision="fp32", device="cpu"))
    # Byte-level agreement with the allocator; the few bytes allowed are
    # 0-d tensors torch creates outside the dispatcher (optimizer step counters).
    assert abs(sim.peak.bytes - meas.peak_bytes) <= 64
    assert abs(sim.first.bytes - meas.step_peaks[0]) <= 64
    assert abs(sim.steady.bytes - meas.step_peaks[1]) <= 64
    # The steady state (optimizer state alive) is the higher one.
    assert sim.steady.bytes > sim.first.bytes


def test_lora_bf16_mixed_matches_real_cpu_step():
    sim, meas = _compare(BERT, TrainSetup(mode="lora", precision="bf16-mixed", device="cpu"))
    assert _err(sim.peak.bytes, meas.peak_bytes) < 1e-4


def test_moe_fp32_simulates_and_matches():
    # torch's MemTracker fails here: the meta kernel of _grouped_mm refuses fp32.
    sim, meas = _compare(MIXTRAL, TrainSetup(mode="full", precision="fp32", device="cpu"), seq=128)
    assert _err(sim.peak.bytes, meas.peak_bytes) < 1e-4


def test_multi_tensor_adamw_matches_real_step_and_hand_count():
    # device="cuda" semantics: the foreach AdamW torch uses on CUDA, run for real on CPU.
    built = meta_built(MLP)
    plan = InputPlan([TensorSpec("x", (32, 256))], main="x", batch=32)
    setup = TrainSetup(mode="full", precision="fp32", device="cuda")
    sim = simulate(built, plan, setup)
    meas = measure_cpu(MLP, None, plan, setup)
    assert abs(sim.peak.bytes - meas.peak_bytes) <= 64
    # Hand count: parameters 256*512 + 512 + 512*128 + 128 = 197,248 fp32 = 788,992 B.
    params = 256 * 512 + 512 + 512 * 128 + 128
    assert sim.trainable_parameters == params
    steady = sim.steady.breakdown
    assert steady["weights"] == 4 * params
    # AdamW keeps exp_avg and exp_avg_sq (fp32) and a 0-d fp32 step per tensor (4 tensors).
    assert steady["optimizer"] == 2 * 4 * params + 4 * 4
    assert sum(steady.values()) == sim.steady.bytes


def test_breakdown_of_llama_full_finetune_by_hand():
    built = _built(LLAMA)
    plan = plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=64))
    sim = simulate(built, plan, TrainSetup(mode="full", precision="fp32", device="cpu"))
    # Parameters by hand: embed 1000*64 + lm_head 64*1000 + final norm 64
    # + per layer: q 64*64, k 64*32, v 64*32, o 64*64, gate/up 64*128 each, down 128*64, 2 norms of 64.
    layer = 64 * 64 + 64 * 32 + 64 * 32 + 64 * 64 + 3 * 64 * 128 + 2 * 64
    params = 1000 * 64 * 2 + 64 + 2 * layer
    assert sim.trainable_parameters == params
    b = sim.steady.breakdown
    # weights = fp32 parameters + the rotary buffers inv_freq and original_inv_freq
    # (head_dim/2 = 8 fp32 = 32 B each).
    assert b["weights"] == 4 * params + 2 * 32
    n_tensors = 3 + 2 * 9  # embed, lm_head, final norm; 9 tensors per layer
    assert b["optimizer"] == 8 * params + 4 * n_tensors


def test_lora_trainable_parameters_by_hand():
    built = _built(LLAMA)
    plan = plan_inputs(built.model, built.config, InputOptions(batch=1, seq_len=16))
    m = estimate(built, plan, "lora", lora_rank=8, device="cpu")
    # r * (in + out) for q(64,64) k(64,32) v(64,32) o(64,64) gate(64,128) up(64,128) down(128,64), 2 layers; head excluded.
    per_layer = 8 * ((64 + 64) + (64 + 32) * 2 + (64 + 64) + (64 + 128) * 3)
    assert m.trainable_parameters == 2 * per_layer
    assert m.lora_rank == 8


def test_kv_cache_by_hand():
    built = _built(LLAMA)
    plan = plan_inputs(built.model, built.config, InputOptions(batch=3, seq_len=32))
    m = estimate(built, plan, "inference", precision="bf16", context_len=200)
    # K and V, 2 layers, batch 3, 2 KV heads of 16, 200 tokens, bf16 (2 bytes).
    assert m.kv_cache_bytes == 2 * 2 * 3 * 2 * 16 * 200 * 2
    assert m.context_len == 200
    assert m.phase in ("prefill", "decode")


def test_full_context_of_learned_positions_leaves_the_decoded_token_a_position():
    # GPT-2 with a 64-position table at 64 tokens: generation can cache 63 tokens and decode the 64th
    # (GPT-Neo's causal-mask buffer refuses a 65th; on fake tensors GPT-2 would index past its table).
    raw = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64, "vocab_size": 1000}
    built = _built(raw)
    plan = plan_inputs(built.model, built.config, InputOptions(batch=1, seq_len=64))
    m = estimate(built, plan, "inference", precision="bf16")
    assert m.context_len == 63
    # K and V, 2 layers, batch 1, 4 heads x 16 = 64 wide, 63 tokens, bf16.
    assert m.kv_cache_bytes == 2 * 2 * 1 * 64 * 63 * 2
    # A rotary model has no table: its cache holds the whole context.
    built = _built(dict(LLAMA, max_position_embeddings=64))
    plan = plan_inputs(built.model, built.config, InputOptions(batch=1, seq_len=64))
    assert estimate(built, plan, "inference", precision="bf16").context_len == 64


def test_estimate_json_paths_and_overhead():
    built = _built(LLAMA)
    plan = plan_inputs(built.model, built.config, InputOptions(batch=1, seq_len=32))
    m = estimate(built, plan, "full")
    d = m.model_dump()
    assert set(d["breakdown"]) == {"weights", "gradients", "optimizer", "activations", "temporary", "overhead"}
    assert sum(d["breakdown"].values()) == m.peak_bytes
    # Overhead holds at least the CUDA context (287,047,680 B, pytorch/pytorch#86509) and two cuBLAS workspaces.
    assert m.peak_bytes - m.peak_tensor_bytes >= 287_047_680 + 2 * 32 * 1024 * 1024


@pytest.mark.parametrize("field,value", [("precision", "fp8"), ("optimizer", "lion"), ("mode", "prune"), ("lora_rank", 0)])
def test_bad_options_are_one_line_neurarch_errors(field, value):
    with pytest.raises(NeurarchError) as e:
        TrainSetup(**{field: value}).validate()
    assert isinstance(e.value, PlanOptionError)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "options",
    [
        {"precision": "fp16-mixed"},
        {"precision": "bf16"},
        {"optimizer": "sgd"},
        {"optimizer": "adafactor"},  # reads its step with .item(): answered inside optimizer.step() only
        {"grad_checkpointing": True},
    ],
)
def test_other_options_match_real_cpu_step(options):
    setup = TrainSetup(**{"mode": "full", "precision": "fp32", "device": "cpu", **options})
    sim, meas = _compare(LLAMA, setup)
    # Checkpointing recomputes forward in backward; its bookkeeping tensors differ by
    # well under 0.5% between fake and real runs.  Everything else agrees to the byte.
    assert _err(sim.steady.bytes, meas.step_peaks[1]) < 5e-3


def test_card_batch_is_the_largest_that_fits():
    # The planner's own batch search (plan.fit.card_batch over cached simulations), against
    # independent simulations at batch 3 and 4.
    from neurarch.cards import Card
    from neurarch.plan.fit import card_batch
    from neurarch.plan.memory import estimate_with_curve, with_batch

    built = _built(LLAMA)
    plan = plan_inputs(built.model, built.config, InputOptions(batch=1, seq_len=64))
    opts = dict(precision="fp32", device="cpu", steps=1)  # one step is enough to compare batches
    at3 = estimate(built, with_batch(plan, 3), "full", **opts)
    at4 = estimate(built, with_batch(plan, 4), "full", **opts)
    assert at4.peak_bytes > at3.peak_bytes + 2
    sims = {}

    def at(b):
        if b not in sims:
            sims[b] = estimate_with_curve(built, with_batch(plan, b), TrainSetup(precision=opts["precision"], device=opts["device"]), steps=opts["steps"])
        return sims[b]

    def card(nbytes):  # a custom card (no workspace saving) of this many bytes, no headroom
        return Card("probe", nbytes / 1e9, None, None, None, True, None, None, custom=True)

    # A card between batch 3's need and batch 4's: 3 fits, 4 does not, and 3 was simulated.
    between = card((at3.peak_bytes + at4.peak_bytes) // 2)
    assert at3.peak_bytes <= between.memory_bytes < at4.peak_bytes
    assert card_batch(at, between, "full", headroom=1.0) == (3, True)
    assert at(3)[0].peak_bytes == at3.peak_bytes and at(3)[0].input_shape == [3, 64]
    assert card_batch(at, card(1000), "full", headroom=1.0) == (0, True)


class _DropMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(512, 128)

    def forward(self, x):
        return self.fc2(self.drop(self.fc1(x)))


def test_cuda_attention_with_a_narrower_value_head_keeps_its_width():
    # DeepSeek's MLA: q/k heads of 192, v heads of 128.  CUDA's flash kernel needs one head
    # size, so another kernel runs; the output has v's width, as SDPA documents (..., L, Ev).
    from torch._subclasses.fake_tensor import FakeTensorMode

    from neurarch.fake.cuda import CudaKernels

    with FakeTensorMode(), CudaKernels():
        q = torch.empty(1, 4, 16, 192, dtype=torch.bfloat16)
        k = torch.empty(1, 4, 16, 192, dtype=torch.bfloat16)
        v = torch.empty(1, 4, 16, 128, dtype=torch.bfloat16)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert tuple(out.shape) == (1, 4, 16, 128)


def test_cuda_dropout_keeps_a_bool_mask():
    with torch.device("meta"):
        meta = _DropMLP()
    built = BuiltModel(model=meta, config=None, model_class="_DropMLP", library="torch")
    # A batch large enough that activations, not the optimizer, make the peak.
    plan = InputPlan([TensorSpec("x", (2048, 256))], main="x", batch=2048)
    acts = {}
    for device in ("cpu", "cuda"):
        sim = simulate(built, plan, TrainSetup(mode="full", precision="fp32", device=device))
        # The peak of the first step is at the end of forward; its activations
        # differ only by the dropout mask.
        acts[device] = sim.first.breakdown["activations"]
    # By hand: the mask has 2048*512 elements; CPU keeps it as fp32 (input * bernoulli
    # noise, aten/src/ATen/native/Dropout.cpp), CUDA's native_dropout as bool.
    assert acts["cpu"] - acts["cuda"] == 2048 * 512 * (4 - 1)


def test_qlora_matches_real_bitsandbytes_step():
    pytest.importorskip("bitsandbytes")
    sim, meas = _compare(LLAMA, TrainSetup(mode="qlora", precision="bf16-mixed", device="cpu"))
    assert _err(sim.steady.bytes, meas.step_peaks[1]) < 1e-3
    # By hand: NF4 packs two weights a byte.  Quantized: q 64x64, k/v 64x32, o 64x64,
    # gate/up 64x128, down 128x64 per layer, 2 layers.
    packed = 2 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128) // 2
    assert sim.steady.breakdown["weights"] > packed


def test_adamw_8bit_matches_real_bitsandbytes_step():
    pytest.importorskip("bitsandbytes")
    sim, meas = _compare(LLAMA, TrainSetup(mode="full", precision="fp32", optimizer="adamw-8bit", device="cpu"))
    assert _err(sim.steady.bytes, meas.step_peaks[1]) < 1e-3
    # 8-bit state: well under the 8 bytes per parameter fp32 AdamW keeps.
    assert sim.steady.breakdown["optimizer"] < 3 * sim.trainable_parameters


WAV2VEC2 = {
    "model_type": "wav2vec2",
    "architectures": ["Wav2Vec2ForCTC"],
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "conv_dim": [16, 16],
    "conv_kernel": [10, 3],
    "conv_stride": [5, 2],
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
    "vocab_size": 32,
}


def test_speech_with_layerdrop_and_specaugment_defaults_matches():
    # wav2vec2 trains with LayerDrop 0.1 and SpecAugment by default: random layer
    # skips and a random boolean mask.  Both are turned off in simulation and
    # measurement alike (the step that keeps every layer).
    built = _built(WAV2VEC2)
    assert built.config.layerdrop > 0 and built.config.apply_spec_augment
    plan = plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=4000))
    setup = TrainSetup(mode="full", precision="fp32", device="cpu")
    sim = simulate(built, plan, setup)
    meas = measure_cpu(_real_factory(built), built.config, plan, setup, onednn=False)
    assert _err(sim.steady.bytes, meas.step_peaks[1]) < 1e-3


@pytest.mark.parametrize("use_cache", [True, False])
def test_training_without_cache_builds_no_mask(use_cache):
    # Without a cache transformers checks the position ids for packed sequences;
    # a fake tensor cannot be read, so it would assume packing and build a mask
    # per layer that the real step never makes (see fake.gaps.unpacked_sequences).
    built = _built(LLAMA)
    plan = plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=64))
    plan.kwargs = {"use_cache": use_cache}
    setup = TrainSetup(mode="full", precision="fp32", device="cpu")
    sim = simulate(built, plan, setup)
    meas = measure_cpu(_real_factory(built), built.config, plan, setup)
    assert abs(sim.steady.bytes - meas.step_peaks[1]) <= 64


def _tiny_llava():
    # LLaVA: a CLIP vision tower (2 layers, 112 px, 14 px patches -> 64 image
    # features) feeding a 2-layer Llama through a projector.  Its forward counts the
    # image tokens in input_ids (int(mask.sum())) and scatters the features into them.
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    vision = CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, image_size=112, patch_size=14)
    text = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=1100)
    raw = LlavaConfig(vision_config=vision, text_config=text, image_token_index=1000).to_dict()
    raw["architectures"] = ["LlavaForConditionalGeneration"]
    return raw


@pytest.mark.parametrize("setup", [TrainSetup(mode="full", precision="fp32", device="cpu"), TrainSetup(mode="lora", precision="bf16-mixed", device="cpu")], ids=["full-fp32", "lora-bf16"])
def test_vision_language_model_reads_token_values_and_matches_real_cpu_step(setup):
    # torch's MemTracker (and this simulator before) stops at the data-dependent
    # token count; the step runs with the inputs' values known and matches the allocator.
    built = _built(_tiny_llava())
    plan = plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=32))
    sim = simulate(built, plan, setup)  # counts the image tokens into the plan first
    assert plan.main_shape[1] > 64  # the text was lengthened to hold the 64 image tokens
    # Fine-tuned as a causal LM on its own text (labels = the input ids' shape), as LLaVA trains.
    from neurarch.plan.train import label_specs

    (labels,) = label_specs(built.model, built.config, plan)
    assert labels.name == "labels" and tuple(labels.shape) == tuple(plan.main_shape)
    meas = measure_cpu(_real_factory(built), built.config, plan, setup)
    assert _err(sim.first.bytes, meas.step_peaks[0]) < 1e-4
    assert _err(sim.steady.bytes, meas.step_peaks[1]) < 1e-4


def test_no_lm_labels_for_a_conditional_generation_model_without_modality_tokens():
    # CSM (speech) is a decoder-only *ForConditionalGeneration whose labels are
    # (batch, seq, codebooks): 2-d LM labels would break its loss, so it trains on its output.
    from transformers import CsmConfig

    from neurarch.plan.train import label_specs

    cfg = CsmConfig().to_dict()
    cfg.update(num_hidden_layers=1, architectures=["CsmForConditionalGeneration"])
    cfg["depth_decoder_config"]["num_hidden_layers"] = 1
    built = _built(cfg)
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=16))
    assert type(built.model).__name__ == "CsmForConditionalGeneration"
    assert label_specs(built.model, built.config, plan) == []


def test_lora_leaves_linear_subclasses_with_their_own_forward_alone():
    # A MoE router that subclasses nn.Linear but returns (scores, logits) is no plain
    # matmul: peft's LoRA wrapper would add its update to a tuple (Llama-4, PhiMoE).
    from neurarch.plan.train import lora_targets

    class Router(nn.Linear):
        def forward(self, x):
            logits = super().forward(x)
            return logits.softmax(-1), logits

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)
            self.router = Router(8, 4)
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            return self.head(self.proj(x) + self.router(x)[1].sum(-1, keepdim=True))

    assert "router" not in lora_targets(Block(), 4) and "proj" in lora_targets(Block(), 4)
