"""Every verifier rule on a model that triggers it and on one that must not.

Models are real catalog configs (often with fewer layers: the rules read
shapes, and shapes do not depend on depth unless the rule is about depth) or
small user modules defined at the bottom of this file and loaded through the
real ``python:FILE.py:Factory`` source.  The numbers a finding must carry are
worked out by hand from the config in a comment next to each assertion.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import neurarch.inputs.prepare as prepare
import neurarch.pipeline as pipeline
from neurarch import Options, analyze, verify
from neurarch.inputs import InputOptions

CATALOG = Path(pipeline.__file__).parent / "catalog" / "configs"
THIS = Path(__file__).resolve()


class Lab:
    """Traces models through the real pipeline once each and hands out CheckContexts.

    ``analyze`` returns only the report; the rules also need the built module,
    so we keep the one ``inputs.prepare.build`` made.  from_scratch / precision /
    training are flags of the context, not of the trace, so one trace serves
    several contexts.
    """

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self._traces: dict = {}

    def config(self, name: str, **overrides) -> str:
        """A catalog config with some fields changed, written to a file (the `local` source)."""
        raw = json.loads((CATALOG / f"{name}.json").read_text())
        raw.update(overrides)
        tag = "-".join(f"{k}{v}" for k, v in sorted(overrides.items()))
        path = self.tmp / f"{name}-{tag}.json"
        path.write_text(json.dumps(raw))
        return str(path)

    def raw_config(self, label: str, raw: dict) -> str:
        path = self.tmp / f"{label}.json"
        path.write_text(json.dumps(raw))
        return str(path)

    def trace(self, spec: str, **inputs):
        key = (spec, tuple(sorted(inputs.items())))
        if key not in self._traces:
            built = {}
            original = prepare.build  # the build analyze runs (inputs.prepare), kept to hand the model to the rules
            prepare.build = lambda source: built.setdefault("model", original(source))
            try:
                report = analyze(spec, Options(inputs=InputOptions(**inputs)))
            finally:
                prepare.build = original
            self._traces[key] = (report, built["model"])
        return self._traces[key]

    def ctx(self, spec: str, *, from_scratch=False, training=True, precision=None, **inputs) -> verify.CheckContext:
        report, built = self.trace(spec, **inputs)
        return verify.CheckContext(report=report, model=built.model, config=built.config, from_scratch=from_scratch, training=training, precision=precision)

    def run(self, spec: str, **kw) -> verify.VerifyResult:
        return verify.run(self.ctx(spec, **kw))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return Lab(tmp_path_factory.mktemp("verify"))


def user(factory: str) -> str:
    """A model defined at the bottom of this file, through the python: source."""
    return f"python:{THIS}:{factory}"


def hits(result: verify.VerifyResult, rule_id: str):
    return [f for f in result.findings if f.rule == rule_id]


def ran(result: verify.VerifyResult, rule_id: str) -> bool:
    return rule_id in result.verifier.rules_run


# -- norm-at-output (the seed's bn-at-output, done right) -----------------------------------------


def test_norm_at_output_fires_on_a_classifier_that_normalizes_its_logits(lab):
    res = lab.run(user("NormAfterHead"), input_shape=(64,))
    assert res.verifier.output_kind == "classification"  # Linear 128 -> 10: no earlier row has width 10
    [f] = hits(res, "norm-at-output")
    assert f.severity == "warn" and f.node == "norm"
    assert "`head`" in f.message and "width 10" in f.message
    assert res.verifier.rule_errors == []


def test_norm_at_output_silent_on_backbone_and_on_classifier(lab):
    # DINOv2 is a feature backbone: its final LayerNorm on features is standard (the seed's false positive).
    dino = lab.run(lab.config("facebook--dinov2-small", num_hidden_layers=2), image_size=224)
    assert dino.verifier.output_kind == "features"
    assert dino.findings and not hits(dino, "norm-at-output")  # it has findings, but not this one
    assert any(s.startswith("norm-at-output: the model outputs features") for s in dino.verifier.skipped)
    # ViT classifier: layernorm -> classifier Linear; nothing after the head.
    vit = lab.run(lab.config("google--vit-base-patch16-224", num_hidden_layers=2))
    assert vit.verifier.output_kind == "classification"
    assert ran(vit, "norm-at-output") and not hits(vit, "norm-at-output")


# -- activation-at-output -----------------------------------------------------------------------


def test_activation_at_output_fires_on_softmax_after_head(lab):
    res = lab.run(user("SoftmaxHead"), input_shape=(64,))
    [f] = hits(res, "activation-at-output")
    assert f.node == "probs" and "Softmax" in f.message


def test_activation_at_output_ignores_gemma2_logit_softcapping(lab):
    # Gemma 2 ends lm_head -> tanh(x / 30) * 30 on purpose (final_logit_softcapping = 30).
    res = lab.run(lab.raw_config("gemma-2-2b-2layers", GEMMA2_2B), seq_len=512)
    assert res.verifier.output_kind == "lm"
    assert [n.type for n in lab.trace(lab.raw_config("gemma-2-2b-2layers", GEMMA2_2B), seq_len=512)[0].structure.nodes[-2:]] == ["Linear", "Tanh"]
    assert ran(res, "activation-at-output") and not hits(res, "activation-at-output")


# -- dead-parameters -----------------------------------------------------------------------------


def test_dead_parameters_fires_on_dinov2_mask_token(lab):
    # embeddings.mask_token is (1, 384): used only with bool_masked_pos, so a plain forward never touches it.
    res = lab.run(lab.config("facebook--dinov2-small", num_hidden_layers=2), image_size=224)
    [f] = hits(res, "dead-parameters")
    assert f.node == "embeddings.mask_token" and "384 scalars" in f.message


def test_dead_parameters_silent_when_everything_gets_gradients(lab):
    res = lab.run(lab.config("gpt2", n_layer=1), seq_len=128)
    assert ran(res, "dead-parameters") and not hits(res, "dead-parameters")
    # and when only running the model, the rule does not apply at all
    inference = lab.run(lab.config("facebook--dinov2-small", num_hidden_layers=2), image_size=224, training=False)
    assert not hits(inference, "dead-parameters")


# -- no-trainable-parameters ----------------------------------------------------------------------


def test_no_trainable_parameters(lab):
    res = lab.run(user("FrozenMLP"), input_shape=(64,))
    [f] = hits(res, "no-trainable-parameters")
    assert f.severity == "error" and "0 of 650 parameters" in f.message  # Linear(64, 10): 64*10 + 10 = 650
    ok = lab.run(user("NormAfterHead"), input_shape=(64,))
    assert ran(ok, "no-trainable-parameters") and not hits(ok, "no-trainable-parameters")


# -- lora-trainable-mismatch ----------------------------------------------------------------------------


def test_lora_frozen_adapter_and_trainable_base(lab):
    # TinyLlama width, 1 layer; LoRA r=8 on q_proj and v_proj:
    #   q_proj 2048 -> 2048: A 8x2048 + B 2048x8 = 32,768;  v_proj 2048 -> 256 (4 KV heads x 64): A 8x2048 + B 256x8 = 18,432
    #   adapters: 51,200 scalars in 4 tensors.
    frozen = lab.run(user("lora_frozen_adapter"), seq_len=64)
    [f] = hits(frozen, "lora-trainable-mismatch")
    assert "4 LoRA tensors (51,200 scalars)" in f.message
    base = lab.run(user("lora_base_trainable"), seq_len=64)
    [f] = hits(base, "lora-trainable-mismatch")
    # down_proj unfrozen: 5632 x 2048 = 11,534,336 scalars outside the adapters
    assert "11,534,336 scalars outside the LoRA adapters" in f.message and f.node.endswith("mlp.down_proj.weight")


def test_lora_as_configured_is_silent(lab):
    res = lab.run(user("lora_ok"), seq_len=64)
    assert ran(res, "lora-trainable-mismatch") and not hits(res, "lora-trainable-mismatch")


# -- batchnorm-small-batch ------------------------------------------------------------------------------


def test_batchnorm_small_batch(lab):
    res = lab.run("microsoft/resnet-18", batch=1)
    [f] = hits(res, "batchnorm-small-batch")
    # stem conv 7x7/2 on 224: 112 x 112 = 12,544 positions per channel; ResNet-18 has 20 BatchNorms
    # (stem 1 + 8 blocks x 2 + 3 downsample shortcuts).
    assert "20 BatchNorm layers" in f.message and "1 sample(s) x 12,544 positions" in f.message
    assert "Freeze BatchNorm" in f.fix  # fine-tuning: the fix is to freeze, not to grow the batch
    big = lab.run("microsoft/resnet-18", batch=8)
    assert ran(big, "batchnorm-small-batch") and not hits(big, "batchnorm-small-batch")


# -- residual-init-not-depth-scaled (from scratch only) --------------------------------------------------


def test_residual_init_fires_on_llama_from_scratch(lab):
    # TinyLlama: 22 layers x (attention + MLP) = 44 residual branches; Llama's _init_weights gives every
    # Linear std = initializer_range = 0.02, o_proj and down_proj included.  Fix: 0.02 / sqrt(44) = 0.003015.
    res = lab.run("TinyLlama/TinyLlama-1.1B-Chat-v1.0", seq_len=64, from_scratch=True)
    [f] = hits(res, "residual-init-not-depth-scaled")
    assert "44 residual branches" in f.message and "std 0.02" in f.message
    assert "0.003015" in f.fix


def test_residual_init_silent_on_gpt2_and_when_fine_tuning(lab):
    # GPT-2's _init_weights draws c_proj with 0.02 / sqrt(2 x 12) = 0.00408: depth-scaled already.
    gpt2 = lab.run("gpt2", seq_len=1024, from_scratch=True)
    assert ran(gpt2, "residual-init-not-depth-scaled") and not hits(gpt2, "residual-init-not-depth-scaled")
    tuned = lab.run("TinyLlama/TinyLlama-1.1B-Chat-v1.0", seq_len=64)
    assert not hits(tuned, "residual-init-not-depth-scaled")
    assert any(s.startswith("residual-init-not-depth-scaled: only with --from-scratch") for s in tuned.verifier.skipped)


# -- fp16-on-bf16-checkpoint ----------------------------------------------------------------------------


def test_fp16_on_bf16_checkpoint(lab):
    gemma = lab.config("google--gemma-2b", num_hidden_layers=1)  # torch_dtype bfloat16
    [f] = hits(lab.run(gemma, seq_len=64, precision="fp16-mixed"), "fp16-on-bf16-checkpoint")
    assert "65,504" in f.message  # float16 max
    assert not hits(lab.run(gemma, seq_len=64, precision="bf16-mixed"), "fp16-on-bf16-checkpoint")
    llama2 = lab.config("meta-llama--Llama-2-7b-hf", num_hidden_layers=1)  # torch_dtype float16: fp16 is its own dtype
    res = lab.run(llama2, seq_len=64, precision="fp16-mixed")
    assert ran(res, "fp16-on-bf16-checkpoint") and not hits(res, "fp16-on-bf16-checkpoint")


# -- kv-heads-divide-heads --------------------------------------------------------------------------------


def test_kv_heads_not_dividing_heads(lab):
    bad = lab.run(lab.config("meta-llama--Meta-Llama-3-8B", num_hidden_layers=2, num_key_value_heads=5), seq_len=64)
    assert bad.findings[0].rule == "kv-heads-divide-heads"  # errors come first
    [f] = hits(bad, "kv-heads-divide-heads")
    # 32 heads / 5 KV heads = 6.40; divisors of 32: 1, 2, 4, 8, 16, 32
    assert "32/5 = 6.40" in f.message and "forward pass failed" in f.message
    assert f.fix.endswith("1, 2, 4, 8, 16, 32.")
    good = lab.run(lab.config("meta-llama--Meta-Llama-3-8B", num_hidden_layers=2), seq_len=64)  # 32 / 8 = 4
    assert ran(good, "kv-heads-divide-heads") and not hits(good, "kv-heads-divide-heads")


# -- head-dim-kernel-support ----------------------------------------------------------------------------------


def test_head_dim_not_multiple_of_8(lab):
    # hidden 1200 / 12 heads = head_dim 100: 100 % 8 = 4.  Flash pads to 104.
    res = lab.run(lab.config("meta-llama--Meta-Llama-3-8B", num_hidden_layers=2, hidden_size=1200, num_attention_heads=12, num_key_value_heads=4), seq_len=64)
    [f] = hits(res, "head-dim-kernel-support")
    assert "head_dim is 100" in f.message and "pads it to 104" in f.message
    # With 1200 hidden, the head counts giving head_dim % 8 == 0 and <= 256: 5 (240), 10 (120), 15 (80), 25 (48) ...; closest to 12 is 10.
    assert "10 heads give head_dim 120" in f.fix
    llama = lab.run(lab.config("meta-llama--Meta-Llama-3-8B", num_hidden_layers=2), seq_len=64)  # 4096 / 32 = 128
    assert ran(llama, "head-dim-kernel-support") and not hits(llama, "head-dim-kernel-support")


# -- eager-attention ----------------------------------------------------------------------------------------------


def test_eager_attention_on_gemma2(lab):
    # transformers builds Gemma 2 with eager attention (no SDPA: it cannot soft-cap scores).
    # scores per layer: 1 x 8 heads x 512 x 512 = 2,097,152 -> 8.0 MiB in fp32; 2 layers: 16.0 MiB.
    res = lab.run(lab.raw_config("gemma-2-2b-2layers", GEMMA2_2B), seq_len=512)
    [f] = hits(res, "eager-attention")
    assert "1 x 8 x 512 x 512 = 2,097,152 scores (8.0 MiB" in f.message and "16.0 MiB over all layers" in f.message
    assert "flash_attention_2" in f.fix  # Gemma2ForCausalLM supports FlashAttention-2, which soft-caps


def test_sdpa_attention_is_not_eager(lab):
    res = lab.run(lab.config("meta-llama--Meta-Llama-3-8B", num_hidden_layers=2), seq_len=64)
    assert ran(res, "eager-attention") and not hits(res, "eager-attention")


# -- seq-beyond-position-table ---------------------------------------------------------------------------------


def test_seq_beyond_learned_positions(lab):
    # GPT-2 has n_positions = 1024 learned positions (wpe); 1100 tokens reach positions 1024..1099.
    # The fake-tensor trace itself succeeds: only the verifier sees it.
    gpt2 = lab.config("gpt2", n_layer=1)
    res = lab.run(gpt2, seq_len=1100)
    assert lab.trace(gpt2, seq_len=1100)[0].forward_pass.ok
    [f] = hits(res, "seq-beyond-position-table")
    assert f.severity == "error" and f.node == "transformer.wpe"
    assert "holds 1,024 learned positions" in f.message and "positions 1,024 to 1,099" in f.message
    ok = lab.run(gpt2, seq_len=1024)
    assert ran(ok, "seq-beyond-position-table") and not hits(ok, "seq-beyond-position-table")


# -- seq-beyond-trained-context -----------------------------------------------------------------------------------


def test_seq_beyond_rotary_context(lab):
    # TinyLlama: max_position_embeddings 2048, rotary without scaling; 4096 tokens = 2x.
    tiny = lab.config("TinyLlama--TinyLlama-1.1B-Chat-v1.0", num_hidden_layers=1)
    [f] = hits(lab.run(tiny, seq_len=4096), "seq-beyond-trained-context")
    assert "4,096 tokens" in f.message and "max_position_embeddings = 2,048" in f.message and "'factor': 2" in f.fix
    ok = lab.run(tiny, seq_len=2048)
    assert ran(ok, "seq-beyond-trained-context") and not hits(ok, "seq-beyond-trained-context")


# -- vocab-not-padded --------------------------------------------------------------------------------------------------


def test_vocab_not_padded(lab):
    # GPT-2: 50,257 = 64 x 785 + 17 -> pad to 50,304: 47 rows x 768 = 36,096 parameters.
    [f] = hits(lab.run(lab.config("gpt2", n_layer=1), seq_len=128), "vocab-not-padded")
    assert "64 x 785 + 17" in f.message and "50,304 (+36,096 parameters" in f.fix
    # Pythia: 50,304 = 64 x 786 already.
    pythia = lab.run(lab.config("EleutherAI--pythia-160m", num_hidden_layers=1), seq_len=128)
    assert ran(pythia, "vocab-not-padded") and not hits(pythia, "vocab-not-padded")


# -- dims-not-multiple-of-8 ------------------------------------------------------------------------------------------


def test_dims_not_multiple_of_8(lab):
    # MisalignedMLP: 64 -> 100 -> 300 -> 10.  fc1 64*100+100 = 6,500; fc2 100*300+300 = 30,300; fc3 300*10+10 = 3,010:
    # all three touch 100 or 300 (the head's 10 classes are exempt): 39,810 of 39,810 parameters.
    res = lab.run(user("MisalignedMLP"), input_shape=(64,))
    [f] = hits(res, "dims-not-multiple-of-8")
    assert "3 Linear layers holding 39,810 parameters (100% of the model)" in f.message
    assert "100 -> 104" in f.fix and "300 -> 304" in f.fix
    ok = lab.run(user("NormAfterHead"), input_shape=(64,))  # 64 -> 128 -> 10 (head)
    assert ran(ok, "dims-not-multiple-of-8") and not hits(ok, "dims-not-multiple-of-8")


# -- bias-before-batchnorm ----------------------------------------------------------------------------------------------


def test_bias_before_batchnorm(lab):
    res = lab.run(user("ConvBiasBN"), input_shape=(3, 32, 32))
    [f] = hits(res, "bias-before-batchnorm")
    assert f.node == "conv" and "16 bias scalars" in f.message  # Conv2d(3, 16): one bias per output channel
    resnet = lab.run("microsoft/resnet-18", batch=8)  # convolutions built with bias=False
    assert ran(resnet, "bias-before-batchnorm") and not hits(resnet, "bias-before-batchnorm")


# -- logits-memory ---------------------------------------------------------------------------------------------------------


def test_logits_memory(lab):
    # GPT-2 at 1024 tokens, elements per token of every layer-table row:
    #   wte 768 + wpe 768 + their add 768 + 12 layers x (ln_1, attn, add, ln_2, mlp, add) x 768 + ln_f 768 + lm_head 50,257
    #   = 2,304 + 55,296 + 768 + 50,257 = 108,625; logits share 50,257 / 108,625 = 46%.
    #   1024 x 50,257 = 51,463,168 logits x 4 bytes = 196.3 MiB.
    [f] = hits(lab.run("gpt2", seq_len=1024), "logits-memory")
    assert "1 x 1024 x 50257 = 51,463,168 logits" in f.message and "196.3 MiB" in f.message and "46%" in f.message
    # Llama-2-7B at 2048 tokens: 32 layers x 6 rows x 4096 = 786,432; + embed 4,096 + rotary 128 + norm 4,096
    #   + lm_head 32,000 = 826,752 per token; logits share 32,000 / 826,752 = 3.9% < 10%.
    llama2 = lab.run("meta-llama/Llama-2-7b-hf", seq_len=2048)
    assert ran(llama2, "logits-memory") and not hits(llama2, "logits-memory")


# -- activation-hotspot ------------------------------------------------------------------------------------------------------


def test_activation_hotspot(lab):
    # HotspotCNN on 3x64x64, elements per row: conv1 32x64x64 = 131,072; relu 131,072; pool /4 -> 32x16x16 = 8,192;
    # conv2 64x16x16 = 16,384; relu 16,384; avgpool 64; flatten 64; fc 10.  Total 303,242; conv1 = 43%.
    [f] = hits(lab.run(user("HotspotCNN"), input_shape=(3, 64, 64)), "activation-hotspot")
    assert f.node == "conv1" and "43%" in f.message and "512.0 KiB" in f.message  # 131,072 x 4 bytes
    resnet = lab.run("microsoft/resnet-18", batch=8)  # the stem's 64x112x112 rows are ~11% each
    assert ran(resnet, "activation-hotspot") and not hits(resnet, "activation-hotspot")


# -- image-size-drops-pixels ------------------------------------------------------------------------------------------------


def test_image_size_drops_pixels(lab):
    # DINOv2 patch 14 at 230 px: 230 = 16 x 14 + 6, the last 6 rows and columns are never read;
    # 1 - 224^2 / 230^2 = 1 - 50,176 / 52,900 = 5.1% of the pixels.
    dino = lab.config("facebook--dinov2-small", num_hidden_layers=2)
    [f] = hits(lab.run(dino, image_size=230), "image-size-drops-pixels")
    assert f.node == "embeddings.patch_embeddings.projection"
    assert "last 6 row(s) and 6 column(s)" in f.message and "5.1%" in f.message and "224 or 238" in f.fix
    ok = lab.run(dino, image_size=224)  # 224 = 16 x 14
    assert ran(ok, "image-size-drops-pixels") and not hits(ok, "image-size-drops-pixels")


# ============================================================================================================================
# Models for the python: source.  Small on purpose: every count above is worked out from these definitions.
# ============================================================================================================================

# google/gemma-2-2b config.json as published, with num_hidden_layers 26 -> 2.
GEMMA2_2B = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "num_hidden_layers": 2,
    "vocab_size": 256000,
    "max_position_embeddings": 8192,
    "sliding_window": 4096,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "query_pre_attn_scalar": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "torch_dtype": "float32",
}


class NormAfterHead(nn.Module):
    """64 -> 128 -> 10 classes, then a LayerNorm over the class logits (the bug)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(64, 128)
        self.act = nn.ReLU()
        self.head = nn.Linear(128, 10)
        self.norm = nn.LayerNorm(10)

    def forward(self, x):
        return self.norm(self.head(self.act(self.body(x))))


class SoftmaxHead(nn.Module):
    """64 -> 128 -> 10 classes, then Softmax (the loss applies its own)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(64, 128)
        self.act = nn.ReLU()
        self.head = nn.Linear(128, 10)
        self.probs = nn.Softmax(dim=-1)

    def forward(self, x):
        return self.probs(self.head(self.act(self.body(x))))


class FrozenMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(64, 10)
        self.requires_grad_(False)

    def forward(self, x):
        return self.head(x)


class MisalignedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(64, 100), nn.Linear(100, 300), nn.Linear(300, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class ConvBiasBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)  # bias=True by default
        self.bn = nn.BatchNorm2d(16)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.pool(torch.relu(self.bn(self.conv(x)))).flatten(1))


class HotspotCNN(nn.Module):
    """A full-resolution 32-channel stem that dominates the activations."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1, bias=False)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(4)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.AdaptiveAvgPool2d(1)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = self.pool1(self.relu1(self.conv1(x)))
        return self.fc(self.flat(self.pool2(self.relu2(self.conv2(x)))))


def _lora(adjust=None):
    """TinyLlama (published config, 1 layer) with LoRA r=8 on q_proj and v_proj, as get_peft_model makes it."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    from neurarch.build import BuiltModel, make_config

    raw = json.loads((CATALOG / "TinyLlama--TinyLlama-1.1B-Chat-v1.0.json").read_text())
    raw["num_hidden_layers"] = 1
    cfg = make_config(raw, "TinyLlama (1 layer)")
    model = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    if adjust:
        adjust(model)
    return BuiltModel(model=model, config=cfg, model_class=type(model).__name__, library="peft")


def lora_ok():
    return _lora()


def lora_frozen_adapter():
    """What PeftModel.from_pretrained(...) gives by default (is_trainable=False): adapters frozen."""

    def freeze(model):
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.requires_grad_(False)

    return _lora(freeze)


def lora_base_trainable():
    """A base weight unfrozen after wrapping (e.g. a loop that sets requires_grad on the MLP)."""
    return _lora(lambda model: model.base_model.model.model.layers[0].mlp.down_proj.weight.requires_grad_(True))
