"""The batch a step trains on: the input planner's tensors and the labels of the task's own loss."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...inputs import InputPlan, TensorSpec
from ...introspect import forward_params as _forward_params
from .setup import TrainSetup


def label_specs(model: nn.Module, cfg: Any, plan: InputPlan) -> list[TensorSpec]:
    """Labels for the task's own loss, as transformers computes it in forward.

    Language models predict their input ids; seq2seq models the decoder ids;
    classifiers get one class per sample (per token for token classifiers).
    A model without a ``labels`` argument gets none: the step then uses
    ``output.float().sum()`` as the loss.
    """
    params = _forward_params(model)
    if "labels" not in params or cfg is None:
        return []
    cls = type(model).__name__
    by_name = {t.name: t for t in plan.tensors}
    num_labels = int(getattr(cfg, "num_labels", 2) or 2)
    b = plan.batch
    if cls.endswith(("ForCausalLM", "LMHeadModel", "ForMaskedLM")) and "input_ids" in by_name:
        t = by_name["input_ids"]
        return [TensorSpec("labels", t.shape, torch.long, t.high)]
    if cls.endswith("ForConditionalGeneration") and "decoder_input_ids" in by_name:
        t = by_name["decoder_input_ids"]
        return [TensorSpec("labels", t.shape, torch.long, t.high)]
    if cls.endswith("ForConditionalGeneration") and "input_ids" in by_name and _multimodal_decoder(cfg, by_name["input_ids"]):
        # A decoder-only vision (audio) language model (LLaVA, PaliGemma, Qwen2-VL ...): it
        # is fine-tuned as a causal LM on its own text, image tokens included.
        t = by_name["input_ids"]
        return [TensorSpec("labels", t.shape, torch.long, t.high)]
    if cls.endswith("ForTokenClassification") and "input_ids" in by_name:
        return [TensorSpec("labels", by_name["input_ids"].shape, torch.long, num_labels)]
    if cls.endswith(("ForSequenceClassification", "ForImageClassification", "ForAudioClassification")):
        if getattr(cfg, "problem_type", None) == "multi_label_classification":
            return [TensorSpec("labels", (b, num_labels), torch.float32)]
        return [TensorSpec("labels", (b,), torch.long, num_labels)]
    return []


def _multimodal_decoder(cfg: Any, ids: TensorSpec) -> bool:
    """A decoder-only model whose text holds image/video/audio tokens (the input
    planner placed runs of them in its ids)."""
    return not getattr(cfg, "is_encoder_decoder", False) and len(ids.shape) == 2 and bool(getattr(ids, "runs", None))


def _materialise(t: TensorSpec, real: bool, gen: torch.Generator) -> torch.Tensor:
    """One input as the input planner makes it (its own values: masks, grids, special ids)."""
    if real and hasattr(t, "real"):
        return t.real(gen)
    if not real and hasattr(t, "fake"):
        return t.fake()
    if t.dtype.is_floating_point:
        return torch.randn(t.shape, dtype=t.dtype, generator=gen if real else None)
    if t.high is not None:
        return torch.randint(0, max(t.high, 1), t.shape, dtype=t.dtype, generator=gen if real else None)
    return torch.ones(t.shape, dtype=t.dtype)


def make_batch(plan: InputPlan, labels: list[TensorSpec], setup: TrainSetup, *, real: bool, seed: int = 0, values=None) -> dict[str, torch.Tensor]:
    """The inputs and labels: real tensors for a measurement, fake ones (call
    under FakeTensorMode) for a simulation.  With ``values`` (the tracer's
    ValueMode) the planner makes small inputs with known values, as the tracer
    does.  Float inputs follow the weights' dtype when the model runs without
    autocast in a low precision."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    if not real and values is not None and hasattr(plan, "make"):
        out.update(plan.make(values))
        if labels:
            out.update(type(plan)(tensors=list(labels), main=labels[0].name, batch=plan.batch).make(values))
    else:
        for t in [*plan.tensors, *labels]:
            out[t.name] = _materialise(t, real, gen)
        out.update(getattr(plan, "kwargs", None) or {})  # the planner's non-tensor arguments
    cast = not setup.autocast and setup.compute_dtype != torch.float32 and (setup.precision == "bf16" or setup.mode == "inference")
    if cast:
        for name, x in out.items():
            if isinstance(x, torch.Tensor) and x.dtype.is_floating_point and name != "labels":
                out[name] = x.to(setup.compute_dtype)
    return out
