"""Time and cost: per-operator FLOPs and bytes from the trace, a roofline per card.

* :mod:`.counter` — the dispatch mode that records each op's FLOPs and bytes;
* :mod:`.estimate` — roofline step time, run hours and dollars per card;
* :mod:`.schema` — the report section (JSON path ``cost``).
"""

from .estimate import PRECISIONS, count_step, estimate

__all__ = ["count_step", "estimate", "PRECISIONS"]
