"""Move a meta-device module onto fake tensors.

A module built under ``torch.device("meta")`` has the right shapes but no
storage; ops on meta tensors give shapes, but meta is a device of its own, so
code that checks ``x.device.type`` takes odd branches.  We turn every
parameter and buffer into a ``FakeTensor`` that reports the device we want
(CPU by default) while owning no memory, keeping shared (tied) tensors shared.
"""

from __future__ import annotations

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode


def new_mode() -> FakeTensorMode:
    # allow_non_fake_inputs: real constants created inside library code
    # (a torch.tensor(...) of a scale, say) are lifted instead of refused.
    return FakeTensorMode(allow_non_fake_inputs=True)


def to_fake(model: nn.Module, mode: FakeTensorMode, device: torch.device | str = "cpu") -> None:
    """Replace, in place, every meta parameter/buffer of ``model`` by a fake one."""
    device = torch.device(device)
    conv = mode.fake_tensor_converter
    memo: dict[int, torch.Tensor] = {}

    def fake(t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "meta":
            return mode.from_tensor(t)
        return conv.from_meta_and_device(mode, t, device)

    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                memo[id(p)] = nn.Parameter(fake(p.data), requires_grad=p.requires_grad)
            mod._parameters[name] = memo[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = fake(b)
            mod._buffers[name] = memo[id(b)]
