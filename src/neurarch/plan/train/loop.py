"""The loop: forward with labels, keep only the loss, backward, optimizer step, zero_grad."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch import nn

from ...trace.loss import loss_of
from .setup import PlanOptionError, TrainSetup


def step_loss(out) -> torch.Tensor:
    """The step's loss (:func:`neurarch.trace.loss.loss_of`: the task loss transformers
    computed, else the first floating output summed); an output with none cannot train."""
    loss = loss_of(out)
    if loss is None:
        raise PlanOptionError("the model's output has no floating tensor to train on")
    return loss


class Observer:
    """What the loop tells whoever watches it (the tracker, the profiler)."""

    @contextlib.contextmanager
    def phase(self, step: int, name: str) -> Iterator[None]:
        yield

    def after_backward(self, model: nn.Module) -> None:
        pass


def autocast_for(setup: TrainSetup, device_type: str):
    if not setup.autocast:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=setup.compute_dtype)


def train(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    setup: TrainSetup,
    steps: int,
    observer: Observer,
    *,
    device_type: str = "cpu",
    loss_fn: Callable[[Any], torch.Tensor] = step_loss,
    first_step: int = 1,
) -> None:
    """``steps`` training steps, numbered from ``first_step``; every reference is
    dropped where a training loop drops it.  With gradient accumulation each step
    runs its micro-batches' forward and backward (the loss divided by their
    number, as the Trainer does), at most two (see TrainSetup.grad_accumulation),
    then one optimizer step."""
    accumulate = setup.grad_accumulation
    for step in range(first_step, first_step + steps):
        for _ in range(min(accumulate, 2)):
            with observer.phase(step, "forward"):
                with autocast_for(setup, device_type):
                    out = model(**batch)
                    loss = loss_fn(out)
                    if accumulate > 1:
                        loss = loss / accumulate
                del out
            with observer.phase(step, "backward"):
                loss.backward()
                del loss
                observer.after_backward(model)
        with observer.phase(step, "optimizer"):
            optimizer.step()
            # The same tensors as the Trainer's model.zero_grad(): every trainable parameter's .grad.
            optimizer.zero_grad(set_to_none=setup.zero_grad_set_to_none)
