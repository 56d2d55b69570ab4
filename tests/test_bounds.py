"""Bounded work: absurd asks are refused before building, with the field and the bound;
the largest published models and a 10M-position config are not.

Independent figures: the published structural sizes of Llama-3.1-405B and
DeepSeek-V3 (their config.json files, as copied in public code), a hand
computation of Llama-3.1-405B's parameters, and DeepSeek-V3's published total
of 671B parameters (the main model; its multi-token-prediction module is not
part of the transformers class).
"""

import json

import pytest

from neurarch import Options, analyze, limits
from neurarch.build import build_from_config
from neurarch.errors import LimitError
from neurarch.pipeline import PlanOptions

LLAMA_405B = {  # meta-llama/Llama-3.1-405B config.json, structural fields
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 16384, "intermediate_size": 53248,
    "num_hidden_layers": 126, "num_attention_heads": 128, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "tie_word_embeddings": False,
}
DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3 config.json, structural fields
    "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "vocab_size": 129280,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "first_k_dense_replace": 3, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1,
    "kv_lora_rank": 512, "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 18432, "qk_nope_head_dim": 128,
    "q_lora_rank": 1536, "max_position_embeddings": 163840, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
    "n_group": 8, "topk_group": 4,
}
TINY = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
}


def test_llama_405b_passes_and_builds_to_the_hand_count():
    limits.check_config(LLAMA_405B, "405b")
    # per layer: q, o 16384^2 each + k, v 16384 x 1024 each + gated MLP 3 x 16384 x 53248 + 2 norms x 16384
    per_layer = 2 * 16384**2 + 2 * 16384 * 1024 + 3 * 16384 * 53248 + 2 * 16384
    total = 126 * per_layer + 2 * 128256 * 16384 + 16384  # untied embed + lm_head, final norm
    assert total == 405_853_388_800
    built = build_from_config(LLAMA_405B, "405b")
    assert sum(p.numel() for p in built.model.parameters()) == total


def test_deepseek_v3_passes_and_builds_671b():
    limits.check_config(DEEPSEEK_V3, "dsv3")
    built = build_from_config(DEEPSEEK_V3, "dsv3")
    n = sum(p.numel() for p in built.model.parameters())
    assert abs(n - 671e9) / 671e9 < 0.001, n


def test_the_parameter_estimate_overcounts_real_models():
    # The estimate is an upper bound: a real model is never refused by it.
    assert limits.estimate_parameters(LLAMA_405B)[0] >= 405_853_388_800
    assert limits.estimate_parameters(DEEPSEEK_V3)[0] >= 671e9


def test_ten_million_positions_still_plans(tmp_path):
    # Advertised context is not work: only the input asked for is.
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**TINY, "max_position_embeddings": 10_000_000}))
    r = analyze(str(p), Options(plan=PlanOptions(modes=("inference",)), verify=False))
    assert r.memory is not None and r.memory.inference is not None and r.memory.inference.peak_bytes > 0


@pytest.mark.parametrize(
    "extra,field,bound",
    [
        ({"num_hidden_layers": 513}, "num_hidden_layers", "limit of 512"),
        ({"text_config": {"num_hidden_layers": 10_000}}, "text_config.num_hidden_layers", "limit of 512"),
        ({"num_local_experts": 70_000}, "num_local_experts", "limit of 65,536"),
        ({"vocab_size": 3_000_000}, "vocab_size", "limit of 2,097,152"),
        ({"num_labels": 10**30}, "num_labels", "limit of 2,097,152"),
        ({"hidden_size": 2_000_000, "intermediate_size": 2_000_000, "num_hidden_layers": 500}, "hidden_size", "limit of 1e+13"),
    ],
)
def test_absurd_asks_name_the_field_and_the_bound(extra, field, bound):
    with pytest.raises(LimitError) as e:
        limits.check_config({**TINY, **extra}, "cfg")
    assert field in str(e.value) and bound in str(e.value), str(e.value)


def test_the_bounds_themselves_are_accepted():
    limits.check_config({**TINY, "num_hidden_layers": 512, "num_local_experts": 65_536, "vocab_size": 2_097_152}, "cfg")
