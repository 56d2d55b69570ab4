"""Counting the features a multimodal model makes per sample (how many image tokens its text must hold)."""

from __future__ import annotations

import torch
from torch import nn

from ..introspect import parameters


def _count_features(model: nn.Module, modality: str, inputs: dict[str, torch.Tensor], batch: int) -> tuple[int | None, str]:
    """How many ``modality`` features one sample makes, from the model's own ``get_<modality>_features``."""
    fn = None
    for holder in (model, getattr(model, "model", None), getattr(model, "base_model", None)):
        fn = getattr(holder, f"get_{modality}_features", None) if holder is not None else None
        if fn is not None:
            break
    if fn is None:
        return None, f"the model has no get_{modality}_features"
    params = parameters(fn)
    kwargs = {k: v for k, v in inputs.items() if k in params and k not in ("input_ids", "attention_mask")}
    first = next(iter(params), None)
    pixel = {"image": "pixel_values", "video": "pixel_values_videos", "audio": "input_features"}[modality]
    if first is not None and first not in kwargs and pixel in inputs:
        kwargs[first] = inputs[pixel]
    try:
        with torch.no_grad():
            out = fn(**kwargs)
    except Exception as e:  # the forward will fail the same way and say why
        return None, f"get_{modality}_features failed: {type(e).__name__}: {str(e)[:120]}"
    tensors = _feature_tensors(out)
    if not tensors:
        return None, f"get_{modality}_features returned no tensor"
    # transformers checks ``n_tokens * embedding_width == features.numel()``: one token per feature row,
    # and the rows must be as wide as the text embeddings.
    width = _embedding_width(model)
    feature_width = int(tensors[0].shape[-1])
    if width and feature_width != width:
        return None, f"its {modality} features are {feature_width} wide, its text embeddings {width} (the config is inconsistent)"
    rows = sum(t.numel() // max(int(t.shape[-1]), 1) for t in tensors)
    return max(rows // max(batch, 1), 1), ""


def _embedding_width(model: nn.Module) -> int | None:
    get = getattr(model, "get_input_embeddings", None)
    try:
        emb = get() if callable(get) else None
    except Exception:
        return None
    w = getattr(emb, "weight", None)
    return int(w.shape[-1]) if isinstance(w, torch.Tensor) and w.dim() == 2 else None


def _feature_tensors(out) -> list[torch.Tensor]:
    """The feature tensors in what ``get_*_features`` returns (a tensor, a tuple of them, or an output)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):  # a ModelOutput: transformers puts the projected features in pooler_output
        v = out.get("pooler_output")
        if v is None:
            v = out.get("last_hidden_state")
        return _feature_tensors(v) if v is not None else []
    if isinstance(out, (list, tuple)):
        return [t for x in out for t in _feature_tensors(x)]
    return []
