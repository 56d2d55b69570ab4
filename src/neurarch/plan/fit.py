"""What fits on which card: the largest batch per card and mode, and sharded plans.

The memory simulation (:mod:`.memory`) gives a CUDA card's need at a batch,
and what the card holds right after every op (the curve).  For each mode we
simulate batch 1 and 2 (shared by every card); each op's bytes lie on a line
in the batch, so each card's largest batch is where the first of those lines
crosses its memory.  Then we **simulate that batch** to check it; when it does
not fit (allocator rounding is not linear) we predict again between the
largest batch known to fit and the one that failed.  A card fits a batch when
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


def batch_from_curves(a, b, budget: float, limit: int = MAX_BATCH_SEARCHED) -> int | None:
    """The largest batch whose every op label stays within ``budget``, each label's
    value taken on the line through curves ``a`` and ``b`` (two batches of the same
    model), or None when the two runs do not line up op by op.

    Every storage alive at a labelled op is either fixed (weights, optimizer state)
    or made per sample, so each label's bytes grow linearly with the batch; the
    peak is the largest label, and the batch must keep each one under the budget.
    """
    if a is None or b is None or a.batch == b.batch or a.values.keys() != b.values.keys():
        return None
    best = limit
    for key, va in a.values.items():
        slope = (b.values[key] - va) / (b.batch - a.batch)
        if slope <= 0:
            continue
        best = min(best, a.batch + math.floor((budget - va) / slope))
    return max(best, 0)


def largest_batch(sim_at: Callable[[int], tuple], budget: float, limit: int = MAX_BATCH_SEARCHED) -> tuple[int, bool]:
    """Largest batch with ``peak_bytes <= budget``; (0, True) when batch 1 does not fit.

    ``sim_at(batch)`` is a cached simulation returning ``(MemoryMode, Curve)``.
    The batch is predicted from the per-op lines through batch 1 and 2, then
    simulated; if it does not fit, predicted again between the largest batch
    known to fit and the one that failed.  Returns the batch and whether it was simulated.
    """
    known: dict[int, tuple] = {1: sim_at(1)}
    if known[1][0].peak_bytes > budget:
        return 0, True
    known[2] = sim_at(2)
    c = batch_from_curves(known[1][1], known[2][1], budget, limit)
    if c is None:  # the runs do not line up: the line through the two peaks
        p1, p2 = known[1][0].peak_bytes, known[2][0].peak_bytes
        if p2 <= p1:
            return limit, False
        c = int(min(limit, max(1, math.floor(1 + (budget - p1) / (p2 - p1)))))
    for _ in range(8):
        c = max(1, min(limit, c))
        if c not in known:
            known[c] = sim_at(c)
        lo = max(b for b, (m, _) in known.items() if m.peak_bytes <= budget)
        if known[c][0].peak_bytes <= budget:
            return c, True
        if c - 1 <= lo:
            return lo, True
        nxt = batch_from_curves(known[lo][1], known[c][1], budget, limit)
        if nxt is None:  # the line through the two peaks
            pl, pc = known[lo][0].peak_bytes, known[c][0].peak_bytes
            nxt = lo + math.floor((budget - pl) * (c - lo) / (pc - pl)) if pc > pl else c - 1
        c = max(lo, min(c - 1, nxt))
    return max(b for b, (m, _) in known.items() if m.peak_bytes <= budget), True


def fit_cards(cards: list[Card], modes: dict[str, Callable[[int], tuple]], headroom: float = DEFAULT_HEADROOM) -> list[CardFit]:
    """``modes`` maps a mode to a cached ``batch -> (MemoryMode, Curve)`` simulation."""
    out = [CardFit(name=c.name, memory_bytes=c.memory_bytes, memory_basis="usable" if c.usable_gib is not None else "nominal") for c in cards]
    for mode, sim_at in modes.items():
        for card, fit in zip(cards, out):
            b, checked = largest_batch(sim_at, card.memory_bytes / headroom)
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
