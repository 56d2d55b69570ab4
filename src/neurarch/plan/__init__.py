"""Memory planning: simulate training steps on fake tensors, measure real ones.

* :func:`estimate` — a ``memory.<mode>`` report section (full, lora, qlora,
  inference), from a model built on meta;
* :func:`simulate` — the raw simulation (every storage's life, per-step peaks);
* :func:`~neurarch.plan.fit.card_batch` — the largest batch that fits a card;
* :func:`measure_cpu` — a real training step on CPU, measured at the allocator
  (the yardstick of ``benchmarks/memory_accuracy.py``).

See ``docs/accuracy.md`` for the measured error.

The names load on first use, so the torch-free modules of this package
(:mod:`.fit`, :mod:`.curve`, :mod:`.cache`'s fingerprints) import without torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_HOME = {
    "MemoryBreakdown": "..report.memory",
    "MemoryMode": "..report.memory",
    "MemorySection": "..report.memory",
    "Measurement": ".real_step",
    "measure_cpu": ".real_step",
    "measure_cuda": ".real_step",
    "measure_model": ".real_step",
    "real_factory": ".real_step",
    "Simulation": ".memory",
    "estimate": ".memory",
    "simulate": ".memory",
    "simulate_inference": ".memory",
    "with_batch": ".memory",
    "PlanOptionError": ".train",
    "TrainSetup": ".train",
}


__all__ = [
    "estimate",
    "simulate",
    "simulate_inference",
    "with_batch",
    "measure_model",
    "measure_cpu",
    "measure_cuda",
    "real_factory",
    "Simulation",
    "Measurement",
    "MemoryBreakdown",
    "MemoryMode",
    "MemorySection",
    "TrainSetup",
    "PlanOptionError",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(home, __name__), name)
