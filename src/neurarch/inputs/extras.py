"""Inputs of their own kind: time series, layout boxes, and required sequences of vectors."""

from __future__ import annotations

import torch
from torch import nn

from ..introspect import as_int, config_get
from .audio import audio_stride
from .context import _Ctx, _first_module
from .defaults import DEFAULT_AUDIO_SAMPLES, DEFAULT_TIME_STEPS
from .types import Alternative, TensorSpec


def _time_series(ctx: _Ctx) -> list[TensorSpec]:
    cfg = ctx.cfg
    ctxlen = as_int(config_get(cfg, "context_length", "context_len", "sequence_length", "seq_len"), None)
    lags = config_get(cfg, "lags_sequence")
    if not ctxlen:
        ctxlen = DEFAULT_TIME_STEPS
        ctx.how.append(f"{ctxlen} time steps: neurarch's default")
    else:
        ctx.how.append(f"{ctxlen} time steps of context from the config")
    steps = ctxlen + (max(lags) if lags else 0)
    channels = as_int(config_get(cfg, "num_input_channels", "input_size", "num_channels"), 1) or 1
    ctx.seq = steps
    past = (ctx.b, steps) if lags is not None and channels == 1 else (ctx.b, steps, channels)
    if lags is None and config_get(cfg, "num_input_channels") is None and channels == 1:
        past = (ctx.b, steps)
    specs = [TensorSpec("past_values", past)]
    n_time = as_int(config_get(cfg, "num_time_features"), 0) or 0
    pred = as_int(config_get(cfg, "prediction_length", "horizon_length"), None)
    for name in ctx.params:
        if name == "past_time_features":
            specs.append(TensorSpec(name, (ctx.b, steps, max(n_time, 1))))
        elif name == "past_observed_mask":
            specs.append(TensorSpec(name, past, fill=1.0))
        elif name == "future_time_features" and pred:
            specs.append(TensorSpec(name, (ctx.b, pred, max(n_time, 1))))
        elif name == "static_categorical_features" and (as_int(config_get(cfg, "num_static_categorical_features"), 0) or 0) > 0:
            specs.append(TensorSpec(name, (ctx.b, cfg.num_static_categorical_features), torch.long, high=min(cfg.cardinality or [1])))
        elif name == "static_real_features" and (as_int(config_get(cfg, "num_static_real_features"), 0) or 0) > 0:
            specs.append(TensorSpec(name, (ctx.b, cfg.num_static_real_features)))
        elif name == "past_values_padding":
            specs.append(TensorSpec(name, (ctx.b, steps), fill=0.0))
        elif name == "freq":
            specs.append(TensorSpec(name, (ctx.b, 1), torch.long, fill=0))
    return specs


def _bbox(ctx: _Ctx, seq: int) -> TensorSpec:
    # One valid box [x0, y0, x1, y1] on the 0-1000 grid for every token (a quad of 4 points
    # when the config's dim_bbox says 8).
    n = as_int(config_get(ctx.cfg, "dim_bbox"), 4) or 4
    box = [0, 0, 1000, 1000] * (n // 4)
    return TensorSpec("bbox", (ctx.b, seq, n), torch.long, data=[[box] * seq] * ctx.b, text=True)


def _vectors(ctx: _Ctx, name: str, seq: int) -> list[TensorSpec]:
    """A required sequence of vectors (query embeddings, latents, hidden states): ``(batch, n, width)``
    with the config's width, and ``(batch, width, n)`` as the alternative (convolutional decoders)."""
    width = as_int(config_get(ctx.cfg, "hidden_size", "d_model", "latent_dim", "embed_dim", "n_embd", "dim"))
    if not width:
        return []
    n = as_int(config_get(ctx.cfg, "num_query_tokens", "num_latents")) if "query" in name or "latent" in name else None
    n = n or seq
    block = as_int(config_get(ctx.cfg, "block_size"))
    if block and "context" not in name and any(k.startswith("context") for k in ctx.params) and block < n:
        # A block-diffusion draft model: one block of block_size positions to denoise, beside its context.
        ctx.how.append(f"{name}: one block of {block} vectors of the config's width {width} (the config's block_size), beside the context")
        return [TensorSpec(name, (ctx.b, block, width))]
    layers = config_get(ctx.cfg, "target_layer_ids")
    if "context" in name and isinstance(layers, (list, tuple)) and len(layers) > 1:
        # A draft model reads the target model's hidden states from several layers, concatenated.
        ctx.how.append(f"{name}: {n} vectors of {len(layers)} target layers x the width {width} (the config's target_layer_ids)")
        return [TensorSpec(name, (ctx.b, n, width * len(layers)))]
    ctx.how.append(f"{name}: {n} vectors of the config's width {width}")
    ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, width, n))], f"{name} laid out (batch, width, length)"))
    # A convolutional encoder named its input hidden_states but takes a signal (VibeVoice's tokenizer):
    # the channels of its first Conv1d, one second of samples.
    conv = _first_module(ctx.model, (nn.Conv1d,))
    if conv is not None and conv.in_channels != width:
        samples, stride = ctx.opts.seq_len or DEFAULT_AUDIO_SAMPLES, audio_stride(ctx.cfg) or 1
        samples = -(-samples // stride) * stride
        ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, conv.in_channels, samples))], f"{name} as a signal of {conv.in_channels} channel(s) x {samples} samples for the first Conv1d"))
    return [TensorSpec(name, (ctx.b, n, width))]
