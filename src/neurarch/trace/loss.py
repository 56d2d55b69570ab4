"""The loss a backward pass starts from: one definition for the trace, the memory plan and the cost.

* a training step (the memory plan's simulated and measured steps, the cost's
  count of a step's work): the task loss transformers computed in forward
  (the batch has labels), else the first floating output summed in fp32;
* the trace (``every_output=True``): every floating output that requires grad,
  summed in fp32, so every parameter that takes part in the forward pass gets a
  gradient and a parameter left without one is truly unused.
"""

from __future__ import annotations

import torch


def floating_outputs(obj, out: list) -> None:
    """Append to ``out`` every floating tensor of ``obj`` that requires grad, in order."""
    if isinstance(obj, torch.Tensor):
        if obj.dtype.is_floating_point and obj.requires_grad:
            out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            floating_outputs(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            floating_outputs(v, out)


def first_float(out) -> torch.Tensor | None:
    """The first floating tensor of a model's output (a tensor, a ModelOutput, a dict, a tuple)."""
    if isinstance(out, torch.Tensor):
        return out if out.dtype.is_floating_point else None
    if isinstance(out, dict) or hasattr(out, "values"):
        vals = list(out.values())
    elif isinstance(out, (tuple, list)):
        vals = list(out)
    else:
        return None
    for v in vals:
        t = first_float(v)
        if t is not None:
            return t
    return None


def loss_of(output, *, every_output: bool = False) -> torch.Tensor | None:
    """The scalar to run backward from; None when the output has nothing to train on.

    Default (a training step): ``output.loss`` when the model computed it, else the
    first floating output summed in fp32, if it requires grad.  ``every_output``
    (the trace): every floating output that requires grad, summed in fp32.
    """
    if every_output:
        ts: list[torch.Tensor] = []
        floating_outputs(output, ts)
        if not ts:
            return None
        total = ts[0].float().sum()
        for x in ts[1:]:
            total = total + x.float().sum()
        return total
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    t = first_float(output)
    if t is None or not t.requires_grad:
        return None
    return t.float().sum()
