"""Fixture models for ``python:`` sources (tests/sources/test_python_source.py).

Small on purpose: the parameter counts are worked out by hand in the tests.
"""

import torch
from torch import nn

VOCAB = 100
DIM = 16
HIDDEN = 32


class TiedWeightsModel(nn.Module):
    """Embedding -> MLP -> output projection that shares the embedding's weight.

    Input: a float vector of DIM features per sample (``--input-shape 16``);
    the tied projection maps it to VOCAB logits.
    """

    def __init__(self, vocab: int = VOCAB, dim: int = DIM, hidden: int = HIDDEN):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)  # vocab x dim
        self.up = nn.Linear(dim, hidden)  # dim x hidden + hidden
        self.act = nn.ReLU()
        self.down = nn.Linear(hidden, dim)  # hidden x dim + dim
        self.head = nn.Linear(dim, vocab, bias=False)  # vocab x dim, tied below
        self.head.weight = self.embed.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.down(self.act(self.up(x))))


def make_small():
    """A function factory: the same model with a narrower vocabulary."""
    return TiedWeightsModel(vocab=10)


def needs_args(width):
    return TiedWeightsModel(dim=width)


def raises():
    raise ValueError("width must be even")


def not_a_module():
    return 42


INSTANCE = TiedWeightsModel()
WIDTH = 16
