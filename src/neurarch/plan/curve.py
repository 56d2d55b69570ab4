"""The simulated memory curve, and a simulation result as JSON (no torch here).

A simulation at one batch gives the mode's figures (:class:`~neurarch.report.memory.MemoryMode`)
and its :class:`Curve`; both are stored as JSON by the simulation cache
(:mod:`.cache`) and the report cache (:mod:`neurarch.warm`), which reads them
back without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..report.memory import MemoryMode


@dataclass
class Curve:
    """Per op label, what a CUDA card holds right after it (rounded live bytes plus the
    fixed overhead) at ``batch``; the peak_bytes is the largest value."""

    batch: int
    values: dict
    sharded: dict = field(default_factory=dict)  # label -> weights + gradients + optimizer state alive there (what FSDP divides)
    segments: list | None = None  # [(segment, bytes)] in execution order, for a pipeline cut (full mode)
    exact: dict = field(default_factory=dict)  # label -> live bytes before the allocator's rounding, plus the same overhead (the batch search's bound)


def encode_result(mem: MemoryMode, curve: Curve | None) -> dict:
    """One simulation's ``(MemoryMode, Curve)`` as JSON."""
    return {
        "memory": mem.model_dump(mode="json"),
        "curve": None
        if curve is None
        else {
            "batch": curve.batch,
            "values": [[list(k), v] for k, v in curve.values.items()],
            "sharded": [[list(k), v] for k, v in curve.sharded.items()],
            "segments": None if curve.segments is None else [list(s) for s in curve.segments],
            "exact": [[list(k), v] for k, v in curve.exact.items()],
        },
    }


def decode_result(raw: dict) -> tuple[MemoryMode, Curve | None]:
    """What :func:`encode_result` wrote, back as ``(MemoryMode, Curve)``."""
    mem = MemoryMode.model_validate(raw["memory"])
    c = raw["curve"]
    curve = (
        None
        if c is None
        else Curve(
            c["batch"],
            {tuple(k): v for k, v in c["values"]},
            {tuple(k): v for k, v in c["sharded"]},
            None if c["segments"] is None else [tuple(s) for s in c["segments"]],
            {tuple(k): v for k, v in c.get("exact", [])},
        )
    )
    return mem, curve
