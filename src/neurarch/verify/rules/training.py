"""Rules about training: what gets gradients, what is frozen, init, precision, BatchNorm."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn
else:  # imported on first use: listing the rules must not import torch
    from ..._lazy import nn, torch

from ..context import CheckContext, NotApplicable
from ..graph import RESIDUAL_BRANCH_TYPES, config_get, group_names, layer_pattern, linear_dims, sub_configs
from ..registry import Hit, rule


def _training_only(ctx: CheckContext):
    return None if ctx.training else "only when training (the model is only run)"


def _numel(model: nn.Module, name: str) -> int:
    try:
        return model.get_parameter(name).numel()
    except AttributeError:
        return 0


# -- dead-parameters ----------------------------------------------------------------


@rule(
    "dead-parameters",
    severity="warn",
    summary="Trainable parameters that get no gradient: they take no part in the output.",
    applies=_training_only,
    requires="backward",
)
def dead_parameters(ctx: CheckContext):
    names = ctx.report.structure.unused_parameters
    if not names:
        return
    scalars = sum(_numel(ctx.model, n) for n in names)
    uncalled = ctx.report.structure.unused_modules
    never = f" Modules never called by forward: {group_names(uncalled)}." if uncalled else ""
    yield Hit(
        node=names[0],
        message=(
            f"{len(names)} trainable parameter tensor(s), {scalars:,} scalars, get no gradient in the backward pass: "
            f"{group_names(names)}. They take no part in the output for this input.{never} The optimizer still holds "
            f"state for them, and DistributedDataParallel stops with 'Expected to have finished reduction in the prior "
            f"iteration' unless told about them."
        ),
        fix=(
            "If the task does not use them (a mask token used only in masked pre-training, a pooler you do not read), "
            "freeze them with requires_grad_(False) or remove them; otherwise connect them in forward. Passing "
            "find_unused_parameters=True to DDP also works, at the cost of an extra graph traversal every step."
        ),
    )


# -- no-trainable-parameters ----------------------------------------------------------


@rule(
    "no-trainable-parameters",
    severity="error",
    summary="Training was asked for, but no parameter requires grad.",
    applies=_training_only,
    requires=None,
)
def no_trainable_parameters(ctx: CheckContext):
    p = ctx.report.params
    if p.parameters == 0 or p.trainable > 0:
        return
    yield Hit(
        node=None,
        message=(
            f"0 of {p.parameters:,} parameters require grad: an optimizer built from model.parameters() has nothing "
            f"to update, and loss.backward() fails with 'element 0 of tensors does not require grad'."
        ),
        fix=(
            "Unfreeze what you mean to train (requires_grad_(True) on those modules). For a PEFT adapter loaded with "
            "PeftModel.from_pretrained, pass is_trainable=True (the default loads it frozen, for inference)."
        ),
    )


# -- lora-trainable-mismatch ----------------------------------------------------------------


def _lora_names(model: nn.Module) -> tuple[list[tuple[str, nn.Parameter]], list[tuple[str, nn.Parameter]]]:
    lora: list[tuple[str, nn.Parameter]] = []
    other: list[tuple[str, nn.Parameter]] = []
    for name, p in model.named_parameters():
        (lora if ".lora_" in name or name.startswith("lora_") else other).append((name, p))
    return lora, other


def _peft_bias_mode(model: nn.Module) -> str:
    cfgs = getattr(model, "peft_config", None)
    if isinstance(cfgs, dict) and cfgs:
        active = getattr(model, "active_adapter", None)
        cfg = cfgs.get(active) if isinstance(active, str) else next(iter(cfgs.values()))
        return str(getattr(cfg, "bias", "none") or "none")
    return "none"


def _has_lora(ctx: CheckContext):
    if not ctx.training:
        return "only when training"
    lora, _ = _lora_names(ctx.model)
    return None if lora else "the model has no LoRA adapter"


@rule(
    "lora-trainable-mismatch",
    severity="warn",
    summary="LoRA model whose adapters are frozen, or whose base weights are trainable.",
    applies=_has_lora,
    requires=None,
)
def lora_trainable_mismatch(ctx: CheckContext):
    lora, other = _lora_names(ctx.model)
    lora_total = sum(p.numel() for _, p in lora)
    lora_trainable = sum(p.numel() for _, p in lora if p.requires_grad)
    if lora_trainable == 0:
        yield Hit(
            node=lora[0][0],
            message=(f"The model has {len(lora)} LoRA tensors ({lora_total:,} scalars) and none of them requires grad: training would not change the adapter."),
            fix="Load the adapter with PeftModel.from_pretrained(..., is_trainable=True), or call requires_grad_(True) on the lora_ parameters.",
        )
    bias_ok = _peft_bias_mode(ctx.model) in ("all", "lora_only")
    extra = [(n, p) for n, p in other if p.requires_grad and "modules_to_save" not in n and not (bias_ok and n.endswith(".bias"))]
    if extra:
        n_extra = sum(p.numel() for _, p in extra)
        total_trainable = n_extra + lora_trainable
        yield Hit(
            node=extra[0][0],
            message=(
                f"{n_extra:,} scalars outside the LoRA adapters are trainable ({100 * n_extra / max(total_trainable, 1):.1f}% "
                f"of all trainable scalars; the adapters have {lora_trainable:,}): {group_names([n for n, _ in extra])}. "
                f"The run becomes a full fine-tune of those weights, with their gradients and optimizer state."
            ),
            fix=(
                "Freeze the base model again (get_peft_model does it; a later model.requires_grad_(True) or a loop over "
                "model.parameters() undoes it), and list the modules you do mean to train in LoraConfig(modules_to_save=[...])."
            ),
        )


# -- batchnorm-small-batch ----------------------------------------------------------------------

BATCHNORM_MIN_BATCH = 8


def _batchnorms(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]


def _bn_applies(ctx: CheckContext):
    if not ctx.training:
        return "only when training"
    return None if _batchnorms(ctx.model) else "the model has no BatchNorm"


@rule(
    "batchnorm-small-batch",
    severity="warn",
    summary=f"BatchNorm trained with fewer than {BATCHNORM_MIN_BATCH} samples per device.",
    applies=_bn_applies,
)
def batchnorm_small_batch(ctx: CheckContext):
    b = ctx.batch
    if b >= BATCHNORM_MIN_BATCH:
        return
    bns = _batchnorms(ctx.model)
    name, first = bns[0]
    rows = {n.name: n for n in ctx.nodes}
    row = rows.get(name)
    positions = math.prod(row.output_shape[1:]) if row is not None and row.output_shape and len(row.output_shape) > 1 else 1
    flat = [n for n, m in bns if isinstance(m, nn.BatchNorm1d) and (rows.get(n) is None or len(rows[n].output_shape or []) <= 1)]
    crash = f" At batch 1, a BatchNorm over (N, C) inputs ({group_names(flat)}) raises 'Expected more than 1 value per channel when training'." if b == 1 and flat else ""
    fix = (
        "Freeze BatchNorm when fine-tuning at small batch: keep those layers in eval mode with requires_grad_(False) "
        "(torchvision's FrozenBatchNorm2d does this), so the pretrained running statistics are used."
        if not ctx.from_scratch
        else "Use at least 16 samples per device, SyncBatchNorm across devices (gradient accumulation does not help: statistics are per forward), or replace BatchNorm with GroupNorm."
    )
    yield Hit(
        node=name,
        message=(
            f"{len(bns)} BatchNorm layers (first: `{name}`) normalise with batch statistics, and the batch per device is {b}: "
            f"each channel's mean and variance come from {b} sample(s) x {positions:,} positions. They are noisy, differ from "
            f"the running averages used at eval, and make each sample's output depend on its batch-mates; Wu & He (2018) show "
            f"BatchNorm's error rising quickly as the per-device batch shrinks below 16.{crash}"
        ),
        fix=fix,
    )


# -- residual-init-not-depth-scaled ----------------------------------------------------------------

DEPTH_SCALING_MIN_BRANCHES = 24  # 12 transformer layers x (attention + MLP)


def _from_scratch(ctx: CheckContext):
    return None if ctx.from_scratch else "only with --from-scratch (pretrained weights replace the init)"


def _residual_branches(ctx: CheckContext) -> list:
    """Attention/MLP rows whose output goes straight into a residual Add (pre-norm blocks)."""
    nodes = ctx.nodes
    out = []
    for node, nxt in zip(nodes, nodes[1:]):
        if node.type in RESIDUAL_BRANCH_TYPES and nxt.type == "Add" and node.output_shape == nxt.output_shape:
            out.append(node)
    return out


def _projections(module: nn.Module, prefix: str) -> list[tuple[str, tuple[int, int]]]:
    """(qualified weight name, (in, out)) of the Linear-like submodules, in registration order."""
    out = []
    for name, m in module.named_modules():
        dims = linear_dims(m)
        if dims is not None and getattr(m, "base_layer", None) is None:
            out.append((f"{prefix}.{name}.weight" if name else f"{prefix}.weight", dims))
    return out


@rule(
    "residual-init-not-depth-scaled",
    severity="info",
    summary="From scratch: residual output projections start at the same scale however deep the model is.",
    applies=_from_scratch,
)
def residual_init_not_depth_scaled(ctx: CheckContext):
    from ..init_trace import traced_init

    branches = _residual_branches(ctx)
    if len(branches) < DEPTH_SCALING_MIN_BRANCHES:
        raise NotApplicable(f"{len(branches)} attention/MLP blocks feed a residual Add directly (the rule looks at {DEPTH_SCALING_MIN_BRANCHES} or more)")
    inits = traced_init(ctx.model)
    if inits is None:
        raise NotApplicable("the model has no initialize_weights() to trace (plain modules initialise in __init__)")
    unscaled, compared = [], 0
    for node in branches:
        mod = ctx.module(node.name)
        projs = _projections(mod, node.name) if mod is not None else []
        if len(projs) < 2:
            continue
        width = node.output_shape[-1] if node.output_shape else None
        outs = [p for p in projs if p[1][1] == width]
        out_name, first_name = (outs[-1][0] if outs else projs[-1][0]), projs[0][0]
        a, b = inits.get(out_name), inits.get(first_name)
        if a is None or b is None or a.std is None or b.std is None or b.std == 0:
            continue
        compared += 1
        if a.std >= 0.99 * b.std:
            unscaled.append((out_name, a.std, first_name, b.std))
    if not compared:
        raise NotApplicable("the traced init gives no comparable scale for the residual projections")
    if len(unscaled) < compared:
        return  # the model scales (some of) its residual projections
    n = len(branches)
    out_name, out_std, in_name, in_std = unscaled[0]
    scaled = out_std / math.sqrt(n)
    yield Hit(
        node=out_name.rsplit(".", 1)[0],
        message=(
            f"{n} residual branches (attention and MLP blocks) add into the residual stream, and the model's own init "
            f"(traced from initialize_weights) draws their output projections ({layer_pattern(out_name)}) with std {out_std:g}, "
            f"the same as their input projections ({layer_pattern(in_name)}, std {in_std:g}). At initialisation the "
            f"stream's variance grows with every branch, about {n}x one branch's contribution by the last layer."
        ),
        fix=(
            f"Scale the init std of the residual output projections by 1/sqrt(number of residual branches): "
            f"{out_std:g}/sqrt({n}) = {scaled:.4g}, as GPT-2 and Megatron-LM do (transformers' GPT-2 _init_weights), "
            f"or use a depth-aware scheme such as LayerScale or DeepNet."
        ),
    )


# -- fp16-on-bf16-checkpoint ----------------------------------------------------------------


def _checkpoint_dtype(config) -> str | None:
    for _, cfg in sub_configs(config):
        v = config_get(cfg, "dtype", "torch_dtype")
        if v is not None:
            return str(v).replace("torch.", "")
    return None


def _precision_known(ctx: CheckContext):
    if ctx.precision is None:
        return "the training precision is unknown (no --precision given)"
    if ctx.config is None:
        return "no config: the checkpoint's dtype is unknown"
    return None


@rule(
    "fp16-on-bf16-checkpoint",
    severity="warn",
    summary="fp16 training of a model whose checkpoint is bfloat16 (its activations can overflow fp16).",
    applies=_precision_known,
    requires=None,
)
def fp16_on_bf16_checkpoint(ctx: CheckContext):
    if not (ctx.precision or "").lower().startswith("fp16"):
        return
    dtype = _checkpoint_dtype(ctx.config)
    if dtype != "bfloat16":
        return
    yield Hit(
        node=None,
        message=(
            f"Training precision is {ctx.precision}, but the checkpoint is stored in bfloat16 (config dtype): the model was "
            f"trained in bf16, whose range reaches {torch.finfo(torch.bfloat16).max:.2e}. float16 overflows above "
            f"{torch.finfo(torch.float16).max:,.0f}, and the activations of bf16-trained models (Gemma, Llama 3, T5 ...) "
            f"exceed that: the loss turns inf/NaN and loss scaling cannot help with forward-pass overflow."
        ),
        fix="Train in bf16-mixed (Ampere or newer GPUs, TPUs); on GPUs without bf16, use fp32 or keep the overflowing blocks (MLP, attention scores) in fp32.",
    )
