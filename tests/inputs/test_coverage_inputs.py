"""Input rules added for architectures beyond the catalog (the coverage benchmark's failures).

Each expectation is written from the model's own config fields or forward
signature (quoted next to it), not from the planner's output.
"""

from __future__ import annotations

import inspect
import math
import warnings

import pytest

from neurarch.build import build_from_config
from neurarch.inputs import DEFAULT_AUDIO_SAMPLES, DEFAULT_SEQ_LEN_STEPWISE, DEFAULT_VISUAL_REGIONS, InputOptions, plan_inputs


def _default(model_type: str):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = CONFIG_MAPPING[model_type]()
        return cfg, build_from_config(cfg.to_dict(), f"default {model_type}")


def _plan(built, **opts):
    return plan_inputs(built.model, built.config, InputOptions(**opts))


def _shapes(plan) -> dict[str, tuple[int, ...]]:
    return {t.name: tuple(t.shape) for t in plan.tensors}


def _alt_shapes(plan) -> list[tuple[int, ...]]:
    return [tuple(t.shape) for a in plan.alternatives for t in a.tensors]


def test_stepwise_scan_gets_the_short_default():
    import transformers.models.mamba.modeling_mamba as mm

    cfg, built = _default("mamba")
    # The reference scan steps through the sequence in Python, and the config has no chunk size.
    assert "for index in range(seq_len)" in inspect.getsource(mm)
    assert cfg.state_size and getattr(cfg, "chunk_size", None) is None
    plan = _plan(built)
    assert _shapes(plan)["input_ids"] == (1, DEFAULT_SEQ_LEN_STEPWISE)
    assert any("token by token" in h for h in plan.how)
    # --seq-len still wins.
    assert _shapes(_plan(built, seq_len=100))["input_ids"] == (1, 100)


def test_chunked_scan_keeps_the_decoder_default():
    cfg, built = _default("mamba2")
    assert cfg.chunk_size  # Mamba-2 scans in chunks
    assert _shapes(_plan(built))["input_ids"][1] != DEFAULT_SEQ_LEN_STEPWISE


def test_raw_audio_whole_strides():
    cfg, built = _default("muse_spark_audio")
    stride = math.prod(cfg.patch_sizes)  # 16 * 6 * 5 * 4 = 1920 samples per frame
    n = _shapes(_plan(built))["input_values"][-1]
    assert n % stride == 0 and DEFAULT_AUDIO_SAMPLES <= n < DEFAULT_AUDIO_SAMPLES + stride


def test_target_sizes_are_the_patch_grid():
    cfg, built = _default("minicpm_ocr_vision")
    assert "target_sizes" in inspect.signature(built.model.forward).parameters
    plan = _plan(built)
    side = cfg.image_size // cfg.patch_size  # 224 // 16 = 14
    t = next(t for t in plan.tensors if t.name == "target_sizes")
    assert t.data == [[side, side]]
    # The full model works the grid out itself (given target_sizes, it wants mm_token_type_ids too).
    _, vlm = _default("minicpmv4_7")
    assert "target_sizes" in inspect.signature(vlm.model.forward).parameters
    assert "target_sizes" not in _shapes(_plan(vlm, seq_len=64))


def test_region_features_from_config_widths():
    cfg, built = _default("lxmert")
    s = _shapes(_plan(built))
    assert s["visual_feats"] == (1, DEFAULT_VISUAL_REGIONS, cfg.visual_feat_dim)  # 2048
    assert s["visual_pos"] == (1, DEFAULT_VISUAL_REGIONS, cfg.visual_pos_dim)  # 4 box coordinates


def test_task_inputs_are_task_seq_len_tokens():
    cfg, built = _default("oneformer")
    assert _shapes(_plan(built))["task_inputs"] == (1, cfg.task_seq_len)  # 77


def test_image_attention_mask_means_images_per_sample():
    cfg, built = _default("idefics")
    s = _shapes(_plan(built, seq_len=64))
    assert len(s["pixel_values"]) == 5 and s["pixel_values"][1] == 1
    assert s["image_attention_mask"] == (1, 64, 1)  # text x images


def test_video_text_model_with_backbone_gets_its_frames():
    cfg, built = _default("tvp")
    s = _shapes(_plan(built))
    assert s["pixel_values"] == (1, cfg.num_frames, 3, cfg.max_img_size, cfg.max_img_size)


def test_merge_sizes_one_per_image():
    _, built = _default("video_llama_3_vision")
    assert "merge_sizes" in inspect.signature(built.model.forward).parameters
    assert _shapes(_plan(built))["merge_sizes"] == (1,)


def test_windowed_backbone_image_in_whole_windows():
    cfg, built = _default("rf_detr")
    bc = cfg.backbone_config
    unit = bc.patch_size * bc.num_windows
    h, w = _shapes(_plan(built))["pixel_values"][-2:]
    assert h % unit == 0 and w % unit == 0 and h >= cfg.backbone_config.image_size


def test_alternatives_from_the_first_layer_and_config():
    cfg, built = _default("granite_speech5_encoder")
    # Its input layer takes num_mel_bins * 4 values (deltas, frames stacked in pairs).
    assert built.model.input_linear.in_features == cfg.num_mel_bins * 4
    assert any(s[-1] == cfg.num_mel_bins * 4 for s in _alt_shapes(_plan(built)))

    cfg, built = _default("kyutai_speech_to_text")
    plan = _plan(built)
    seq = _shapes(plan)["input_ids"][1]
    assert (1, seq, cfg.num_codebooks + 1) in _alt_shapes(plan)  # a text stream + one per codebook

    cfg, built = _default("kimi_k25_vision")
    p = cfg.patch_size
    plan = _plan(built)
    n = _shapes(plan)["pixel_values"][0]
    assert (n, 3, p, p) in _alt_shapes(plan)  # its patch embedding is a Conv2d over p x p patches


@pytest.mark.parametrize("model_type", ["granite_speech5_encoder", "oneformer"])
def test_traces_forward_and_backward(model_type):
    from neurarch.trace import trace

    _, built = _default(model_type)
    res = trace(built.model, _plan(built), backward=True)
    assert res.forward.ok, res.forward.error
    assert res.backward is not None and res.backward.ok, res.backward


def test_features_beside_raw_audio_share_its_length():
    cfg, built = _default("xcodec2")
    s = _shapes(_plan(built))
    samples = s["input_values"][-1]
    stride = math.prod(cfg.downsampling_ratios)  # 2 * 2 * 4 * 4 * 5 = 320 samples per frame
    assert s["input_features"][1] == samples // stride


def test_streaming_audio_text_alternative_one_token_per_frames():
    cfg, built = _default("voxtral_realtime")
    plan = _plan(built)
    frames = _shapes(plan)["input_features"][-1]
    assert (1, frames // cfg.audio_length_per_tok) in _alt_shapes(plan)


def test_lone_qformer_gets_encoder_states_of_its_width():
    cfg, built = _default("blip_2_qformer")
    assert _shapes(_plan(built))["encoder_hidden_states"][-1] == cfg.encoder_hidden_size


def test_prompt_masks_like_the_prompt_image_and_stacked_alternative():
    cfg, built = _default("seggpt")
    plan = _plan(built)
    s = _shapes(plan)
    assert s["prompt_masks"] == s["prompt_pixel_values"]
    h, w = cfg.image_size  # [896, 448]: the prompt above the input
    assert (1, 3, h // 2, w) in _alt_shapes(plan)


def test_speech_model_without_prenet_alternative_vectors():
    cfg, built = _default("speecht5")
    plan = _plan(built)
    assert any(len(s) == 3 and s[-1] == cfg.hidden_size for s in _alt_shapes(plan))


def test_axial_positions_filled_and_training_mode_backward():
    from neurarch.trace import trace

    cfg, built = _default("reformer")
    plan = _plan(built)
    assert _shapes(plan)["input_ids"] == (1, math.prod(cfg.axial_pos_shape))  # 64 * 64 = 4096
    # Reformer's reversible layers refuse a backward pass in eval mode: traced in training mode.
    res = trace(built.model, plan, backward=True)
    assert res.forward.ok and res.backward is not None and res.backward.ok, (res.forward, res.backward)
    assert any("training mode" in h for h in plan.how)
    assert not built.model.training  # left as built


def test_inputs_named_by_the_models_embed_layers():
    cfg, built = _default("decision_transformer")
    s = _shapes(_plan(built))
    n = s["states"][1]
    assert s["states"] == (1, n, cfg.state_dim)  # embed_state: Linear(state_dim, hidden)
    assert s["actions"] == (1, n, cfg.act_dim)  # embed_action: Linear(act_dim, hidden)
    assert s["returns_to_go"] == (1, n, 1)  # embed_return: Linear(1, hidden)
    assert s["timesteps"] == (1, n)  # embed_timestep: Embedding(max_ep_len, hidden)
    assert 3 * n <= cfg.n_positions  # (return, state, action) per step share the positions
    assert "return_dict" not in s


def test_draft_model_block_and_multi_layer_context():
    cfg, built = _default("muse_glimmer_assistant")
    s = _shapes(_plan(built))
    # Its docstring: noise_embeds [batch, config.block_size, dim];
    # context_hidden_states [batch, n, dim * len(config.target_layer_ids)].
    assert s["noise_embeds"] == (1, cfg.block_size, cfg.hidden_size)
    assert s["context_hidden_states"][-1] == cfg.hidden_size * len(cfg.target_layer_ids)
