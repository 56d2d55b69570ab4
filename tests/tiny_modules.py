"""Tiny plain-torch modules whose step the plan tests check by hand and against a real CPU step.

Each is built on meta by :func:`meta_built`, as a plan builds a model; ``measure_cpu`` builds the
class for real.
"""

from __future__ import annotations

import torch
from torch import nn

from neurarch.build import BuiltModel


class WideForward(nn.Module):
    """One linear layer whose forward makes a 64x wider temporary and sums it away: the step's
    first peak is inside forward, where no gradient and no optimizer state exist yet."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(256, 256)

    def forward(self, x):
        h = self.lin(x)
        wide = h.unsqueeze(-1).expand(*h.shape, 64).contiguous()  # 64 x h, freed in forward
        return wide.sum(-1)


class MLP(nn.Module):
    """Two linear layers, small activations beside the weights: the first step's peak is in AdamW's step."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.fc2 = nn.Linear(512, 128)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def meta_built(cls: type[nn.Module]) -> BuiltModel:
    """``cls()`` built on the meta device, as a plan builds a model."""
    with torch.device("meta"):
        meta = cls()
    return BuiltModel(model=meta, config=None, model_class=cls.__name__, library="torch")
