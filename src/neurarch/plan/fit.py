"""What fits on which card: the largest batch per card and mode, and sharded plans.

The memory simulation (:mod:`.memory`) gives a CUDA card's need at a batch.
For each mode we simulate batch 1 and 2 (shared by every card), predict each
card's largest batch from the line through them, and then **simulate that
batch** to check it; when it does not fit we step down along the line through
the simulated points until one does.  A card fits a batch when
``peak_bytes x headroom <= card memory`` (headroom 1.15 by default, as the seed).

Where batch 1 does not fit one card, ``fsdp_plans`` estimates FSDP / ZeRO-3
full sharding: weights, gradients and optimizer state divided over N cards,
activations and scratch not, plus the gather buffer of the largest layer.
That is arithmetic over the simulated breakdown, not a simulation of the
sharded run, and it is labelled so.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from pydantic import BaseModel, Field

from ..cards import Card

DEFAULT_HEADROOM = 1.15
MAX_BATCH_SEARCHED = 65_536


class _Model(BaseModel):
    model_config = {"extra": "forbid"}


class CardFit(_Model):
    name: str
    memory_bytes: int = Field(description="Bytes the plan may fill: PyTorch's usable figure where known, else the nominal size.")
    memory_basis: str = Field("nominal", description="usable (what PyTorch reports, sourced) or nominal (datasheet GB; PyTorch sees a few % less).")
    max_batch: dict[str, int] = Field(default_factory=dict, description="Mode -> largest batch that fits with headroom (0: batch 1 does not).")
    checked: dict[str, bool] = Field(default_factory=dict, description="Mode -> the chosen batch was itself simulated.")


class MultiGpuPlan(_Model):
    card: str
    strategy: str = Field(description="fsdp: FSDP / ZeRO-3 full sharding over identical cards.")
    mode: str
    gpus: int = Field(description="Smallest number of these cards that holds batch 1 per card.")
    per_gpu_bytes: int = Field(description="Estimated need per card at batch 1.")
    max_batch_per_gpu: Optional[int] = Field(None, description="Largest per-card batch at that card count (estimate); None when the simulated peaks do not tell how activations grow.")
    method: str


def largest_batch(peak_at: Callable[[int], int], budget: float, p1: int, p2: Callable[[], int], limit: int = MAX_BATCH_SEARCHED) -> tuple[int, bool]:
    """Largest batch with ``peak_at(batch) <= budget``; (0, True) when batch 1 does not fit.

    ``peak_at`` is a cached simulation.  Returns the batch and whether it was simulated.
    """
    if p1 > budget:
        return 0, True
    slope = p2() - p1
    if slope <= 0:
        return limit, False
    c = int(min(limit, max(1, math.floor((budget - (p1 - slope)) / slope))))
    for _ in range(8):
        pc = peak_at(c)
        if pc <= budget:
            return c, True
        if c <= 2:
            return 1, True  # batch 1 fits (p1 <= budget)
        # Step down along the line through (1, p1) and (c, pc).
        k = (pc - p1) / (c - 1)
        nxt = 1 + math.floor((budget - p1) / k) if k > 0 else c - 1
        c = max(1, min(c - 1, nxt))
    return 1, True


def fit_cards(cards: list[Card], modes: dict[str, Callable[[int], int]], headroom: float = DEFAULT_HEADROOM) -> list[CardFit]:
    """``modes`` maps a mode to a cached ``batch -> peak_bytes`` simulation."""
    out = [CardFit(name=c.name, memory_bytes=c.memory_bytes, memory_basis="usable" if c.usable_gib is not None else "nominal") for c in cards]
    for mode, peak_at in modes.items():
        p1 = peak_at(1)
        for card, fit in zip(cards, out):
            b, checked = largest_batch(peak_at, card.memory_bytes / headroom, p1, lambda: peak_at(2))
            fit.max_batch[mode] = b
            fit.checked[mode] = checked
    return out


def fsdp_plans(cards: list[Card], mode: str, breakdown, peak_at_1: int, per_sample: int | None, largest_layer_bytes: int, headroom: float = DEFAULT_HEADROOM, max_gpus: int = 512) -> list[MultiGpuPlan]:
    """FSDP / ZeRO-3 estimates for cards that cannot hold batch 1 alone.

    per card(N) = (weights + gradients + optimizer) / N + activations + temporary
                  + overhead + 2 x largest layer (the gathered layer and the prefetched next one)
    """
    sharded = breakdown.weights + breakdown.gradients + breakdown.optimizer
    rest = breakdown.activations + breakdown.temporary + breakdown.overhead + 2 * largest_layer_bytes
    plans = []
    for card in cards:
        budget = card.memory_bytes / headroom
        if peak_at_1 <= budget or rest >= budget:
            continue  # fits alone, or cannot fit however many cards share the weights
        n = math.ceil(sharded / (budget - rest))
        if n > max_gpus:
            continue
        need = sharded / n + rest
        extra = int((budget - need) // per_sample) if per_sample and per_sample > 0 else None
        plans.append(
            MultiGpuPlan(
                card=card.name,
                strategy="fsdp",
                mode=mode,
                gpus=n,
                per_gpu_bytes=int(need),
                max_batch_per_gpu=None if extra is None else 1 + max(0, extra),
                method="estimate from the simulated batch-1 breakdown: weights, gradients and optimizer state divided by N; "
                "activations, scratch and overhead per card; plus two gathered copies of the largest layer",
            )
        )
    return plans


def render_rows(fits: list[CardFit], modes: list[str]) -> list[list[str]]:
    return [[f.name, f"{f.memory_bytes / 2**30:,.1f} GiB", *(str(f.max_batch.get(m, "—")) for m in modes)] for f in fits]


def gib(x: Optional[int]) -> str:
    return "—" if x is None else f"{x / 2**30:,.2f} GiB"
