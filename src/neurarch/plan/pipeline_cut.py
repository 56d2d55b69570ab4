"""Contiguous pipeline cut balanced by memory: which layers go on which card.

Where batch 1 does not fit one card, a pipeline puts the model's top-level
layers, in execution order, on ``k`` cards (``k = 2`` is the seed's two-card
cut).  Each card holds what its own layers need; the cut is good when the
fullest card is as empty as it can be.

:func:`balanced_cut` takes the segments in execution order, each with the
bytes it needs on its card (its weights, gradients and optimizer state and
the activations it keeps for backward: the caller's figures), and returns
the exact optimum over every contiguous split into ``k`` non-empty stages:

1. the largest stage's bytes is as small as possible;
2. among those, the next-largest stage is as small as possible, and so on
   (the stage sums sorted from the largest down compare lexicographically);
3. among those, the earliest boundaries.

Rule 1 is the one that matters (it decides whether ``k`` cards suffice);
2 and 3 only make the answer unique, so it does not depend on loop order.

The stage's bytes are the sum of its segments' bytes: an additive model.
A fixed per-card amount (CUDA context, cuBLAS workspaces) is the same on
every stage and does not move the optimal cut, so the caller adds it after.
What the model does not see, and the caller must decide: weights shared by
two segments (tied embeddings count on both cards, or on one), the
activation a stage sends to the next, and micro-batching (1F1B keeps up to
``k - i`` micro-batches' activations on stage ``i``).

Cost: O(k^2 * n^2) for n segments and k stages (a dynamic programme over
suffixes); n is a model's top-level layers (tens to hundreds), k a few cards.
"""

from __future__ import annotations

import bisect
from typing import Sequence

from pydantic import BaseModel, Field

from ..errors import InputError


class Cut(BaseModel):
    """A contiguous split of ``n`` segments into ``stages`` non-empty stages."""

    model_config = {"extra": "forbid", "frozen": True}

    stages: int = Field(description="Number of stages (cards).")
    boundaries: list[int] = Field(description="Index (into the segments) of the first segment of stages 2..k; len = stages - 1, increasing.")
    cut_after: list[str] = Field(description="Per boundary: name of the last segment before it.")
    cut_before: list[str] = Field(description="Per boundary: name of the first segment after it.")
    stage_segments: list[list[str]] = Field(description="Segment names on each stage, in execution order.")
    stage_bytes: list[int] = Field(description="Sum of the segments' bytes on each stage.")
    max_stage_bytes: int = Field(description="The largest stage's bytes: what the fullest card must hold.")
    bottleneck_stage: int = Field(description="Index of the (first) stage holding max_stage_bytes.")
    total_bytes: int = Field(description="Sum over all segments (= sum of stage_bytes).")


def _validate(segments: Sequence[tuple[str, int]], stages: int) -> tuple[list[str], list[int]]:
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise InputError(f"pipeline cut: stages must be a positive integer, got {stages!r}")
    names, sizes = [], []
    for i, seg in enumerate(segments):
        try:
            name, nbytes = seg
        except (TypeError, ValueError):
            raise InputError(f"pipeline cut: segment {i} must be a (name, bytes) pair, got {seg!r}") from None
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise InputError(f"pipeline cut: segment {i} ({name!r}) needs a non-negative integer byte count, got {nbytes!r}")
        names.append(str(name))
        sizes.append(nbytes)
    if not sizes:
        raise InputError("pipeline cut: no segments to place")
    if stages > len(sizes):
        raise InputError(f"pipeline cut: {stages} stages need at least {stages} segments, got {len(sizes)}")
    return names, sizes


def _with(part: int, key: tuple[int, ...]) -> tuple[int, ...]:
    """``key`` (sorted from the largest down) with ``part`` inserted in its place."""
    neg = [-x for x in key]
    i = bisect.bisect_right(neg, -part)
    return key[:i] + (part,) + key[i:]


def balanced_cut(segments: Sequence[tuple[str, int]], stages: int = 2) -> Cut:
    """The contiguous ``stages``-way split of ``segments`` whose largest stage is smallest.

    ``segments``: ``(name, bytes)`` in execution order; bytes >= 0 (integers).
    Ties are broken as the module docstring says (next-largest stage, then the
    earliest boundaries), so the result is unique.  Raises
    :class:`~neurarch.errors.InputError` for no segments, fewer segments than
    stages, a stage count below 1, or a negative or non-integer byte count.
    """
    names, sizes = _validate(segments, stages)
    n, k = len(sizes), stages
    prefix = [0]
    for s in sizes:
        prefix.append(prefix[-1] + s)

    def part(a: int, b: int) -> int:
        return prefix[b] - prefix[a]

    # best[j][i]: optimal stage sums (sorted, largest first) of segments[i:] in j non-empty stages.
    # Optimal substructure: inserting the same part into two such keys keeps their order, so the
    # best suffix key always gives the best whole key (tests/plan/test_pipeline_cut.py checks it by brute force).
    best: list[dict[int, tuple[int, ...]]] = [{}, {i: (part(i, n),) for i in range(n)}]
    for j in range(2, k + 1):
        starts = [0] if j == k else range(k - j, n - j + 1)  # the segments before i fill k - j stages
        row = {}
        for i in starts:
            row[i] = min(_with(part(i, e), best[j - 1][e]) for e in range(i + 1, n - j + 2))
        best.append(row)

    # Walk from the front: each stage ends at the earliest boundary that still allows the optimum.
    bounds, start = [], 0
    for j in range(k, 1, -1):
        target = best[j][start]
        end = next(e for e in range(start + 1, n - j + 2) if _with(part(start, e), best[j - 1][e]) == target)
        bounds.append(end)
        start = end

    edges = [0, *bounds, n]
    stage_bytes = [part(a, b) for a, b in zip(edges, edges[1:])]
    top = max(stage_bytes)
    return Cut(
        stages=k,
        boundaries=bounds,
        cut_after=[names[b - 1] for b in bounds],
        cut_before=[names[b] for b in bounds],
        stage_segments=[names[a:b] for a, b in zip(edges, edges[1:])],
        stage_bytes=stage_bytes,
        max_stage_bytes=top,
        bottleneck_stage=stage_bytes.index(top),
        total_bytes=prefix[-1],
    )
