"""Attention geometry, kernels, and sequence length against the positions the model has."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn
else:  # imported on first use: listing the rules must not import torch
    from ..._lazy import nn

from ..context import CheckContext, NotApplicable
from ..graph import attention_rows, config_get, fmt_bytes, module_config, sub_configs
from ..registry import Hit, rule

# -- kv-heads-divide-heads ---------------------------------------------------------------------


@rule(
    "kv-heads-divide-heads",
    severity="error",
    summary="Grouped-query attention whose key/value heads do not divide the query heads.",
    requires=None,
)
def kv_heads_divide_heads(ctx: CheckContext):
    for label, cfg in sub_configs(ctx.config):
        heads = config_get(cfg, "num_attention_heads", "n_head")
        kv = config_get(cfg, "num_key_value_heads", "num_kv_heads")
        if not isinstance(heads, int) or not isinstance(kv, int) or kv <= 0 or heads % kv == 0:
            continue
        options = [d for d in range(1, heads + 1) if heads % d == 0]
        failed = ""
        if not ctx.forward_ok and ctx.report.forward_pass.error:
            failed = f" This is why the forward pass failed: {ctx.report.forward_pass.error}"
        yield Hit(
            node=None,
            message=(
                f"{label}num_attention_heads = {heads} is not a multiple of {label}num_key_value_heads = {kv}: grouped-query "
                f"attention shares each key/value head among heads / kv_heads = {heads}/{kv} = {heads / kv:.2f} query heads, "
                f"which must be a whole number.{failed}"
            ),
            fix=f"Set num_key_value_heads to a divisor of {heads}: {', '.join(map(str, options))}.",
        )


# -- head-dim-kernel-support ----------------------------------------------------------------------

FLASH_MAX_HEAD_DIM = 256
KERNEL_ALIGNMENT = 8  # 16-bit inputs: 128-bit alignment = 8 elements


@rule(
    "head-dim-kernel-support",
    severity="warn",
    summary="Attention head dimension that the fused attention kernels (Flash, memory-efficient) do not take.",
)
def head_dim_kernel_support(ctx: CheckContext):
    seen: set[int] = set()
    for a in attention_rows(ctx):
        d = a.head_dim
        if d is None or d in seen:
            continue
        seen.add(d)
        problems = []
        if d > FLASH_MAX_HEAD_DIM:
            problems.append(
                f"above {FLASH_MAX_HEAD_DIM}, the largest FlashAttention-2 and PyTorch's flash SDPA backend accept, "
                f"so SDPA can use only the memory-efficient kernel (and transformers repeats the KV heads for it)"
            )
        if d % KERNEL_ALIGNMENT:
            problems.append(
                f"not a multiple of {KERNEL_ALIGNMENT}: in fp16/bf16 PyTorch's memory-efficient and cuDNN SDPA kernels refuse it, "
                f"the flash kernel pads it to {-(-d // KERNEL_ALIGNMENT) * KERNEL_ALIGNMENT} (wasted work), and GPUs without "
                f"FlashAttention fall back to the math kernel, which materialises the full score matrix"
            )
        if not problems:
            continue
        heads = f", {a.heads} heads" if a.heads else ""
        yield Hit(
            node=a.node.name,
            message=f"Attention head_dim is {d} (`{a.node.name}`{heads}): " + "; and ".join(problems) + ".",
            fix=_head_fix(ctx, a, d),
        )


def _head_fix(ctx: CheckContext, a, d: int) -> str:
    hidden = config_get(module_config(a.module, ctx.config), "hidden_size", "n_embd", "d_model")
    if isinstance(hidden, int) and hidden > 0:
        good = [h for h in range(1, hidden + 1) if hidden % h == 0 and (hidden // h) % KERNEL_ALIGNMENT == 0 and hidden // h <= FLASH_MAX_HEAD_DIM]
        if good:
            pick = min(good, key=lambda h: abs(h - (a.heads or h)))
            return f"Choose heads so head_dim is a multiple of {KERNEL_ALIGNMENT} and at most {FLASH_MAX_HEAD_DIM} (64 or 128 are best): with hidden size {hidden}, {pick} heads give head_dim {hidden // pick}."
    return f"Choose a head_dim that is a multiple of {KERNEL_ALIGNMENT} and at most {FLASH_MAX_HEAD_DIM} (64 or 128 are best)."


# -- eager-attention --------------------------------------------------------------------------------


@rule(
    "eager-attention",
    severity="warn",
    summary="Attention that materialises the full seq x seq score matrix (eager) where SDPA/Flash would not.",
)
def eager_attention(ctx: CheckContext):
    rows = [a for a in attention_rows(ctx) if a.implementation == "eager"]
    if not rows:
        return
    per = 2 if (ctx.precision or "").lower().startswith(("bf16", "fp16")) else 4
    total = 0
    worst = None
    for a in rows:
        shape = a.node.output_shape or []
        s = shape[-2] if len(shape) >= 2 else None
        if s is None or a.heads is None:
            continue
        n = ctx.batch * a.heads * s * s * max(a.node.calls, 1)
        total += n
        if worst is None or n > worst[1]:
            worst = (a, n, s)
    if worst is None:
        raise NotApplicable("eager attention, but the rows give no sequence length or head count")
    a, n, s = worst
    cls = type(a.module).__name__
    model_cls = ctx.model_class
    supports = _supported_kernels(ctx)
    fix = (
        f"Load the model with attn_implementation='{supports[0]}' ({model_cls} supports {', '.join(supports)})."
        if supports
        else f"{model_cls} has no SDPA or FlashAttention path in this transformers version: keep sequences short, "
        f"checkpoint the attention layers (gradient_checkpointing_enable()), or use a model family that has one."
    )
    yield Hit(
        node=a.node.name,
        message=(
            f"{len(rows)} attention layers ({cls}) run the eager kernel: each materialises the batch x heads x seq x seq "
            f"score matrix, {ctx.batch} x {a.heads} x {s} x {s} = {n:,} scores ({fmt_bytes(n * per)} at {per} bytes) for "
            f"`{a.node.name}`, {fmt_bytes(total * per)} over all layers, and training keeps the softmax of each for the "
            f"backward pass. SDPA and FlashAttention compute the same result in tiles without storing it."
        ),
        fix=fix,
    )


def _supported_kernels(ctx: CheckContext) -> list[str]:
    cls = type(ctx.model)
    out = []
    if getattr(cls, "_supports_sdpa", False):
        out.append("sdpa")
    if getattr(cls, "_supports_flash_attn", False) or getattr(cls, "_supports_flash_attn_2", False):
        out.append("flash_attention_2")
    return out


# -- positions ------------------------------------------------------------------------------------------

_POSITION_TABLE = re.compile(r"(^|\.)(wpe|position_embeddings?|embed_positions|pos_embed\w*|positional_embedding)$")
_VISION = re.compile(r"vision|visual|image|patch", re.I)  # image position tables are indexed by patches, not tokens


def _token_lengths(ctx: CheckContext) -> dict[str, int]:
    """Length of every token-id input (input_ids, decoder_input_ids ...)."""
    out = {}
    for t in ctx.report.input.tensors if ctx.report.input else []:
        if t.dtype in ("int64", "int32", "long") and len(t.shape) == 2:
            out[t.name] = t.shape[1]
    return out


def _position_tables(model: nn.Module) -> list[tuple[str, nn.Embedding, int]]:
    """(name, module, usable positions) of learned absolute position tables."""
    out = []
    for name, m in model.named_modules():
        if isinstance(m, nn.Embedding) and _POSITION_TABLE.search(name) and not _VISION.search(name):
            offset = getattr(m, "offset", 0)  # BART/OPT keep 2 rows before position 0
            offset = offset if isinstance(offset, int) else 0
            out.append((name, m, m.num_embeddings - offset))
    return out


def _has_tokens(ctx: CheckContext):
    return None if _token_lengths(ctx) else "the input has no token ids"


@rule(
    "seq-beyond-position-table",
    severity="error",
    summary="More tokens than the learned position table has rows (an index error on a real device).",
    applies=_has_tokens,
    requires=None,
)
def seq_beyond_position_table(ctx: CheckContext):
    lengths = _token_lengths(ctx)
    for name, _m, usable in _position_tables(ctx.model):
        is_decoder = "decoder" in name
        candidates = {k: v for k, v in lengths.items() if ("decoder" in k) == is_decoder} or lengths
        tensor, seq = max(candidates.items(), key=lambda kv: kv[1])
        if seq <= usable:
            continue
        yield Hit(
            node=name,
            message=(
                f"`{name}` holds {usable:,} learned positions and `{tensor}` has {seq:,} tokens: positions {usable:,} to "
                f"{seq - 1:,} index past the table. The fake-tensor trace cannot see this (no values), but on a real device "
                f"it is an IndexError on CPU and a device-side assert on CUDA."
            ),
            fix=f"Keep inputs to at most {usable:,} tokens (truncate, or split into windows), or grow the table and train the new positions.",
        )


def _rope_scaling(cfg) -> str | None:
    """The rope type when RoPE scaling is configured, else None."""
    params = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None)
    if isinstance(params, dict):
        rt = params.get("rope_type") or params.get("type")
        if rt and rt != "default":
            return str(rt)
    return None


def _rotary(ctx: CheckContext):
    if not any("Rotary" in type(m).__name__ for m in ctx.model.modules()):
        return "the model has no rotary position embedding"
    return _has_tokens(ctx)


@rule(
    "seq-beyond-trained-context",
    severity="warn",
    summary="Rotary model run at more tokens than max_position_embeddings.",
    applies=_rotary,
    requires=None,
)
def seq_beyond_trained_context(ctx: CheckContext):
    seq = max(_token_lengths(ctx).values())
    for label, cfg in sub_configs(ctx.config):
        limit = config_get(cfg, "max_position_embeddings")
        if not isinstance(limit, int) or seq <= limit:
            continue
        scaling = _rope_scaling(cfg)
        how = (
            f"RoPE scaling is configured ({scaling}), but max_position_embeddings is where it was meant to stop"
            if scaling
            else "the rotary embedding has no scaling (rope_type default): positions past it are rotation angles the model never saw, and quality usually collapses there"
        )
        yield Hit(
            node=None,
            message=f"The input has {seq:,} tokens; the model was trained to {label}max_position_embeddings = {limit:,}: {how}.",
            fix=(
                f"Stay within {limit:,} tokens, or extend the context with RoPE scaling (rope_parameters "
                f"{{'rope_type': 'yarn' or 'linear' or 'dynamic', 'factor': {seq / limit:.2g}}}) and fine-tune at the new length."
            ),
        )
        return
