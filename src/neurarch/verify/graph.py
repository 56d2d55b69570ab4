"""Readings of the traced graph that several rules share.

* :func:`detect_output` — what the model outputs (features of a backbone,
  classification logits, a language-model head, a seq2seq LM), where its head
  is, and which rows come after the head.  The seed verifier had no such
  notion and warned about the final LayerNorm of every backbone.
* :func:`activation_profile` — bytes per layer-table row, from the memory
  plan when there is one, else from the traced output shapes (a proxy that
  says so in every message that uses it).
* small helpers: row kinds, widths, attention head geometry, sub-configs,
  number formatting.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from torch import nn
else:  # imported on first use: listing the rules must not import torch
    from .._lazy import nn

from ..introspect import config_get, sub_configs  # noqa: F401  (the rules import them from here)
from ..report import Node

if TYPE_CHECKING:  # context.py imports this module's functions at call time
    from .context import CheckContext

PROJECTION_TYPES = {"Linear", "Conv1D", "Conv2D", "Conv3D", "ConvTranspose1D", "ConvTranspose2D"}
ATTENTION_TYPES = {"Multi-Head Attention", "Grouped-Query Attention", "Multi-Query Attention", "Attention"}
RESIDUAL_BRANCH_TYPES = ATTENTION_TYPES | {"Feed Forward"}

OUTPUT_KINDS = ("features", "classification", "lm", "seq2seq-lm", "unknown")
LOGIT_KINDS = {"classification", "lm", "seq2seq-lm"}
LM_KINDS = {"lm", "seq2seq-lm"}


# -- rows ----------------------------------------------------------------------


def is_norm(node: Node) -> bool:
    """A normalization row (LayerNorm, RMSNorm, BatchNorm, GroupNorm, InstanceNorm ...)."""
    return "Norm" in node.type or "Norm" in (node.module_class or "")


def is_projection(node: Node) -> bool:
    """A Linear or convolution row (transformers' GPT-2 Conv1D reads as Linear)."""
    return node.type in PROJECTION_TYPES


def width(node: Node) -> Optional[int]:
    """Feature width of a row's output: channels for conv/BatchNorm maps, else the last dim."""
    shape = node.output_shape
    if not shape:
        return None
    if (node.type.startswith("Conv") or node.type == "BatchNorm") and len(shape) >= 2:
        return shape[0]
    return shape[-1]


def elements(node: Node) -> int:
    """Elements in one sample's output of the row (batch excluded)."""
    return math.prod(node.output_shape) if node.output_shape is not None else 0


def layer_pattern(name: str) -> str:
    """``model.layers.17.mlp`` -> ``model.layers.*.mlp`` (for grouping repeated layers)."""
    return re.sub(r"\.\d+(?=\.|$)", ".*", name)


def group_names(names: list[str], limit: int = 4) -> str:
    """Names grouped by layer pattern, at most ``limit`` shown: 'a.*.w (x12), b'."""
    groups: dict[str, int] = {}
    for n in names:
        p = layer_pattern(n)
        groups[p] = groups.get(p, 0) + 1
    items = [f"{p} (x{k})" if k > 1 else p for p, k in groups.items()]
    more = len(items) - limit
    return ", ".join(items[:limit]) + (f" and {more} more" if more > 0 else "")


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def linear_dims(module: nn.Module) -> Optional[tuple[int, int]]:
    """(in, out) of a Linear-like module: nn.Linear, transformers' Conv1D, LoRA-wrapped Linear."""
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D" and hasattr(module, "nf"):  # transformers GPT-2: weight is (in, out)
        conv: Any = module  # transformers' Conv1D: nf is its output width
        w = getattr(conv, "weight", None)
        return (int(w.shape[0]), int(conv.nf)) if w is not None else None
    base = getattr(module, "base_layer", None)  # peft LoRA layer wraps the Linear
    if isinstance(base, nn.Module) and base is not module:
        return linear_dims(base)
    return None


# -- configs and attention geometry ---------------------------------------------


def _find_attr(module: nn.Module, names: tuple[str, ...]):
    for m in module.modules():
        for n in names:
            v = getattr(m, n, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return None


def module_config(module: nn.Module, default: Any) -> Any:
    """The config a module was built with (transformers modules keep one), else ``default``."""
    cfg = getattr(module, "config", None)
    return cfg if cfg is not None and hasattr(cfg, "to_dict") else default


@dataclass
class AttentionInfo:
    node: Node
    module: nn.Module
    heads: Optional[int]
    kv_heads: Optional[int]
    head_dim: Optional[int]
    implementation: Optional[str]  # the config's _attn_implementation: "sdpa", "eager", "flash_attention_2" ...


def attention_rows(ctx: "CheckContext") -> list[AttentionInfo]:
    """Attention rows of the layer table with their head geometry (from the module, else its config)."""
    out = []
    for node in ctx.nodes:
        if node.type not in ATTENTION_TYPES:
            continue
        mod = ctx.module(node.name)
        if mod is None:
            continue
        cfg = module_config(mod, ctx.config)
        heads = _find_attr(mod, ("num_heads", "num_attention_heads", "n_heads", "n_head")) or config_get(cfg, "num_attention_heads", "n_head", "num_heads")
        kv = _find_attr(mod, ("num_key_value_heads", "num_kv_heads", "n_kv_heads")) or config_get(cfg, "num_key_value_heads", "num_kv_heads") or heads
        head_dim = _find_attr(mod, ("head_dim", "attention_head_size", "head_size", "key_value_proj_dim", "d_kv"))
        if head_dim is None:
            head_dim = config_get(cfg, "head_dim", "d_kv")
        if head_dim is None and heads:
            hidden = config_get(cfg, "hidden_size", "n_embd", "d_model")
            head_dim = int(hidden) // int(heads) if hidden else None
        impl = getattr(cfg, "_attn_implementation", None) if cfg is not None else None
        out.append(AttentionInfo(node, mod, int(heads) if heads else None, int(kv) if kv else None, int(head_dim) if head_dim else None, impl))
    return out


# -- what the model outputs -------------------------------------------------------


@dataclass
class OutputInfo:
    """What the model's output is, and the rows around its head.

    ``head`` is the last projection row (Linear/Conv) of the layer table;
    ``tail`` the rows after it — what touches the output after the head.
    """

    kind: str  # one of OUTPUT_KINDS
    reason: str
    head: Optional[Node] = None
    tail: list[Node] = field(default_factory=list)


_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForPreTraining", "WithLMHead")
_CLASSIFY_WORDS = ("Classification", "QuestionAnswering", "MultipleChoice", "Segmentation")


def _unwrap(model: nn.Module) -> nn.Module:
    """The user's model inside a PEFT wrapper (PeftModel -> LoraModel -> model)."""
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base):
        try:
            return get_base()
        except Exception:
            return model
    return model


def _kind_from_class(model: nn.Module, config: Any) -> Optional[tuple[str, str]]:
    """(kind, reason) from a transformers/timm class, or None for plain modules."""
    inner = _unwrap(model)
    name = type(inner).__name__
    try:
        from transformers import PreTrainedModel

        pretrained: tuple[type, ...] = (PreTrainedModel,)
    except Exception:  # pragma: no cover - transformers is a dependency
        pretrained = ()
    if pretrained and isinstance(inner, pretrained):
        if name.endswith(_LM_SUFFIXES):
            return "lm", f"{name} is a language-model head"
        if name.endswith("ForConditionalGeneration"):
            if getattr(config, "is_encoder_decoder", False):
                return "seq2seq-lm", f"{name} is an encoder-decoder language model"
            return "lm", f"{name} generates text"
        if "For" in name and any(w in name for w in _CLASSIFY_WORDS):
            return "classification", f"{name} ends in a task head that outputs class logits"
        if "For" not in name:
            return "features", f"{name} is a backbone: it outputs features, not logits"
        return "unknown", f"{name}: neurarch does not know what this task head outputs"
    num_classes = getattr(inner, "num_classes", None)
    if isinstance(num_classes, int) and (hasattr(inner, "pretrained_cfg") or hasattr(inner, "default_cfg")):  # timm
        if num_classes > 0:
            return "classification", f"timm {name} with num_classes={num_classes}"
        return "features", f"timm {name} with num_classes=0 (a feature extractor)"
    return None


def _kind_from_graph(ctx: "CheckContext", head: Node, before: list[Node]) -> tuple[str, str]:
    """Plain modules: infer the output kind from the head row and what precedes it."""
    mod = ctx.module(head.name)
    dims = linear_dims(mod) if mod is not None else None
    out_w = width(head)
    if out_w is None:
        return "unknown", "the last projection row has no output shape"
    # A head that maps onto a token vocabulary: same size as an Embedding table.
    for m in ctx.model.modules():
        if isinstance(m, nn.Embedding) and m.num_embeddings == out_w and m.num_embeddings > 1:
            return "lm", f"the last {head.type} maps to {out_w:,} outputs, the size of the token embedding (a vocabulary)"
    if dims is not None and dims[0] == dims[1]:
        return "features", f"the last {head.type} keeps the width ({dims[0]})"
    if any(width(n) == out_w for n in before):
        return "features", f"width {out_w} of the last {head.type} already occurs before it (a hidden width, not classes)"
    src = f" maps {dims[0]} -> {dims[1]}" if dims else f" outputs width {out_w}"
    return "classification", f"inferred from the graph: the last {head.type} `{head.name}`{src}, a width no earlier layer has (class logits)"


def detect_output(ctx: "CheckContext") -> OutputInfo:
    nodes = ctx.nodes
    head_i = max((i for i, n in enumerate(nodes) if is_projection(n)), default=None)
    head = nodes[head_i] if head_i is not None else None
    tail = nodes[head_i + 1 :] if head_i is not None else []
    known = _kind_from_class(ctx.model, ctx.config)
    if known is not None:
        return OutputInfo(known[0], known[1], head, tail)
    if head is None:
        return OutputInfo("unknown", "the layer table has no Linear or convolution row", None, [])
    kind, reason = _kind_from_graph(ctx, head, nodes[:head_i])
    return OutputInfo(kind, reason, head, tail)


# -- activation sizes ----------------------------------------------------------------


@dataclass
class ActivationProfile:
    """Bytes per layer-table row, and where the figures come from."""

    bytes_by_row: dict[str, int]
    source: str  # "memory plan" or the proxy's description
    is_proxy: bool

    @property
    def total(self) -> int:
        return sum(self.bytes_by_row.values())


def bytes_per_activation(ctx: "CheckContext") -> int:
    """2 for 16-bit training, else 4 (fp32, or unknown precision)."""
    p = (ctx.precision or "").lower()
    return 2 if p.startswith(("bf16", "fp16")) else 4


def activation_profile(ctx: "CheckContext") -> ActivationProfile:
    per = bytes_per_activation(ctx)
    rows: dict[str, int] = {}
    for n in ctx.nodes:
        if n.output_shape is not None:
            rows[n.name] = rows.get(n.name, 0) + elements(n) * ctx.batch * per * max(n.calls, 1)
    dtype = "16-bit" if per == 2 else "fp32"
    return ActivationProfile(rows, f"proxy: every layer-table row's output tensor at batch {ctx.batch}, {dtype} (no memory plan)", True)
