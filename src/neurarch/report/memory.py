"""The memory section of the report (JSON paths ``memory.<mode>.*``).

``memory.full``, ``memory.lora``, ``memory.qlora`` and ``memory.inference``
are :class:`MemoryMode` objects.  Every byte figure is an integer number of
bytes.  ``peak_tensor_bytes`` is the simulation itself (live tensor bytes, no
allocator or framework overhead); ``peak_bytes`` adds what a CUDA card needs
on top (see :mod:`neurarch.plan.overhead` for the sourced constants).  The
measured error of ``peak_tensor_bytes`` is published in ``docs/accuracy.md``.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from .base import ReportModel


class MemoryBreakdown(ReportModel):
    """What was alive at the peak, by role.  The six add up to ``peak_bytes``."""

    weights: int = Field(description="Parameters and buffers (frozen and trainable, quantized where QLoRA).")
    gradients: int = Field(description="Storages that are (or become) a parameter's .grad.")
    optimizer: int = Field(description="Optimizer state: made inside optimizer.step() and alive after it.")
    activations: int = Field(description="Made in forward and alive when backward starts (saved for backward, the loss), the input batch, and in inference the KV cache.")
    temporary: int = Field(description="Everything else alive at that instant: forward scratch, gradients of activations, the optimizer's own scratch.")
    overhead: int = Field(0, description="peak_bytes - peak_tensor_bytes: caching-allocator rounding plus fixed framework overhead.")


class MemoryMode(ReportModel):
    peak_tensor_bytes: int = Field(description="Simulated steady-state peak of live tensor bytes (step 2 on: optimizer state alive).")
    peak_bytes: int = Field(description="CUDA card need: peak with the caching allocator's 512-byte rounding plus fixed overhead (CUDA context, cuBLAS workspaces).")
    first_step_peak_tensor_bytes: Optional[int] = Field(description="The first step's peak (no optimizer state yet during forward/backward).")
    phase: str = Field(description="Phase at the steady peak: forward | backward | optimizer (training); prefill | decode (inference).")
    module: Optional[str] = Field(None, description="Innermost module running at the peak (qualified name), when known.")
    step: int = Field(description="Simulated step in which the peak happened.")
    breakdown: MemoryBreakdown
    trainable_parameters: int
    precision: str
    optimizer: Optional[str] = None
    grad_checkpointing: bool = False
    lora_rank: Optional[int] = None
    batch: int
    input_shape: list[int] = Field(default_factory=list, description="Main input, batch first.")
    device_semantics: str = Field(description="Whose kernels the simulation followed where CPU and CUDA differ: cuda | cpu.")
    kv_cache_bytes: Optional[int] = Field(None, description="Inference, decoders: KV cache at context_len tokens.")
    context_len: Optional[int] = None
    notes: list[str] = Field(default_factory=list)


class MemoryAssumptions(ReportModel):
    precision: str
    optimizer: str
    lora_rank: int
    grad_checkpointing: bool
    grad_accumulation: int = Field(1, description="Micro-batches per optimizer step (the Trainer's gradient_accumulation_steps); batch is the micro-batch.")
    grad_checkpointing_reentrant: bool = Field(False, description="Gradient checkpointing with use_reentrant=True (torch's CheckpointFunction) instead of transformers' default use_reentrant=False.")
    zero_grad_set_to_none: bool = Field(
        True, description="optimizer.zero_grad(set_to_none=...): true frees the gradients after each step (torch 2's default); false keeps them, zeroed, through the next step (torch 1.x)."
    )
    headroom: float = Field(description="A card fits a batch when peak_bytes x headroom <= its memory.")
    batch: int
    context_len: Optional[int] = None
    device_semantics: str = "cuda"
    method: str = ""
    optimizer_implementation: str = Field("", description="How the optimizer runs on the card: foreach (multi-tensor, torch's CUDA default), fused, or the library's own kernel.")
    attn_implementation: Optional[str] = Field(None, description="The attention the model was built with (transformers' name: eager, sdpa, flash_attention_2).")
    attn_implementation_how: str = Field("", description="Why: the user's --attn-implementation, or what transformers picks for this model on a CUDA card.")
    lora_targets: Optional[list[str]] = Field(None, description="peft target_modules; None = every linear layer but the head (all-linear).")
    lora_dropout: float = 0.0
    adapter_dtype: str = Field("fp32", description="Dtype of the LoRA adapter weights (peft casts them to fp32 over a low-precision base unless told otherwise).")
    task: Optional[str] = Field(None, description="The head the plan fine-tunes (--task); None = the config's architectures[0].")
    model_class: Optional[str] = Field(None, description="The class the plan simulated (differs from model.model_class with --task).")


class MemorySection(ReportModel):
    assumptions: Optional[MemoryAssumptions] = None
    full: Optional[MemoryMode] = None
    lora: Optional[MemoryMode] = None
    qlora: Optional[MemoryMode] = None
    inference: Optional[MemoryMode] = None
    errors: dict[str, str] = Field(default_factory=dict, description="Mode -> why it could not be simulated.")
