"""The work an input plan asks for, checked against :mod:`neurarch.limits` before the trace.

Fake tensors hold no memory, so an absurd input does not exhaust the machine; it
overflows instead (a tensor past 2^63 bytes is refused deep inside torch, one
mode at a time) or gives a plan no card or cluster could run.  The planner
therefore refuses, in one line naming the options, an input whose largest
activation or whose step's hidden states are past the bounds (:func:`check_plan`).

What is counted, per input stream (token ids, images, audio, vectors), in fp32:

* the widest layer output: ``batch x positions x width``, the width being the
  largest of the config's hidden, intermediate and vocabulary sizes (the logits);
* under eager attention, the scores: ``batch x heads x positions^2``;
* every layer's hidden states: ``batch x positions x hidden x layers``.

A position is a token, an image patch (``patch_size`` from the config; a
convolutional net without one counts every pixel, an over-estimate), a video
frame's patches, an audio frame or sample.  Only what the plan asks for counts,
never the sizes a config advertises (``max_position_embeddings``).
"""

from __future__ import annotations

import math
from typing import Any

from .. import limits
from ..introspect import config_max, nested_configs
from ..options import InputOptions
from .types import InputPlan, TensorSpec

WIDTHS = (
    "hidden_size",
    "d_model",
    "n_embd",
    "embed_dim",
    "dim",
    "hidden_dim",
    "hidden_sizes",
    "embedding_size",
    "intermediate_size",
    "d_ff",
    "n_inner",
    "ffn_dim",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "moe_intermediate_size",
    "vocab_size",
)
HIDDEN = ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "hidden_dim", "hidden_sizes")
LAYERS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers", "num_encoder_layers", "num_decoder_layers", "depth", "depths")
HEADS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads", "decoder_attention_heads")
_PIXEL_NAMES = ("pixel_values", "pixel_values_videos", "image", "images", "flattened_patches")


def _stream(t: TensorSpec, patch: int, batch: int) -> limits.Stream | None:
    """Batch and positions per sample of one input tensor; None for companions (masks, grids, sizes)."""
    if t.data is not None or t.fill is not None or t.run_codes or not t.shape:
        return None
    shape = t.shape
    pixels = t.name in _PIXEL_NAMES or t.name.endswith("pixel_values")
    if not t.dtype.is_floating_point:
        if t.high is None or len(shape) < 2:
            return None
        return limits.Stream(t.name, shape[0], shape[1], "tokens")  # (batch, tokens[, codebooks])
    if pixels and len(shape) >= 4:  # (batch, [frames,] channels, H, W)
        frames = math.prod(shape[1:-3]) if len(shape) > 4 else 1
        h, w = shape[-2], shape[-1]
        if patch > 1:
            return limits.Stream(t.name, shape[0], frames * max(h // patch, 1) * max(w // patch, 1), "patches")
        return limits.Stream(t.name, shape[0], frames * h * w, "pixels")
    if pixels and len(shape) == 2 and shape[0] % batch == 0:  # flat patches: (batch x patches, values)
        return limits.Stream(t.name, batch, shape[0] // batch, "patches")
    if len(shape) == 3:  # (batch, positions, width) vectors and patch lists, audio features either way round
        return limits.Stream(t.name, shape[0], max(shape[1], shape[2]), "positions")
    if len(shape) > 3:
        return limits.Stream(t.name, shape[0], math.prod(shape[1:-1]), "positions")
    return limits.Stream(t.name, shape[0], math.prod(shape[1:]), "samples")  # raw audio, plain signals


def _eager(cfg: Any) -> bool:
    return any(getattr(c, "_attn_implementation", None) == "eager" for _, c in nested_configs(cfg))


def asked(opts: InputOptions) -> tuple[str, ...]:
    """The options that set the input, as a user typed them."""
    out = []
    if opts.batch != 1:
        out.append(f"--batch {opts.batch:,}")
    for name in ("seq_len", "decoder_seq_len", "image_size"):
        v = getattr(opts, name)
        if v is not None:
            out.append(f"--{name.replace('_', '-')} {v:,}")
    if opts.input_shape is not None:
        out.append(f"--input-shape {','.join(map(str, opts.input_shape))}")
    return tuple(out)


def plan_work(plan: InputPlan, cfg: Any, opts: InputOptions, attention: str | None = None) -> limits.Work:
    """The :class:`~neurarch.limits.Work` of ``plan`` for a model of config ``cfg``.

    ``attention``: the attention implementation the step runs (``"eager"`` counts the
    scores); None reads it from the config.
    """
    patch, _ = config_max(cfg, "patch_size", "spatial_patch_size") if cfg is not None else (0, "")
    streams = tuple(s for t in plan.tensors if (s := _stream(t, patch, plan.batch)) is not None)
    if cfg is None:
        return limits.Work(streams, asked(opts))
    width, width_field = config_max(cfg, *WIDTHS)
    hidden, hidden_field = config_max(cfg, *HIDDEN)
    layers, layers_field = config_max(cfg, *LAYERS, combine=sum)
    eager = attention == "eager" if attention is not None else _eager(cfg)
    heads, heads_field = config_max(cfg, *HEADS) if eager else (0, "")
    return limits.Work(streams, asked(opts), width, width_field, hidden, hidden_field, layers, layers_field, heads or None, heads_field)


def check_plan(plan: InputPlan, cfg: Any, opts: InputOptions, attention: str | None = None) -> limits.Work:
    """Raise :class:`~neurarch.errors.LimitError` when ``plan`` asks for absurd activations; else its work."""
    work = plan_work(plan, cfg, opts, attention)
    limits.check_work(work)
    return work


__all__ = ["asked", "check_plan", "plan_work"]
