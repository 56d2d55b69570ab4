"""Memory planning: simulate training steps on fake tensors, measure real ones.

* :func:`estimate` — a ``memory.<mode>`` report section (full, lora, qlora,
  inference), from a model built on meta;
* :func:`simulate` — the raw simulation (every storage's life, per-step peaks);
* :func:`~neurarch.plan.fit.card_batch` — the largest batch that fits a card;
* :func:`measure_cpu` — a real training step on CPU, measured at the allocator
  (the yardstick of ``benchmarks/memory_accuracy.py``).

See ``docs/accuracy.md`` for the measured error.
"""

from ..report.memory import MemoryBreakdown, MemoryMode, MemorySection
from .measure import Measurement, measure_cpu, measure_cuda, measure_model, real_factory
from .memory import Simulation, estimate, simulate, simulate_inference, with_batch
from .step import PlanOptionError, TrainSetup

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
