"""What the planner knows while it plans one model: the model, its config, the options, the specs so far."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import nn

from ..introspect import forward_params, sub_config
from ..options import InputOptions
from .types import TensorSpec

_M = TypeVar("_M", bound=nn.Module)


@dataclass
class _Ctx:
    model: nn.Module
    cfg: Any
    opts: InputOptions
    params: dict[str, inspect.Parameter]
    b: int
    how: list[str]
    seq: int | None = None
    image: tuple[int, int] | None = None
    alternatives: list = field(default_factory=list)
    specs: dict[str, TensorSpec] = field(default_factory=dict)  # the plan so far, by forward argument

    def add(self, specs: list[TensorSpec]) -> None:
        for t in specs:
            self.specs.setdefault(t.name, t)

    @property
    def text_cfg(self):
        return sub_config(self.cfg, "text_config", "decoder_config") or self.cfg

    @property
    def vision_cfg(self):
        return sub_config(self.cfg, "vision_config", "backbone_config", "encoder") or self.cfg


def _is_decoder(model: nn.Module, cfg: Any) -> bool:
    name = type(model).__name__
    return bool(
        getattr(cfg, "is_decoder", False)
        or name.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration"))
        or getattr(cfg, "is_encoder_decoder", False)
        or "decoder" in (getattr(cfg, "model_type", "") or "")
        or sub_config(cfg, "text_config") is not None
        or (hasattr(model, "get_decoder") and not getattr(cfg, "is_encoder_decoder", False) and "cache" in forward_params(model))
    )


def _first_module(model: nn.Module, kinds: tuple[type[_M], ...], match=None) -> _M | None:
    for m in model.modules():
        if isinstance(m, kinds) and (match is None or match(m)):
            return m
    return None


def _mask(ctx: _Ctx, name: str, shape: tuple[int, ...]) -> TensorSpec:
    """A mask that keeps everything: ones, or all-False when the forward annotates a BoolTensor
    (those mark padding: Gemma-3n's ``audio_mel_mask``)."""
    p = ctx.params.get(name)
    ann = str(p.annotation) if p is not None else ""
    if "BoolTensor" in ann or "torch.bool" in ann:
        return TensorSpec(name, shape, torch.bool, fill=0)
    return TensorSpec(name, shape, torch.long, fill=1)


def _tagged(specs: list[TensorSpec], modality: str) -> list[TensorSpec]:
    for t in specs:
        t.modality = modality
    return specs
