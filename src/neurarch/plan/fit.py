"""What fits on which card: the largest batch per card and mode, and sharded plans.

The memory simulation (:mod:`.memory`) gives a CUDA card's need at a batch,
and what the card holds right after every op (the curve).  For each mode we
simulate batch 1 and 2 (shared by every card; 2 and 3 when batch 1 runs other
ops); each op's bytes lie on a line in the batch, so each card's largest batch
is where the first of those lines crosses its memory.  Then we **simulate that
batch** to check it, the card with the most memory first: where that simulation,
storage by storage, lies on the lines through the earlier batches, every batch in
between is read off those lines instead of simulated (exact, as long as the model
runs the same ops at every batch in between: :func:`neurarch.plan.by_depth._between`).
Allocator rounding makes the lines inexact for some models
(a ViT's 197 tokens give tensor sizes that are not multiples of 512 bytes), so
a batch that fits is the answer only once the next batch is shown not to fit:
simulated, or by a lower bound from the unrounded bytes (:func:`_next_cannot_fit`);
else we predict again, between the largest batch known to fit and the smallest
known not to.  A card fits a batch when ``peak_bytes x headroom <= card memory``
(headroom 1.15 by default, as the seed).

Where batch 1 does not fit one card, ``fsdp_plans`` estimates FSDP / ZeRO-3
full sharding: at every op, the weights, gradients and optimizer state alive
there divided over N cards, activations and scratch not, plus the gather
buffer of the largest layer.  That is arithmetic over the simulated curves,
not a simulation of the sharded run, and it is labelled so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..cards import Card
from ..options import DEFAULT_HEADROOM
from ..report.fit import CardFit, MultiGpuPlan

MAX_BATCH_SEARCHED = 65_536


def card_fit(card: Card) -> CardFit:
    """An empty row of the cards table for this card."""
    return CardFit(name=card.name, memory_bytes=card.memory_bytes, memory_basis="usable" if card.usable_gib is not None else "nominal")


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
    The batch is predicted from the per-op lines through batch 1 and 2 (2 and 3
    when batch 1 runs other ops), then simulated.  A batch that fits is the
    answer only once the next one is shown not to (:func:`_next_cannot_fit`:
    simulated, or bounded from the simulations); otherwise the search goes on,
    between the largest batch known to fit and the smallest known not to.
    Returns the batch and whether it was simulated.
    """
    known: dict[int, tuple] = {1: sim_at(1)}
    if known[1][0].peak_bytes > budget:
        return 0, True
    known[2] = sim_at(2)
    a, b = 1, 2
    if not _aligned(known[1][1], known[2][1]) and limit >= 3:
        known[3] = sim_at(3)  # batch 1 runs other ops (a size-1 dimension): the lines start at 2
        if known[3][0].peak_bytes > budget:
            return (2, True) if known[2][0].peak_bytes <= budget else (1, True)
        a, b = 2, 3
    c = batch_from_curves(known[a][1], known[b][1], budget, limit)
    if c is None:  # the runs do not line up: the line through the two peaks
        pa, pb = known[a][0].peak_bytes, known[b][0].peak_bytes
        # Peaks that do not grow (a peak in the optimizer step, beside small activations)
        # say nothing about large batches: simulate the largest searched (a fake tensor's
        # cost does not depend on its size) and search down from there.
        c = limit if pb <= pa else int(min(limit, max(1, math.floor(a + (budget - pa) * (b - a) / (pb - pa)))))
    last_lo = None
    for _ in range(40):  # a handful in practice; halving 65,536 takes 16
        c = max(1, min(limit, c))
        if c not in known:
            known[c] = sim_at(c)
        lo = max(x for x, (m, _) in known.items() if m.peak_bytes <= budget)
        hi = min((x for x, (m, _) in known.items() if m.peak_bytes > budget), default=None)
        if lo >= limit or hi == lo + 1 or _next_cannot_fit(known, lo, budget):
            return lo, True
        bisect = last_lo is not None and lo > last_lo and hi is not None  # a guess between fitted, unproven: the lines undershoot
        last_lo = lo
        if hi is None:  # lo fits and lo + 1 may: up, along the line through lo and the batch below it
            below = max(x for x in known if x < lo)
            nxt = batch_from_curves(known[below][1], known[lo][1], budget, limit)
            if nxt is None:
                pb, pl = known[below][0].peak_bytes, known[lo][0].peak_bytes
                nxt = lo + math.floor((budget - pl) * (lo - below) / (pl - pb)) if pl > pb else lo + 1
            c = max(lo + 1, nxt)
        else:  # between the two
            nxt = batch_from_curves(known[lo][1], known[hi][1], budget, limit)
            if nxt is None:  # the line through the two peaks
                pl, ph = known[lo][0].peak_bytes, known[hi][0].peak_bytes
                nxt = lo + math.floor((budget - pl) * (hi - lo) / (ph - pl)) if ph > pl else lo + 1
            c = (lo + hi) // 2 if bisect else max(lo + 1, min(hi - 1, nxt))
    return max(x for x, (m, _) in known.items() if m.peak_bytes <= budget), True


def _aligned(a, b) -> bool:
    return a is not None and b is not None and a.values.keys() == b.values.keys()


def _next_cannot_fit(known: dict[int, tuple], lo: int, budget: float) -> bool:
    """Whether batch ``lo + 1`` is shown not to fit without simulating it.

    * Simulated: it does not fit.
    * The lines are exact: the curves at two smaller batches predict every op's
      bytes at ``lo`` exactly, and their lines put ``lo + 1`` over the budget
      (what the planner has always assumed of linear models; allocator rounding
      makes some models' lines inexact, and then this does not hold).
    * A bound: an op's live bytes before rounding are a sum of tensor sizes,
      each a polynomial in the batch with nonnegative coefficients, so they grow
      at least as fast from ``lo`` to ``lo + 1`` as on average from a smaller
      batch to ``lo``; rounding only adds.  If that lower bound is over the
      budget at some op, ``lo + 1`` does not fit.
    """
    nxt = known.get(lo + 1)
    if nxt is not None:
        return nxt[0].peak_bytes > budget
    curve = known[lo][1]
    if curve is None:
        return False
    smaller = sorted((x for x in known if x < lo and _aligned(known[x][1], curve)), reverse=True)
    for i, x in enumerate(smaller):
        for y in smaller[i + 1 :]:
            cx, cy = known[x][1], known[y][1]
            exact = cy.values.keys() == curve.values.keys() and all(cy.values[k] * (x - y) + (cx.values[k] - cy.values[k]) * (lo - y) == v * (x - y) for k, v in curve.values.items())
            if exact and batch_from_curves(cy, cx, budget) == lo:
                return True
    if curve.exact and smaller:
        x = smaller[0]
        low = known[x][1].exact
        if low.keys() == curve.exact.keys():
            for k, v in curve.exact.items():
                if v + (v - low[k]) / (lo - x) > budget:
                    return True
    return False


HOPPER_OR_NEWER = ("H100", "H200", "GH200", "B100", "B200", "GB200")  # cuBLAS's 32 MiB workspace (sm90 / sm100)


def workspace_saving(card: Card, mode: str) -> int:
    """Bytes a card needs less than the figures assume: ``peak_bytes`` counts the
    Hopper/Blackwell cuBLAS workspace; older cards get PyTorch's smaller default
    (one workspace in inference, two in training).  Custom cards: none (the larger)."""
    from .overhead import CUBLAS_WORKSPACE_HOPPER, CUBLAS_WORKSPACE_OTHER

    if card.custom or card.name.upper().startswith(HOPPER_OR_NEWER):
        return 0
    return (CUBLAS_WORKSPACE_HOPPER - CUBLAS_WORKSPACE_OTHER) * (1 if mode == "inference" else 2)


def _budget(card: Card, mode: str, headroom: float) -> float:
    """The simulated ``peak_bytes`` that still fits ``card`` with headroom."""
    return card.memory_bytes / headroom + workspace_saving(card, mode)


def card_batch(sim_at: Callable[[int], tuple], card: Card, mode: str, headroom: float = DEFAULT_HEADROOM) -> tuple[int, bool]:
    """The largest batch of ``mode`` that fits ``card`` with headroom (see :func:`largest_batch`)."""
    return largest_batch(sim_at, _budget(card, mode, headroom))


def fsdp_plans(cards: list[Card], mode: str, c1, c2, largest_layer_bytes: int, headroom: float = DEFAULT_HEADROOM, max_gpus: int = 512) -> list[MultiGpuPlan]:
    """FSDP / ZeRO-3 estimates for cards that cannot hold batch 1 alone.

    ``c1`` and ``c2`` are the simulated curves at batch 1 and 2: per op, what
    the card holds (``values``) and how much of it is weights, gradients and
    optimizer state (``sharded``).  With N cards each op needs

        values - sharded x (1 - 1/N) + 2 x largest layer

    (each card keeps 1/N of the state; the gathered layer and the prefetched
    next one are whole).  N is the smallest count that holds batch 1; the
    per-card batch is where the first op's line through batch 1 and 2 crosses
    the card.  Arithmetic over the simulation, not a simulation of the sharded
    run (no NCCL buffers, no reduce-scatter scratch): labelled so.
    """
    if c1 is None or c2 is None or c1.values.keys() != c2.values.keys() or not c1.sharded:
        return []
    keys = list(c1.values)
    v1 = [c1.values[k] for k in keys]
    sh = [c1.sharded.get(k, 0) for k in keys]
    slope = [(c2.values[k] - c1.values[k]) / (c2.batch - c1.batch) for k in keys]
    gather = 2 * largest_layer_bytes

    def need(n: int) -> float:
        keep = 1 - 1 / n
        return max(v - s * keep for v, s in zip(v1, sh)) + gather

    plans = []
    for card in cards:
        budget = card.memory_bytes / headroom
        if max(v1) <= budget:
            continue  # fits alone
        if need(max_gpus) > budget:  # not even max_gpus cards hold batch 1: say so, and how much stays per card
            floor = max(v - s for v, s in zip(v1, sh)) + gather
            plans.append(
                MultiGpuPlan(
                    card=card.name,
                    strategy="fsdp",
                    mode=mode,
                    gpus=0,
                    per_gpu_bytes=int(floor),
                    max_batch_per_gpu=0,
                    method=f"no number of these cards holds batch 1 (up to {max_gpus} tried): what each card keeps whole at "
                    "batch 1 (activations, scratch and two gathered copies of the largest layer) is more than it has",
                )
            )
            continue
        lo, hi = 2, max_gpus
        while lo < hi:  # need(n) falls as n grows
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if need(mid) <= budget else (mid + 1, hi)
        n = lo
        keep = 1 - 1 / n
        b = MAX_BATCH_SEARCHED
        for v, s, g in zip(v1, sh, slope):
            if g > 0:
                b = min(b, c1.batch + math.floor((budget - gather - (v - s * keep)) / g))
        plans.append(
            MultiGpuPlan(
                card=card.name,
                strategy="fsdp",
                mode=mode,
                gpus=n,
                per_gpu_bytes=int(need(n)),
                max_batch_per_gpu=max(1, b),
                method="estimate from the simulated steps at batch 1 and 2, op by op: weights, gradients and optimizer "
                "state (and the optimizer step's scratch) divided by N, the rest per card, plus two gathered copies of the "
                "largest layer; autocast's low-precision weight copies are sharded too (FSDP's mixed precision gathers "
                "them per layer); no NCCL buffers",
            )
        )
    return plans


def pipeline_plans(cards: list[Card], mode: str, segments: list[tuple[str, int]] | None, per_card_extra: int, full_peak: int, headroom: float = DEFAULT_HEADROOM) -> list[MultiGpuPlan]:
    """The seed's two-card pipeline, for cards that cannot hold batch 1 alone:
    the contiguous cut that minimises the fuller card (:func:`.pipeline_cut.balanced_cut`).

    Each segment's bytes are its parameters' weights, gradients and optimizer
    state plus the activations its forward saved (batch 1, one micro-batch in
    flight); each card adds ``per_card_extra`` (the simulated peak's scratch
    and the fixed CUDA overhead), which is what makes this an estimate.
    """
    if not segments or len(segments) < 2:
        return []
    from .pipeline_cut import balanced_cut

    cut = balanced_cut(segments, 2)
    stages = [b + per_card_extra for b in cut.stage_bytes]
    plans = []
    for card in cards:
        budget = card.memory_bytes / headroom
        if full_peak <= budget or max(stages) > budget:
            continue
        plans.append(
            MultiGpuPlan(
                card=card.name,
                strategy="pipeline",
                mode=mode,
                gpus=2,
                per_gpu_bytes=max(stages),
                cut_after=cut.cut_after[0],
                stage_bytes=stages,
                method="estimate: the layers in execution order split where the fuller card is emptiest; per card its "
                "layers' weights, gradients and optimizer state and their saved activations (batch 1, one micro-batch), "
                "plus the simulated peak's scratch and the CUDA overhead",
            )
        )
    return plans


@dataclass
class ModeResult:
    """One memory mode's job: its figures at the input batch, each card's
    ``(largest batch, whether that batch was simulated)``, and for full
    fine-tuning where a card cannot hold batch 1, what the multi-GPU plans are
    made from: the mode at batch 1 and the per-op curves at batch 1 and 2.
    ``sims``: every simulation it read, ``{batch: encoded (MemoryMode, Curve)}``
    (what the report cache keeps to answer other cards and headrooms)."""

    memory: Any  # report.memory.MemoryMode
    fits: dict = field(default_factory=dict)  # card name -> (batch, checked)
    multi: Optional[tuple] = None  # (MemoryMode at batch 1, Curve at 1, Curve at 2)
    sims: dict = field(default_factory=dict)


def mode_result(sim_at: Callable[[int], tuple], input_batch: int, cards: list[Card] | None, mode: str, headroom: float = DEFAULT_HEADROOM) -> ModeResult:
    """A mode's figures at the input batch, each card's largest batch, and for
    full fine-tuning where a card cannot hold batch 1, the simulations at batch 1
    and 2 the multi-GPU plans are made from.  ``sim_at(batch)`` gives a cached
    ``(MemoryMode, Curve)``: a simulation in a cold plan, a stored one in a warm one."""
    out = ModeResult(memory=sim_at(input_batch)[0])
    # The largest card first: once its batch is simulated, a cut model's smaller cards' batches
    # lie between it and batch 2, where their runs can be read off the lines the three simulated
    # batches confirm (neurarch.plan.by_depth._between).  The rows keep the cards' order.
    for card in sorted(cards or [], key=lambda c: -_budget(c, mode, headroom)):
        out.fits[card.name] = card_batch(sim_at, card, mode, headroom)
    out.fits = {c.name: out.fits[c.name] for c in cards or []}
    if mode == "full" and any(b == 0 for b, _ in out.fits.values()):
        one, c1 = sim_at(1)
        out.multi = (one, c1, sim_at(2)[1])
    return out


def render_rows(fits: list[CardFit], modes: list[str]) -> list[list[str]]:
    return [[f.name, f"{f.memory_bytes / 2**30:,.1f} GiB", *(str(f.max_batch.get(m, "—")) for m in modes)] for f in fits]


def gib(x: Optional[int]) -> str:
    return "—" if x is None else f"{x / 2**30:,.2f} GiB"
