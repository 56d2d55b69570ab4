"""Report section types for "What it costs to run" (JSON path ``cost``)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from .base import ReportModel


class CostAssumptions(ReportModel):
    epochs: int
    samples: Optional[int] = Field(None, description="Samples per epoch (vision and encoder models).")
    tokens: Optional[int] = Field(None, description="Tokens per epoch (language models; --tokens).")
    batch: int = Field(description="Batch asked for (default 32); a card that cannot hold it uses its largest.")
    pricing: str = Field("", description="Which run each card's row prices, and why.")
    interconnect: str = Field("", description="FSDP rows: what the card-to-card traffic assumes, with its source.")
    precision: str
    seq_len: Optional[int] = None
    compute_efficiency: float = Field(description="Achievable fraction of the peak tensor rate.")
    bandwidth_efficiency: float = Field(description="Achievable fraction of the memory bandwidth.")
    launch_seconds: float = Field(description="Fixed overhead per operator (kernel launch).")
    optimizer: str
    sources: str
    work_method: str = Field(
        "traced whole", description="How the per-op work was read: the whole model traced, or a deep model's layer stack cut to 2 and 3 repeats and extrapolated (exact for repeated layers)."
    )


class CostCard(ReportModel):
    name: str
    mode: str = Field("full", description="What the row prices: full (fine-tuning every weight), lora or qlora (the memory plan's mode that fits).")
    gpus: int = Field(1, description="Cards the run uses: 1, or N for an FSDP run where full fine-tuning fits no single card; usd is for all of them.")
    batch: int = Field(description="Batch per card.")
    fits: Optional[bool] = Field(None, description="Batch fits the card per the memory plan; None when no plan was made.")
    step_seconds: Optional[float] = None
    steps: Optional[int] = None
    run_hours: Optional[float] = None
    usd: Optional[float] = None
    mfu: Optional[float] = Field(None, description="Model FLOPs utilisation: traced FLOPs per step / (step time x peak).")
    bound: Optional[Literal["compute", "memory"]] = None
    compute_bound_share: Optional[float] = Field(None, description="Share of the step time spent in compute-bound operators.")
    cheapest: bool = False
    fastest: bool = False
    note: Optional[str] = None


class CostHeadline(ReportModel):
    card: str
    usd: Optional[float] = None
    run_hours: Optional[float] = None
    batch: Optional[int] = None
    mode: Optional[str] = None
    gpus: Optional[int] = None


class CostSection(ReportModel):
    assumptions: CostAssumptions
    flops_per_sample: int = Field(description="Forward + backward FLOPs of one sample at the input shape.")
    flops_per_token: Optional[int] = None
    cards: list[CostCard] = Field(default_factory=list)
    headline: CostHeadline
    cheapest: Optional[str] = None
    fastest: Optional[str] = None
    ops_without_formula: list[str] = Field(default_factory=list, description="Ops whose FLOP formula failed on these arguments (counted as 0).")
