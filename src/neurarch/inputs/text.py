"""Text: how many tokens, which ids, and the placeholder runs of a multimodal model's text."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..introspect import as_int, config_find, config_get, max_positions, special_ids, vocab_size
from .context import _Ctx, _is_decoder
from .defaults import DEFAULT_SEQ_LEN_DECODER, DEFAULT_SEQ_LEN_ENCODER, DEFAULT_SEQ_LEN_STEPWISE
from .types import TensorSpec, TokenRun


def _text_seq(ctx: _Ctx, text_cfg: Any = None, decoder: bool | None = None) -> int:
    if ctx.seq is not None and text_cfg is None:
        return ctx.seq
    c = text_cfg if text_cfg is not None else ctx.text_cfg
    cap = max_positions(c) or max_positions(ctx.cfg)
    if ctx.opts.seq_len is not None:
        if cap is not None and ctx.opts.seq_len > cap:
            ctx.how.append(f"--seq-len {ctx.opts.seq_len} exceeds the model's {cap} positions")
        else:
            ctx.how.append(f"seq_len {ctx.opts.seq_len} from --seq-len")
        seq = ctx.opts.seq_len
    else:
        dec = _is_decoder(ctx.model, ctx.cfg) if decoder is None else decoder
        default = DEFAULT_SEQ_LEN_DECODER if dec else DEFAULT_SEQ_LEN_ENCODER
        step = stepwise_recurrent(c) or stepwise_recurrent(ctx.cfg)
        axial = config_get(c, "axial_pos_shape") if config_get(c, "axial_pos_embds") else None
        if isinstance(axial, (list, tuple)) and axial and all(isinstance(x, int) and x > 0 for x in axial):
            # Axial position embeddings (Reformer) must be filled exactly by a training sequence.
            seq = math.prod(axial)
            ctx.how.append(f"seq_len {seq}: the product of the config's axial_pos_shape {list(axial)} (a training sequence fills it)")
        elif step:
            ctx.how.append(f"seq_len {DEFAULT_SEQ_LEN_STEPWISE}: neurarch's default for {step} (--seq-len overrides)")
            seq = DEFAULT_SEQ_LEN_STEPWISE
        elif cap is not None and cap < default:
            ctx.how.append(f"seq_len {cap}: the model's max positions (default {default} capped)")
            seq = cap
        else:
            ctx.how.append(f"seq_len {default}: neurarch's default for {'decoders' if dec else 'encoders'}")
            seq = default
    if text_cfg is None:
        ctx.seq = seq
    return seq


_SCAN_STATE = ("state_size", "mamba_d_state", "ssm_state_size")


_SCAN_CHUNK = ("chunk_size", "mamba_chunk_size")


def stepwise_recurrent(cfg: Any) -> str | None:
    """Why a model's reference PyTorch code runs one step per token, or None.

    Told from the config alone: a selective-scan state (``state_size``,
    ``mamba_d_state``, ``ssm_state_size``) with no chunk size (Mamba-2-style
    models scan in chunks of ``chunk_size`` and are not stepwise), or an RWKV
    time mix (``attention_hidden_size`` with no attention heads).
    """
    if cfg is None:
        return None
    if config_get(cfg, *_SCAN_STATE) is not None and config_get(cfg, *_SCAN_CHUNK) is None:
        return "a selective scan stepped token by token (a scan state size, no chunk size)"
    if config_get(cfg, "attention_hidden_size") is not None and config_get(cfg, "num_attention_heads", "num_heads", "n_head") is None:
        return "a time-mixing recurrence stepped token by token (attention_hidden_size, no attention heads)"
    return None


def _tokens(ctx: _Ctx, name: str, seq: int | None = None, cfg: Any = None) -> TensorSpec:
    c = cfg or ctx.text_cfg
    seq = seq or _text_seq(ctx)
    return TensorSpec(name, (ctx.b, seq), torch.long, vocab_size(c), avoid=special_ids(ctx.cfg), text=True)


def _token_runs(ctx: _Ctx, modality: str) -> list[TokenRun]:
    names = {"image": ("image_token_id", "image_token_index"), "video": ("video_token_id", "video_token_index"), "audio": ("audio_token_id", "audio_token_index")}[modality]
    tid = as_int(config_find(ctx.cfg, *names, subs=("text_config",)))
    return [TokenRun(tid, None, modality)] if tid is not None else []
