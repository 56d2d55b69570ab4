"""What is simulated (or measured): the memory options of one mode as one value, checked
by :class:`~neurarch.options.PlanOptions` (the one check, with the messages users see)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...errors import InputError
from ...options import DEFAULT_LORA_RANK, PlanOptions

DEVICES = ("cpu", "cuda")


class PlanOptionError(InputError):
    """A memory-plan option that neurarch does not know or cannot honour."""


@dataclass(frozen=True)
class TrainSetup:
    """What is being simulated: the CLI's memory options as one value."""

    mode: str = "full"
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    grad_checkpointing: bool = False
    # The Trainer's gradient_accumulation_steps: micro-batches whose gradients add up before
    # one optimizer step.  From the second on, each runs with the gradients of the ones before
    # alive; the third and later repeat the second's state, so at most two are run.
    grad_accumulation: int = 1
    lora_rank: int = DEFAULT_LORA_RANK
    # peft's target_modules: None = neurarch's all-linear rule (see lora_targets); else module
    # names matched as peft matches them (the whole name or its last components).
    lora_targets: tuple[str, ...] | None = None
    lora_dropout: float = 0.0  # peft's default; > 0 keeps a dropped copy of each adapted layer's input
    # Adapter weights: None = as peft casts them (autocast_adapter_dtype=True: fp32 over a
    # bf16/fp16 base); "bf16" keeps them in the base's low precision (pure-bf16 training).
    adapter_dtype: str | None = None
    # The attention the model was built with (transformers' name); flash_attention_2 is
    # simulated with CUDA's flash kernel (the flash-attn package needs CUDA to install).
    attn_implementation: str | None = None
    # optimizer.zero_grad(set_to_none=...): True (torch 2's default) frees the gradients after
    # each optimizer step; False zeroes them in place (torch 1.x's default, and the Trainer's
    # model.zero_grad() of its time), so from the second step on they live through forward too.
    zero_grad_set_to_none: bool = True
    # transformers' gradient_checkpointing_kwargs={"use_reentrant": True} (what torch's checkpoint
    # runs when use_reentrant is not passed, as transformers 4.x called it): its autograd.Function,
    # recomputed from backward.
    grad_checkpointing_reentrant: bool = False
    # Whose kernels' behaviour to follow where CPU and CUDA differ (see docs/accuracy.md):
    # "cuda" = multi-tensor (foreach) optimizer, the default on CUDA; "cpu" = the
    # single-tensor loop torch uses for CPU tensors.
    device: str = "cuda"

    @classmethod
    def from_plan(cls, plan: PlanOptions, *, mode: str, precision: str, device: str = "cuda") -> "TrainSetup":
        """One mode of ``plan``'s recipe, as the simulator and the real step run it.

        Inference runs no optimizer step: gradient accumulation and ``zero_grad``
        do not apply to it and keep their defaults (1, set to None)."""
        inference = mode == "inference"
        return cls(
            mode=mode,
            precision=precision,
            optimizer=plan.optimizer,
            grad_checkpointing=plan.grad_checkpointing,
            grad_accumulation=1 if inference else plan.grad_accumulation,
            lora_rank=plan.lora_rank,
            lora_targets=plan.lora_targets,
            lora_dropout=plan.lora_dropout,
            adapter_dtype=plan.adapter_dtype,
            attn_implementation=plan.attn_implementation,
            zero_grad_set_to_none=plan.zero_grad_set_to_none or inference,
            grad_checkpointing_reentrant=plan.grad_checkpointing_reentrant,
            device=device,
        )

    def validate(self) -> None:
        """The options as :class:`~neurarch.options.PlanOptions` checks them (the one check,
        with the messages users see), and the device."""
        if self.device not in DEVICES:
            raise PlanOptionError(f"unknown memory device {self.device!r}: choose one of {', '.join(DEVICES)}", field="device")
        try:
            PlanOptions(
                modes=(self.mode,),
                optimizer=self.optimizer,
                lora_rank=self.lora_rank,
                grad_checkpointing=self.grad_checkpointing,
                grad_checkpointing_reentrant=self.grad_checkpointing_reentrant,
                zero_grad_set_to_none=self.zero_grad_set_to_none,
                grad_accumulation=self.grad_accumulation,
                attn_implementation=self.attn_implementation,
                lora_targets=self.lora_targets,
                lora_dropout=self.lora_dropout,
                adapter_dtype=self.adapter_dtype,
            ).validate(self.precision)
        except PlanOptionError:
            raise
        except InputError as e:
            raise PlanOptionError(str(e), field=e.field) from None

    @property
    def compute_dtype(self) -> torch.dtype:
        return {"fp32": torch.float32, "bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16, "bf16": torch.bfloat16}[self.precision]

    @property
    def autocast(self) -> bool:
        return self.precision.endswith("-mixed")

    @property
    def weight_dtype(self) -> torch.dtype:
        """The dtype trainable weights are stored in (fp32 masters under mixed precision)."""
        return torch.bfloat16 if self.precision == "bf16" else torch.float32

    @property
    def frozen_dtype(self) -> torch.dtype:
        """Frozen base weights (LoRA) need no fp32 master: they are kept in the compute dtype."""
        return self.compute_dtype
