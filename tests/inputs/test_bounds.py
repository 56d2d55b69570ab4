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
from tiny_configs import LLAMA

LLAMA_405B = {  # meta-llama/Llama-3.1-405B config.json, structural fields
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 16384,
    "intermediate_size": 53248,
    "num_hidden_layers": 126,
    "num_attention_heads": 128,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
}
DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3 config.json, structural fields
    "model_type": "deepseek_v3",
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "vocab_size": 129280,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "n_shared_experts": 1,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "intermediate_size": 18432,
    "qk_nope_head_dim": 128,
    "q_lora_rank": 1536,
    "max_position_embeddings": 163840,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
    "n_group": 8,
    "topk_group": 4,
}
TINY = LLAMA  # the shared 2-layer Llama (hidden 64): every test here overrides what it bounds


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


# --------------------------------------------------------------------------
# The activations the requested input asks for, refused before the trace
# --------------------------------------------------------------------------

from neurarch.cli import main  # noqa: E402
from neurarch.inputs import InputOptions, plan_inputs  # noqa: E402
from neurarch.inputs.work import check_plan, plan_work  # noqa: E402

PIB = 2**50  # 1,125,899,906,842,624 bytes


def _cli_refuses(capsys, monkeypatch, *argv) -> str:
    """Run the CLI in-process; the trace must never start; return the one error line."""
    import neurarch.pipeline

    def no_trace(*a, **k):
        raise AssertionError("the trace ran: the bound must refuse before it")

    monkeypatch.setattr(neurarch.pipeline, "trace", no_trace)
    rc = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_an_absurd_batch_and_seq_len_are_refused_before_the_trace(capsys, monkeypatch):
    # gpt2's logits at --batch 2^20 --seq-len 2^14: 1,048,576 x 16,384 x 50,257 (vocab) x 4 bytes
    # = 3.45e15 bytes > 2^50 = 1.13e15 (the batch x tokens, 2^34, is just within the input bound).
    assert 1_048_576 * 16_384 * 50_257 * 4 == 3_453_634_742_321_152 > PIB
    err = _cli_refuses(capsys, monkeypatch, "gpt2", "--batch", "1048576", "--seq-len", "16384")
    assert "--batch 1,048,576" in err and "--seq-len 16,384" in err, err
    assert "3.5e+15 bytes" in err and "vocab_size" in err and "limit of 1 PiB" in err, err


def test_an_absurd_image_size_is_refused_before_the_trace(capsys, monkeypatch):
    # 64 images of 3 x 16,384 x 16,384 = 51,539,607,552 values > the 2^34 = 17,179,869,184 of one input.
    assert 64 * 3 * 16_384**2 == 51_539_607_552 > 2**34
    err = _cli_refuses(capsys, monkeypatch, "microsoft/resnet-50", "--batch", "64", "--image-size", "16384")
    assert "--batch 64" in err and "--image-size 16,384" in err and "17,179,869,184 elements" in err, err


def test_an_option_past_its_own_bound_is_refused_before_anything_is_built(capsys, monkeypatch):
    import neurarch.inputs.prepare

    monkeypatch.setattr(neurarch.inputs.prepare, "build", lambda *a, **k: (_ for _ in ()).throw(AssertionError("built")))
    err = _cli_refuses(capsys, monkeypatch, "gpt2", "--seq-len", str(2**22 + 1))
    assert "--seq-len" in err and "4,194,304" in err, err


VIT_TINY = {  # a 2-layer ViT with 8 px patches: a 16,384 px image is (16,384 / 8)^2 = 4,194,304 patches
    "model_type": "vit",
    "architectures": ["ViTForImageClassification"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "image_size": 224,
    "patch_size": 8,
    "num_channels": 3,
}


@pytest.mark.parametrize("batch,refused", [(4, False), (8, True)])
def test_eager_attention_scores_of_a_large_image(batch, refused):
    # eager scores: batch x 4 heads x 4,194,304^2 patches x 4 bytes = batch x 2^48 bytes:
    # batch 4 is exactly 2^50 (at the bound, accepted), batch 8 is 2^51 (refused).
    assert 4 * 4 * (16_384 // 8) ** 4 * 4 == PIB
    built = build_from_config(VIT_TINY, "vit-tiny", attn_implementation="eager")
    opts = InputOptions(batch=batch, image_size=16_384)
    if refused:
        with pytest.raises(LimitError) as e:
            plan_inputs(built.model, built.config, opts)
        msg = str(e.value)
        assert "attention scores" in msg and "4,194,304^2 patches" in msg and "num_attention_heads" in msg, msg
        assert e.value.field == "batch"
    else:
        plan = plan_inputs(built.model, built.config, opts)
        n, what, _ = plan_work(plan, built.config, opts).largest()
        assert n == PIB and "attention scores" in what


def test_the_step_bound_counts_every_layer():
    # 8 x 4,194,304 tokens (2^25) of 2^21-wide hidden states: the largest tensor is 4 x 2^25 x 2^21 = 2^48 bytes
    # (within 2^50); over 512 layers the step holds 4 x 2^25 x 2^21 x 512 = 2^57 bytes > 2^56; over 256 layers 2^56 (at the bound).
    w = limits.Work(
        (limits.Stream("input_ids", 8, 2**22, "tokens"),),
        ("--batch 8", "--seq-len 4,194,304"),
        width=2**21,
        width_field="hidden_size",
        hidden=2**21,
        hidden_field="hidden_size",
        layers=512,
        layers_field="num_hidden_layers",
    )
    assert w.largest()[0] == 2**48 and w.step_bytes() == 2**57
    with pytest.raises(LimitError) as e:
        limits.check_work(w)
    msg = str(e.value)
    assert "hidden states per step" in msg and "512 layers (num_hidden_layers)" in msg and "limit of 64 PiB" in msg, msg
    assert e.value.field == "batch"
    limits.check_work(limits.Work(w.streams, w.asked, w.width, w.width_field, w.hidden, w.hidden_field, 256, w.layers_field))


def test_no_catalog_model_default_input_is_refused():
    # Every catalog config at its default input (what --plan traces), the bound function only.
    from neurarch.sources.catalog import entries

    for model_id, entry in entries().items():
        built = build_from_config(entry.config(), model_id)
        opts = InputOptions()
        plan = plan_inputs(built.model, built.config, opts)  # raises LimitError if refused
        work = check_plan(plan, built.config, opts)
        n, what, _ = work.largest()
        assert 0 < n < PIB / 1000, (model_id, what)  # the largest (Gemma's 256,000-wide logits) is ~2e-6 of it


@pytest.fixture(scope="module")
def llama_405b():
    return build_from_config(LLAMA_405B, "405b")


def test_llama_405b_inputs_pass_the_bound_up_to_long_context(llama_405b):
    for opts in (InputOptions(), InputOptions(seq_len=131_072), InputOptions(batch=8, seq_len=131_072)):
        check_plan(plan_inputs(llama_405b.model, llama_405b.config, opts), llama_405b.config, opts)
    # 65,536 x 131,072 tokens of 128,256-wide logits: 4.4e15 bytes > 2^50
    with pytest.raises(LimitError) as e:
        plan_inputs(llama_405b.model, llama_405b.config, InputOptions(batch=65_536, seq_len=131_072))
    assert "--batch 65,536 and --seq-len 131,072" in str(e.value) and "vocab_size" in str(e.value)


@pytest.mark.slow
def test_llama_405b_plans_inference(tmp_path):
    # bf16 weights alone: 2 x 405,853,388,800 = 811,706,777,600 bytes; the peak adds a few hundred MB at 64 tokens.
    p = tmp_path / "config.json"
    p.write_text(json.dumps(LLAMA_405B))
    r = analyze(str(p), Options(inputs=InputOptions(seq_len=64), plan=PlanOptions(modes=("inference",)), verify=False))
    peak = r.memory.inference.peak_bytes
    assert 811_706_777_600 <= peak < 1.01 * 811_706_777_600, peak


def test_ten_million_positions_with_a_short_seq_len_still_plans(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**TINY, "max_position_embeddings": 10_000_000}))
    r = analyze(str(p), Options(inputs=InputOptions(seq_len=64), plan=PlanOptions(modes=("inference",)), verify=False))
    assert r.input.seq_len == 64 and r.memory.inference is not None and r.memory.inference.peak_bytes > 0


def test_attention_scores_are_not_counted_over_raw_pixels():
    # TVP's default video: 48 frames of 448 x 448 = 9,633,792 pixels, no patch_size: a convolutional stem
    # shrinks it before attention, so 12 heads x 9,633,792^2 x 4 bytes (4.5e15) is no activation it makes;
    # the width term stays: 9,633,792 x 30,522 x 4 = 1,176,170,397,696 bytes.
    w = limits.Work((limits.Stream("pixel_values", 1, 48 * 448 * 448, "pixels"),), (), width=30_522, width_field="vocab_size", heads=12, heads_field="num_attention_heads")
    assert w.largest()[0] == 9_633_792 * 30_522 * 4 == 1_176_170_397_696
    limits.check_work(w)
    patches = limits.Work((limits.Stream("pixel_values", 1, 9_633_792, "patches"),), (), heads=12, heads_field="num_attention_heads")
    with pytest.raises(LimitError):
        limits.check_work(patches)


def test_eager_attention_asked_for_in_the_plan_is_bounded_before_anything_runs(tmp_path, monkeypatch):
    """--attn-implementation eager builds the recipe's model after the input plan: its scores are bounded too.

    A tiny Llama (4 heads, hidden 64, 2 layers) with 4,194,304 positions at batch 8: SDPA keeps no scores and
    every other tensor is small (the logits: 8 x 2^22 x 1,000 x 4 = 1.3e11 bytes), but eager attention's
    scores are 8 x 4 x (2^22)^2 x 4 bytes = 2.25e15 > 2^50 = 1.13e15.
    """
    assert 8 * 4 * (2**22) ** 2 * 4 == 2_251_799_813_685_248 > PIB
    cfg = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 2**22,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    import neurarch.pipeline as pipeline

    monkeypatch.setattr(pipeline, "_start_jobs", lambda *a, **k: pytest.fail("the plan started before the bound"))
    opts = Options(inputs=InputOptions(batch=8, seq_len=2**22), plan=PlanOptions(modes=("inference",), attn_implementation="eager"))
    with pytest.raises(LimitError) as e:
        analyze(str(path), opts)
    assert "limit of 1 PiB" in str(e.value) and "\n" not in str(e.value)
