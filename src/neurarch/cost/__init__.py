"""Time and cost: per-operator FLOPs and bytes from the trace, a roofline per card.

* :mod:`.counter` — the dispatch mode that records each op's FLOPs and bytes;
* :mod:`.estimate` — the step's op count (batch 2 and 3 on fake tensors);
* :mod:`.price` — roofline step time, run hours and dollars per card (no torch).

The names below load on first use: importing :mod:`.price` imports no torch.
(The pricing function is ``neurarch.cost.price.estimate``: the package's
``estimate`` attribute is the counting module once it is imported.)
"""

from __future__ import annotations

from typing import Any

__all__ = ["count_step", "PRECISIONS"]


def __getattr__(name: str) -> Any:
    if name == "PRECISIONS":
        from ..options import PRECISIONS

        return PRECISIONS
    if name == "count_step":
        from .estimate import count_step

        return count_step
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
