"""What fits on which card (JSON paths ``cards`` and ``multi_gpu``)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from .base import ReportModel


class CardFit(ReportModel):
    name: str
    memory_bytes: int = Field(description="Bytes the plan may fill: PyTorch's usable figure where known, else the nominal size.")
    memory_basis: str = Field(
        "nominal",
        description="usable (the total PyTorch reports for the card, sourced in the cards file) or nominal (datasheet GB, where no such report was found; the usable figure can differ either way).",
    )
    max_batch: dict[str, int] = Field(default_factory=dict, description="Mode -> largest batch that fits with headroom (0: batch 1 does not).")
    checked: dict[str, bool] = Field(
        default_factory=dict,
        description=(
            "Mode -> the chosen batch's figures were worked out at that batch, not only predicted from smaller ones: simulated, "
            "or, between two smaller simulated batches and a larger one whose every storage lies on one line, read off those lines."
        ),
    )


class MultiGpuPlan(ReportModel):
    card: str
    strategy: str = Field(description="fsdp: FSDP / ZeRO-3 full sharding over identical cards; pipeline: the model's layers split in two contiguous stages, one per card.")
    mode: str
    gpus: int = Field(
        description="Smallest number of these cards that holds batch 1 per card; 0 when no number does (what each card keeps whole, activations and scratch, is already more than it has)."
    )
    per_gpu_bytes: int = Field(description="Estimated need per card at batch 1 (pipeline: the fuller card; gpus 0: what each card would need however many there were).")
    max_batch_per_gpu: Optional[int] = Field(None, description="Largest per-card batch at that card count (estimate; not estimated for pipeline).")
    cut_after: Optional[str] = Field(None, description="pipeline: the last segment (layer or module) on the first card.")
    stage_bytes: Optional[list[int]] = Field(None, description="pipeline: each card's estimated need, in order.")
    method: str
