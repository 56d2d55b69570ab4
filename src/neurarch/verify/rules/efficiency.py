"""Shapes that waste the hardware, and parameters that do nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn
else:  # imported on first use: listing the rules must not import torch
    from ..._lazy import nn

from ..context import CheckContext
from ..graph import LM_KINDS, linear_dims, width
from ..registry import Hit, rule

VOCAB_MULTIPLE = 64
TENSOR_CORE_MULTIPLE = 8
MISALIGNED_MIN_SHARE = 0.01  # report misaligned Linear layers only when they hold >= 1% of the parameters


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


# -- vocab-not-padded ---------------------------------------------------------------------------


def _lm_only(ctx: CheckContext):
    out = ctx.output
    if out.kind not in LM_KINDS:
        return f"the model outputs {out.kind}, not token logits"
    return None if out.head is not None else "no head row in the layer table"


@rule(
    "vocab-not-padded",
    severity="info",
    summary=f"Language-model vocabulary that is not a multiple of {VOCAB_MULTIPLE} (slow embedding and LM-head matmuls).",
    applies=_lm_only,
)
def vocab_not_padded(ctx: CheckContext):
    head = ctx.output.head
    mod = ctx.module(head.name)
    dims = linear_dims(mod) if mod is not None else None
    vocab = dims[1] if dims else width(head)
    if not vocab or vocab % VOCAB_MULTIPLE == 0:
        return
    padded = _round_up(vocab, VOCAB_MULTIPLE)
    hidden = dims[0] if dims else None
    extra = f" (+{(padded - vocab) * hidden:,} parameters, {100 * (padded - vocab) / vocab:.2f}% of the head)" if hidden else ""
    yield Hit(
        node=head.name,
        message=(
            f"The LM head `{head.name}` projects to {vocab:,} tokens = {VOCAB_MULTIPLE} x {vocab // VOCAB_MULTIPLE} + "
            f"{vocab % VOCAB_MULTIPLE}: not a multiple of {VOCAB_MULTIPLE}, so the largest matmul of the model runs on "
            f"ragged tiles. nanoGPT pads GPT-2's 50,257 to 50,304 'for efficiency'; Karpathy measured ~25% faster training from that alone."
        ),
        fix=(f"Pad the vocabulary to {padded:,}{extra}: model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of={VOCAB_MULTIPLE}). The tokenizer never emits the extra ids."),
    )


# -- dims-not-multiple-of-8 ----------------------------------------------------------------------------


def _linear_layers(ctx: CheckContext) -> list[tuple[str, int, int, int]]:
    """(name, in, out, parameters) of the Linear-like modules the forward pass called."""
    called = {n.name for n in ctx.nodes}
    out = []
    for name, m in ctx.model.named_modules():
        dims = linear_dims(m)
        if dims is None or getattr(m, "base_layer", None) is not None:
            continue
        # Linear rows inside attention/MLP blocks are not rows themselves: accept any module under a called row.
        if name not in called and not any(name.startswith(c + ".") for c in called):
            continue
        params = sum(p.numel() for p in m.parameters(recurse=False))
        out.append((name, dims[0], dims[1], params))
    return out


@rule(
    "dims-not-multiple-of-8",
    severity="info",
    summary=f"Linear layers whose input or output size is not a multiple of {TENSOR_CORE_MULTIPLE} (tensor cores).",
)
def dims_not_multiple_of_8(ctx: CheckContext):
    head = ctx.output.head
    input_width = _plain_input_width(ctx)
    bad = []
    for name, fan_in, fan_out, params in _linear_layers(ctx):
        dims = []
        if fan_in % TENSOR_CORE_MULTIPLE and fan_in != input_width:  # the data's own width is not the model's choice
            dims.append(fan_in)
        if fan_out % TENSOR_CORE_MULTIPLE and not (head is not None and name == head.name):  # classes / vocab: own rule
            dims.append(fan_out)
        if dims:
            bad.append((name, fan_in, fan_out, params))
    if not bad:
        return
    total = ctx.report.params.parameters or 1
    share = sum(b[3] for b in bad) / total
    if share < MISALIGNED_MIN_SHARE:
        return
    shown = ", ".join(f"{n} ({i} -> {o})" for n, i, o, _ in bad[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
    sizes = sorted({d for _, i, o, _ in bad for d in (i, o) if d % TENSOR_CORE_MULTIPLE and d != input_width})
    yield Hit(
        node=bad[0][0],
        message=(
            f"{len(bad)} Linear layers holding {sum(b[3] for b in bad):,} parameters ({100 * share:.0f}% of the model) have a size "
            f"that is not a multiple of {TENSOR_CORE_MULTIPLE}: {shown}. fp16/bf16 matmuls run on tensor cores at full speed "
            f"only when these sizes are multiples of {TENSOR_CORE_MULTIPLE} (NVIDIA's performance guide); other sizes are "
            f"padded or take slower kernels."
        ),
        fix="Round the model's widths up to multiples of 8 (64 is better on A100/H100): " + ", ".join(f"{d} -> {_round_up(d, TENSOR_CORE_MULTIPLE)}" for d in sizes[:6]) + ".",
    )


def _plain_input_width(ctx: CheckContext):
    """Feature width of a plain module's float input (the data's width), else None."""
    if ctx.config is not None or not ctx.report.input:
        return None
    shape = ctx.report.input.shape
    return shape[-1] if len(shape) >= 2 else None


# -- bias-before-batchnorm ------------------------------------------------------------------------------------


def _has_batchnorm(ctx: CheckContext):
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in ctx.model.modules()):
        return None
    return "the model has no BatchNorm"


@rule(
    "bias-before-batchnorm",
    severity="info",
    summary="Conv/Linear with a bias straight into BatchNorm: the bias is cancelled exactly.",
    applies=_has_batchnorm,
)
def bias_before_batchnorm(ctx: CheckContext):
    pairs = []
    nodes = ctx.nodes
    for a, b in zip(nodes, nodes[1:]):
        if b.type != "BatchNorm" or not (a.type.startswith("Conv") or a.type == "Linear"):
            continue
        mod, bn = ctx.module(a.name), ctx.module(b.name)
        bias = getattr(mod, "bias", None)
        if not isinstance(bias, nn.Parameter) or not isinstance(bn, nn.modules.batchnorm._BatchNorm):
            continue
        if a.output_shape != b.output_shape:  # not the conv's own output
            continue
        pairs.append((a.name, b.name, bias.numel()))
    if not pairs:
        return
    scalars = sum(p[2] for p in pairs)
    first = pairs[0]
    yield Hit(
        node=first[0],
        message=(
            f"{len(pairs)} layer(s) with a bias feed straight into BatchNorm (first: `{first[0]}` -> `{first[1]}`): BatchNorm "
            f"subtracts each channel's mean, which removes a per-channel bias exactly. {scalars:,} bias scalars do nothing "
            f"(their gradient is zero) but still cost optimizer state."
        ),
        fix="Create these layers with bias=False, as torchvision's ResNet does; BatchNorm's own beta is the bias.",
    )
