"""The base model as a training run leaves it before adapters: dtypes as
``from_pretrained(dtype=...)`` casts them, no random structure (LayerDrop,
SpecAugment), and gradient checkpointing as transformers turns it on."""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import torch
from torch import nn

from .setup import PlanOptionError, TrainSetup


def _keep_fp32(model: nn.Module) -> list[str]:
    names = getattr(model, "_keep_in_fp32_modules", None) or []
    return list(names) if isinstance(names, (list, tuple, set)) else []


def cast_model(model: nn.Module, dtype: torch.dtype) -> None:
    """What ``from_pretrained(dtype=...)`` does: floating parameters and buffers
    to ``dtype``, except the modules the class keeps in fp32 (``_keep_in_fp32_modules``,
    matched on a component of the qualified name, as transformers matches it)."""
    keep = _keep_fp32(model)
    for name, mod in model.named_modules():
        if keep and any(k in name.split(".") for k in keep):
            continue
        for p in mod._parameters.values():
            if p is not None and p.dtype.is_floating_point and p.dtype != dtype:
                p.data = p.data.to(dtype)
        for bname, b in mod._buffers.items():
            if b is not None and b.dtype.is_floating_point and b.dtype != dtype:
                mod._buffers[bname] = b.to(dtype)


_LAYERDROP = ("layerdrop", "encoder_layerdrop", "decoder_layerdrop")


def no_random_structure(model: nn.Module) -> None:
    """Turn off training tricks whose tensor *sizes* follow a coin toss.

    * LayerDrop (wav2vec2's default 0.1) skips whole layers at random;
    * SpecAugment (wav2vec2/hubert ``apply_spec_augment``) writes a random
      boolean mask into the features, whose backward indexes by that mask.

    A step's memory would be random; fake tensors have no values to toss.
    With both off we simulate (and measure) the step that keeps every layer:
    the worst case for LayerDrop, and for SpecAugment a difference of an
    in-place write and its index temporaries.
    """
    for mod in model.modules():
        cfg = getattr(mod, "config", None)
        if cfg is None:
            continue
        for name in _LAYERDROP:
            if isinstance(getattr(cfg, name, None), (int, float)) and getattr(cfg, name) > 0:
                setattr(cfg, name, 0.0)
        if getattr(cfg, "apply_spec_augment", False):
            cfg.apply_spec_augment = False


def _recompute_under_forward_modes():
    """``context_fn`` for ``torch.utils.checkpoint``: recompute under the
    torch-function modes that were active in the forward pass.

    Autograd does not carry Python torch-function modes into backward, where a
    non-reentrant checkpoint recomputes its block.  On a device that changes
    nothing; in the simulator the recomputation would otherwise skip
    :class:`~neurarch.fake.cuda.CudaKernels` (CUDA's attention and
    dropout kernels), save other tensors than the forward pass did, and
    torch's checkpoint refuses that ("A different number of tensors was saved
    during the original forward and recomputation").
    """
    stack = list(torch.overrides._get_current_function_mode_stack())

    @contextlib.contextmanager
    def recompute() -> Iterator[None]:
        active = torch.overrides._get_current_function_mode_stack()
        with contextlib.ExitStack() as modes:
            for mode in stack:
                if mode not in active:
                    modes.enter_context(mode)
            yield

    return contextlib.nullcontext(), recompute()


# What transformers uses by default (use_reentrant=False), with the recompute fix above.
CHECKPOINT_KWARGS = {"use_reentrant": False, "context_fn": _recompute_under_forward_modes}
# gradient_checkpointing_kwargs={"use_reentrant": True}: torch's CheckpointFunction, which
# takes no context_fn (it recomputes inside its own backward, see _ReentrantUnderForwardModes).
REENTRANT_KWARGS = {"use_reentrant": True}


def checkpoint_kwargs(setup: TrainSetup) -> dict:
    return dict(REENTRANT_KWARGS if setup.grad_checkpointing_reentrant else CHECKPOINT_KWARGS)


def enable_checkpointing(model: nn.Module, setup: TrainSetup | None = None) -> None:
    """Gradient checkpointing as ``model.gradient_checkpointing_enable()`` turns
    it on (non-reentrant unless the setup asks for reentrant, every layer the
    class marks), which the Trainer calls for ``gradient_checkpointing=True``."""
    kwargs = checkpoint_kwargs(setup) if setup is not None else dict(CHECKPOINT_KWARGS)
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise PlanOptionError(f"{type(model).__name__} has no gradient checkpointing switch (transformers models that support it do)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)  # type: ignore[operator]  # a method found by hasattr; nn.Module.__getattr__'s stub says Tensor | Module
        elif hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)  # type: ignore[operator]  # a method found by hasattr; nn.Module.__getattr__'s stub says Tensor | Module
        else:
            raise PlanOptionError(f"{type(model).__name__} has no gradient checkpointing switch (transformers models that support it do)")
