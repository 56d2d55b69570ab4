"""The optimizer as torch (or bitsandbytes) runs it on the target device, and the
state step 1 leaves for step 2."""

from __future__ import annotations

import torch
from torch import nn

from .adapters import _bnb
from .setup import PlanOptionError, TrainSetup

# Learning rate and friends: any value gives the same memory; these are the
# torch defaults except lr (torch.optim.AdamW's default 1e-3 is a pre-training value).
LR = 1e-4
SGD_MOMENTUM = 0.9  # momentum SGD keeps one buffer per parameter; plain SGD keeps none


def trainable(model: nn.Module) -> list[nn.Parameter]:
    seen: set[int] = set()
    out = []
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def warm_up(optimizer: torch.optim.Optimizer, params: list[nn.Parameter], set_to_none: bool = True) -> list[torch.Tensor]:
    """What step 1 leaves for step 2, without its forward and backward: one
    optimizer step on zero gradients makes the optimizer's state (the same
    tensors a real step makes), then ``zero_grad`` as the loop calls it: the
    gradients go (``set_to_none``), or stay, zeroed, for step 2.
    Returns the state's tensors."""
    for p in params:
        p.grad = torch.zeros_like(p)
    if not _make_state(optimizer):
        optimizer.step()
    optimizer.zero_grad(set_to_none=set_to_none)
    return [t for state in optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)]


def _make_state(optimizer: torch.optim.Optimizer) -> bool:
    """torch's Adam and AdamW (per-tensor, foreach and fused) make all their state
    in ``_init_group``, ahead of the update, which then only changes values in
    place and frees its own scratch.  What one step on zero gradients leaves in
    memory is therefore exactly that call's tensors: the warm-up makes them
    without running the update (about a seventh of a card's check simulation).
    Other optimizers make state inside the update (SGD's momentum buffer,
    bitsandbytes' 8-bit blocks): they take the real step.  False if not done."""
    if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW):
        return False
    init = getattr(optimizer, "_init_group", None)
    if init is None:
        return False
    with torch.no_grad():
        for group in optimizer.param_groups:
            init(group, [], [], [], [], [], [])  # params_with_grad, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps
    return True


def make_optimizer(params: list[nn.Parameter], setup: TrainSetup) -> torch.optim.Optimizer:
    """The optimizer, as torch would pick it on the target device.

    torch.optim picks the multi-tensor (foreach) implementation by default only
    when every parameter is on CUDA (torch/optim/optimizer.py,
    _default_to_fused_or_foreach); for CPU tensors it runs a per-tensor loop.
    """
    foreach = setup.device == "cuda"
    if setup.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=LR, foreach=foreach)
    if setup.optimizer == "adamw-fused":
        # The Trainer's default (optim="adamw_torch_fused" with torch >= 2.8): one fused
        # kernel per parameter group, no multi-tensor scratch.
        return torch.optim.AdamW(params, lr=LR, fused=True)
    if setup.optimizer == "sgd":
        return torch.optim.SGD(params, lr=LR, momentum=SGD_MOMENTUM, foreach=foreach)
    if setup.optimizer == "adafactor":
        return torch.optim.Adafactor(params, lr=LR, foreach=foreach)
    if setup.optimizer == "adafactor-trainer":
        # transformers.Trainer, optim="adafactor" (trainer.py, get_optimizer_cls_and_kwargs):
        # transformers' own Adafactor with scale_parameter=False, relative_step=False and the lr given.
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=LR, scale_parameter=False, relative_step=False)
    if setup.optimizer == "adamw-8bit":
        # bitsandbytes' blockwise 8-bit AdamW (state in uint8 + per-block scales;
        # tensors under its min_8bit_size keep fp32 state): its own code decides.
        # Its code books (2 x 256 fp32) are built with .tolist() in __init__: on real tensors.
        # So is its import: bitsandbytes makes module constants as it is first imported (its
        # 4-bit code tables, 2 x 16 fp32 on the CPU), which are no step's memory; imported under
        # a simulation's tracker, they were counted in the first one a process ran (128 bytes).
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            bnb = _bnb()
            return bnb.optim.AdamW8bit(params, lr=LR)
    raise PlanOptionError(f"optimizer {setup.optimizer!r} is not supported yet")
