"""The input planner on real configs: shapes hand-derived from the config fields.

Each expected shape is written out from the config's own numbers (quoted in
the comment next to it), not from the planner's output.  Building on meta is
cheap, so these run in a few seconds; one test traces a vision-language model
to check that its text holds exactly as many image tokens as its features.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from neurarch.build import build_from_config
from neurarch.inputs import (
    DEFAULT_AUDIO_SAMPLES,
    DEFAULT_SEQ_LEN_DECODER,
    DEFAULT_SEQ_LEN_ENCODER,
    InputOptions,
    plan_inputs,
    special_ids,
)
from neurarch.sources.catalog import entries


def _default(model_type: str):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = CONFIG_MAPPING[model_type]()
        return build_from_config(cfg.to_dict(), f"default {model_type}")


def _catalog(model_id: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_from_config(entries()[model_id].config(), model_id)


def _shapes(built, **opts) -> dict[str, tuple[int, ...]]:
    plan = plan_inputs(built.model, built.config, InputOptions(**opts))
    return {t.name: tuple(t.shape) for t in plan.tensors}


# -- catalog configs ---------------------------------------------------------


def test_bert_encoder_default_length():
    # bert-base-uncased: an encoder, max_position_embeddings 512 = the encoder default 512.
    assert _shapes(_catalog("bert-base-uncased")) == {"input_ids": (1, 512)}
    assert DEFAULT_SEQ_LEN_ENCODER == 512


def test_gpt2_capped_by_positions():
    # gpt2: a decoder (default 2048 tokens) but n_positions 1024 caps it.
    assert _shapes(_catalog("gpt2")) == {"input_ids": (1, 1024)}


def test_llama_decoder_default_length_and_options():
    built = _catalog("meta-llama/Llama-3.1-8B-Instruct")
    # max_position_embeddings 131072 > 2048: the decoder default applies.
    assert _shapes(built) == {"input_ids": (1, DEFAULT_SEQ_LEN_DECODER)}
    assert _shapes(built, batch=4, seq_len=100) == {"input_ids": (4, 100)}


def test_vision_catalog_image_sizes():
    # resnet-50: no image_size in the config -> 224; dinov2-small: image_size 518; both 3 channels.
    assert _shapes(_catalog("microsoft/resnet-50")) == {"pixel_values": (1, 3, 224, 224)}
    assert _shapes(_catalog("facebook/dinov2-small")) == {"pixel_values": (1, 3, 518, 518)}
    assert _shapes(_catalog("facebook/dinov2-small"), image_size=224) == {"pixel_values": (1, 3, 224, 224)}


def test_bart_encoder_decoder():
    # bart-large-cnn: max_position_embeddings 1024 caps the 2048 decoder default, on both sides.
    assert _shapes(_catalog("facebook/bart-large-cnn")) == {"input_ids": (1, 1024), "decoder_input_ids": (1, 1024)}


# -- default configs of the other kinds --------------------------------------


def test_whisper_features_and_decoder():
    # WhisperConfig(): num_mel_bins 80, max_source_positions 1500 (the encoder halves the
    # frames: 2 * 1500 = 3000 frames, 30 s), max_target_positions 448 caps the decoder.
    assert _shapes(_default("whisper")) == {"input_features": (1, 80, 3000), "decoder_input_ids": (1, 448)}


def test_wav2vec2_raw_audio():
    # Wav2Vec2Config(): raw waveform, one second at 16 kHz.
    assert _shapes(_default("wav2vec2")) == {"input_values": (1, 16000)}
    assert DEFAULT_AUDIO_SAMPLES == 16000


def test_speech2text_features():
    # Speech2TextConfig(): input_feat_per_channel 80 x input_channels 1 = 80 features per frame.
    shapes = _shapes(_default("speech_to_text"))
    feats = shapes["input_features"]
    assert 80 in feats[1:] and feats[0] == 1


def test_clip_text_and_image():
    # CLIPConfig(): text max_position_embeddings 77; vision image_size 224, num_channels 3.
    assert _shapes(_default("clip")) == {"input_ids": (1, 77), "pixel_values": (1, 3, 224, 224)}


def test_t5_encoder_decoder_default():
    # T5Config(): generates text (the decoder default 2048) and has relative positions (no limit).
    assert _shapes(_default("t5")) == {"input_ids": (1, 2048), "decoder_input_ids": (1, 2048)}
    # t5-small's config.json says n_positions 512: that caps both.
    assert _shapes(_catalog("t5-small")) == {"input_ids": (1, 512), "decoder_input_ids": (1, 512)}


def test_videomae_video():
    # VideoMAEConfig(): num_frames 16, image_size 224, num_channels 3 -> (batch, frames, C, H, W).
    assert _shapes(_default("videomae")) == {"pixel_values": (1, 16, 3, 224, 224)}


def test_patchtst_time_series():
    # PatchTSTConfig(): context_length 32, num_input_channels 1 -> (batch, 32, 1).
    assert _shapes(_default("patchtst"))["past_values"] == (1, 32, 1)


def test_qwen2_vl_patches_and_grid():
    # Qwen2VLConfig().vision_config: patch_size 14, temporal_patch_size 2, in_channels 3,
    # spatial_merge_size 2; a 224 px image is 224/14 = 16 x 16 patches (a multiple of the merge 2),
    # each 3 * 2 * 14 * 14 = 1176 values; grid [t=1, 16, 16].
    built = _default("qwen2_vl")
    plan = plan_inputs(built.model, built.config, InputOptions())
    by = {t.name: t for t in plan.tensors}
    assert by["pixel_values"].shape == (256, 1176)
    assert by["image_grid_thw"].data == [[1, 16, 16]]
    assert by["input_ids"].runs[0].token_id == built.config.image_token_id == 151655


def test_token_ids_avoid_special_ids():
    # T5Config(): pad_token_id 0, eos_token_id 1 must never be drawn.
    built = _default("t5")
    assert {0, 1} <= set(special_ids(built.config))
    plan = plan_inputs(built.model, built.config, InputOptions())
    t = plan.tensors[0].real(torch.Generator().manual_seed(0))
    assert not ((t == 0) | (t == 1)).any()


@pytest.mark.slow
def test_vlm_text_holds_one_token_per_image_feature():
    # PaliGemma default: SigLIP 224 px, patch 14 -> (224/14)^2 = 256 image features per image;
    # the text must hold 256 image tokens (image_token_id) for the forward to run.
    from neurarch.trace import trace

    built = _default("paligemma")
    plan = plan_inputs(built.model, built.config, InputOptions())
    res = trace(built.model, plan)
    assert res.forward.ok, res.forward.error
    ids = next(t for t in plan.tensors if t.name == "input_ids")
    assert ids.runs[0].count == (224 // 14) ** 2
