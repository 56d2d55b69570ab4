"""Audio: feature frames (bins and frames, either layout) and raw samples (whole encoder strides)."""

from __future__ import annotations

import math
from typing import Any

from torch import nn

from ..introspect import as_int, config_find, config_get, max_positions
from .context import _Ctx, _first_module, _mask
from .defaults import DEFAULT_AUDIO_FRAMES, DEFAULT_AUDIO_SAMPLES, DEFAULT_SEQ_LEN_ENCODER
from .types import Alternative, TensorSpec

_AUDIO_FEATURES = ("input_features", "audio_features", "audio_mel", "input_audio_features")


_AUDIO_VALUES = ("input_values", "audio_values", "waveform")


def _audio_feature_size(cfg: Any) -> int | None:
    f = config_find(
        cfg,
        "feature_projection_input_dim",
        "input_feat_size",
        "num_mel_bins",
        "n_mels",
        "feature_size",
        "mel_bins",
        "num_mels",
        "input_feat_per_channel",
        "input_dim",
        subs=("audio_config", "encoder_config", "encoder"),
    )
    f = as_int(f)
    ch = as_int(config_find(cfg, "input_channels", subs=("audio_config",)), 1) or 1
    if f and config_get(cfg, "input_feat_per_channel") is not None:
        f *= ch
    # Frames stacked into one feature vector (low-frame-rate front ends).
    stack = as_int(config_find(cfg, "num_stacked_frames", "stack_frames", "lfr_m", subs=("audio_config", "encoder_config")), 1) or 1
    return f * stack if f else f


def _audio_features(ctx: _Ctx, name: str) -> list[TensorSpec]:
    f = _audio_feature_size(ctx.cfg) or 80
    src = as_int(config_find(ctx.cfg, "max_source_positions", subs=("audio_config", "encoder_config", "encoder")))
    conv = _first_module(ctx.model, (nn.Conv1d, nn.Linear, nn.Conv2d), lambda m: getattr(m, "in_channels", getattr(m, "in_features", None)) == f)
    channels_first = isinstance(conv, nn.Conv1d)
    raw = next((t for t in ctx.specs.values() if t.name in _AUDIO_VALUES), None)
    stride = audio_stride(ctx.cfg)
    if raw is not None and stride:  # features of the same audio as the raw samples beside them (XCodec2)
        frames, why = max(raw.shape[-1] // stride, 1), f"one per {stride} samples of the raw audio"
    elif ctx.opts.seq_len:
        frames, why = ctx.opts.seq_len, "--seq-len"
    elif src and channels_first:
        frames, why = 2 * src, "2 x max_source_positions"
    else:
        frames, why = DEFAULT_AUDIO_FRAMES, "neurarch's default"
    ctx.seq = frames
    shape = (ctx.b, f, frames) if channels_first else (ctx.b, frames, f)
    ctx.how.append(f"audio features {f} bins x {frames} frames ({why}), " + ("bins first" if channels_first else "frames first"))
    # The layout is a guess from the first layer that takes f channels (some models transpose
    # inside): the other one is kept as an alternative.
    other = (ctx.b, frames, f) if channels_first else (ctx.b, f, frames)
    ctx.alternatives.append(Alternative([TensorSpec(name, other)], f"audio features laid out {'frames' if channels_first else 'bins'} first (the other layout failed)"))
    ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, 1, frames, f))], "audio features as a one-channel image (the 3-D layouts failed)"))
    # The front end may stack frames (or add deltas) before its first layer: that layer's width,
    # when it is a small multiple of the bins and no layer takes the bins themselves.
    first = _first_module(ctx.model, (nn.Linear, nn.Conv1d))
    width = getattr(first, "in_features", getattr(first, "in_channels", None)) if first is not None else None
    if conv is None and width and width != f and width % f == 0 and width // f <= 8:
        lay = (ctx.b, width, frames) if isinstance(first, nn.Conv1d) else (ctx.b, frames, width)
        ctx.alternatives.append(Alternative([TensorSpec(name, lay)], f"audio features {width} wide, the width the first input layer takes ({width // f} x {f} bins)"))
    if _audio_feature_size(ctx.cfg) is None:  # the config names no bin count: the other common one
        ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, frames, 128))], "audio features of 128 mel bins (80 failed; the config names no bin count)"))
    specs = [TensorSpec(name, shape)]
    # Its frame mask, when the forward takes one (some models need it though it is optional).
    for mask in ctx.params:
        if mask.endswith("mask") and (mask.startswith(name) or mask in ("feature_attention_mask", "audio_mel_mask", "audio_attention_mask")):
            specs.append(_mask(ctx, mask, (ctx.b, frames)))
    return specs


def _audio_values(ctx: _Ctx, name: str) -> list[TensorSpec]:
    f = as_int(config_find(ctx.cfg, "num_mel_bins"))
    length = as_int(config_get(ctx.cfg, "max_length"))
    if f and length:  # a spectrogram model that calls its input input_values (AST)
        ctx.how.append(f"spectrogram {length} frames x {f} mel bins from the config")
        ctx.seq = length
        return [TensorSpec(name, (ctx.b, length, f))]
    samples = ctx.opts.seq_len or DEFAULT_AUDIO_SAMPLES
    ctx.how.append(f"audio {samples} samples" + (" from --seq-len" if ctx.opts.seq_len else " (one second at 16 kHz, neurarch's default)"))
    samples = _whole_strides(ctx, samples)
    ctx.seq = samples
    # A model built without its speech pre-net takes hidden states under the same name (SpeechT5Model):
    # vectors of the config's width, for the decoder too when it takes decoder_input_values.
    width = as_int(config_get(ctx.cfg, "hidden_size"))
    if width and name == "input_values" and "decoder_input_values" in ctx.params:
        n = min(DEFAULT_SEQ_LEN_ENCODER, max_positions(ctx.cfg) or DEFAULT_SEQ_LEN_ENCODER)
        vecs = [TensorSpec(name, (ctx.b, n, width)), TensorSpec("decoder_input_values", (ctx.b, n, width))]
        ctx.alternatives.append(Alternative(vecs, f"input_values and decoder_input_values as {n} vectors of the config's width {width} (a model without its speech pre-net)"))
    ch = as_int(config_get(ctx.cfg, "audio_channels", "num_channels", "channels"))
    if ch:
        ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, samples))], "audio as (batch, samples) (the channel layout failed)"))
        return [TensorSpec(name, (ctx.b, ch, samples))]
    ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, 1, samples))], "audio as (batch, 1 channel, samples) (the flat layout failed)"))
    return [TensorSpec(name, (ctx.b, samples))]


def audio_stride(cfg: Any) -> int | None:
    """Samples per output frame of a strided raw-audio encoder: the product of the config's
    per-stage ``downsampling_ratios`` (or ``patch_sizes``, Muse-Spark's stages), when it names them."""
    for name in ("downsampling_ratios", "patch_sizes"):
        v = config_get(cfg, name)
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) and x > 0 for x in v):
            return math.prod(v)
    return None


def _whole_strides(ctx: _Ctx, samples: int) -> int:
    """``samples`` rounded up to whole strides of the encoder (some refuse a partial frame)."""
    stride = audio_stride(ctx.cfg)
    if stride and stride > 1 and samples % stride:
        rounded = -(-samples // stride) * stride
        ctx.how.append(f"audio lengthened to {rounded} samples: whole strides of {stride} (the product of the config's per-stage strides)")
        return rounded
    return samples
