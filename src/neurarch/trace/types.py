"""Readable layer types for the layer table.

``readable_type`` maps a module to the name an ML engineer would write on a
whiteboard (Conv2D, BatchNorm, Multi-Head Attention, Feed Forward...).
``is_block`` says which modules are shown as one row at the default
granularity (an attention or MLP block, a patch embedding), as the seed pages do.
"""

from __future__ import annotations

import re

from torch import nn

_EXACT = {
    "Conv1d": "Conv1D",
    "Conv2d": "Conv2D",
    "Conv3d": "Conv3D",
    "ConvTranspose1d": "ConvTranspose1D",
    "ConvTranspose2d": "ConvTranspose2D",
    "BatchNorm1d": "BatchNorm",
    "BatchNorm2d": "BatchNorm",
    "BatchNorm3d": "BatchNorm",
    "SyncBatchNorm": "BatchNorm",
    "GroupNorm": "GroupNorm",
    "LayerNorm": "LayerNorm",
    "RMSNorm": "RMSNorm",
    "ReLU": "ReLU",
    "ReLU6": "ReLU6",
    "GELU": "GELU",
    "SiLU": "SiLU",
    "Mish": "Mish",
    "Tanh": "Tanh",
    "Sigmoid": "Sigmoid",
    "Softmax": "Softmax",
    "Hardswish": "HardSwish",
    "MaxPool1d": "MaxPool1D",
    "MaxPool2d": "MaxPool2D",
    "AvgPool2d": "AvgPool2D",
    "AdaptiveAvgPool1d": "AdaptiveAvgPool1D",
    "AdaptiveAvgPool2d": "AdaptiveAvgPool2D",
    "Linear": "Linear",
    "Embedding": "Embedding",
    "Dropout": "Dropout",
    "Dropout2d": "Dropout",
    "Identity": "Identity",
    "Flatten": "Flatten",
    "MultiheadAttention": "Multi-Head Attention",
}

_PATTERNS = [
    (re.compile(r"RMSNorm", re.I), "RMSNorm"),
    (re.compile(r"LayerNorm|LayerNorm2d", re.I), "LayerNorm"),
    (re.compile(r"BatchNorm", re.I), "BatchNorm"),
    (re.compile(r"GroupNorm", re.I), "GroupNorm"),
    (re.compile(r"^Conv1D$"), "Linear"),  # transformers' GPT-2 Conv1D is a transposed Linear
    (re.compile(r"Rotary|RoPE", re.I), "Rotary Embedding"),
    (re.compile(r"PatchEmbed", re.I), "Patch Embed"),
    (re.compile(r"LayerScale", re.I), "LayerScale"),
    (re.compile(r"DropPath|StochasticDepth", re.I), "DropPath"),
    (re.compile(r"(Self|Cross)?Attention$|Attn$|Attention(Block)?$", re.I), "Attention"),
    (re.compile(r"MLP|FeedForward|FFN|FeedForwardNetwork|Intermediate$", re.I), "Feed Forward"),
    (re.compile(r"(Fast|Quick|New|Pytorch|Accurate)?GELU(Activation)?$", re.I), "GELU"),
    (re.compile(r"SiLU|Swish", re.I), "SiLU"),
    (re.compile(r"ReLU", re.I), "ReLU"),
    (re.compile(r"Embedding$", re.I), "Embedding"),
    (re.compile(r"Embeddings$", re.I), "Embeddings"),
    (re.compile(r"Pooler$", re.I), "Pooler"),
    (re.compile(r"Head$", re.I), "Head"),
]

BLOCK_TYPES = {"Multi-Head Attention", "Grouped-Query Attention", "Multi-Query Attention", "Attention", "Feed Forward", "Patch Embed"}


def _attention_kind(module: nn.Module) -> str:
    heads = getattr(module, "num_heads", None) or getattr(module, "num_attention_heads", None)
    groups = getattr(module, "num_key_value_groups", None)
    kv = getattr(module, "num_key_value_heads", None)
    cfg = getattr(module, "config", None)
    if heads is None and cfg is not None:
        heads = getattr(cfg, "num_attention_heads", None)
    if kv is None and cfg is not None:
        kv = getattr(cfg, "num_key_value_heads", None)
    if groups is None and heads and kv:
        try:
            groups = int(heads) // int(kv)
        except (TypeError, ValueError, ZeroDivisionError):
            groups = None
    if isinstance(groups, int) and groups > 1:
        if kv == 1 or (heads and groups == heads):
            return "Multi-Query Attention"
        return "Grouped-Query Attention"
    return "Multi-Head Attention"


def readable_type(module: nn.Module) -> str:
    name = type(module).__name__
    if name in _EXACT:
        return _EXACT[name]
    for pat, label in _PATTERNS:
        if pat.search(name):
            if label == "Attention":
                # Only a module that owns projections is an attention block;
                # "SdpaAttention" wrappers without weights are covered too.
                return _attention_kind(module)
            return label
    return name


def is_block(module: nn.Module, rtype: str) -> bool:
    """Shown as one row at default granularity: attention/MLP blocks with weights."""
    if rtype not in BLOCK_TYPES:
        return False
    return any(True for _ in module.parameters(recurse=True))
