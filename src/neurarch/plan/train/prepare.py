"""The model made ready for the step of one mode (inference, full, LoRA, QLoRA)."""

from __future__ import annotations

from torch import nn

from .adapters import _inject_lora, _inject_qlora
from .model import cast_model, enable_checkpointing, no_random_structure
from .setup import PlanOptionError, TrainSetup


def prepare(model: nn.Module, setup: TrainSetup) -> nn.Module:
    """Put a model in the state the step needs; returns the model to train (maybe a PeftModel).

    Works the same on a meta model (simulation) and a real one (measurement).
    """
    setup.validate()
    no_random_structure(model)
    if setup.mode == "inference":
        cast_model(model, setup.compute_dtype)
        for p in model.parameters():
            p.requires_grad_(False)
        return model.eval()
    if setup.grad_checkpointing:
        enable_checkpointing(model, setup)
    if setup.mode == "full":
        # fp32 too: a model built from sub-configs of different dtypes (a VLM whose text
        # config says bfloat16) trains with one master-weight dtype, as from_pretrained(dtype=...) loads it.
        cast_model(model, setup.weight_dtype)
        for p in model.parameters():
            p.requires_grad_(True)
        return model.train()
    if setup.mode == "lora":
        return _inject_lora(model, setup).train()
    if setup.mode == "qlora":
        return _inject_qlora(model, setup).train()
    raise PlanOptionError(f"memory mode {setup.mode!r} is not supported yet")
