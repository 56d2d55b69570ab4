"""The report: the one typed object every renderer and face sees.

``Report.model_dump_json()`` is the Index JSON (see ``docs/json.md``).  Paths
documented there are stable: add fields freely, but rename or remove one only
with a ``SCHEMA_VERSION`` major bump.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from .base import ReportModel
from .cost import CostSection
from .fit import CardFit, MultiGpuPlan
from .memory import MemorySection
from .model import InputInfo, ModelInfo, Params, PassResult, Structure
from .verify import Finding, Verifier

SCHEMA_VERSION = "1.2"


class Report(ReportModel):
    schema_version: str = SCHEMA_VERSION
    tool: str = Field(description="neurarch version that made the report.")
    model: ModelInfo
    input: Optional[InputInfo] = None
    forward_pass: PassResult
    backward_pass: Optional[PassResult] = None
    params: Params
    structure: Structure
    memory: Optional[MemorySection] = Field(None, description="GPU memory to fine-tune and to serve (with --plan).")
    cards: list[CardFit] = Field(default_factory=list, description="Largest batch per card and mode (with --plan).")
    multi_gpu: list[MultiGpuPlan] = Field(default_factory=list, description="Sharded plans where batch 1 does not fit one card.")
    cost: Optional[CostSection] = Field(None, description="What it costs to run (with --plan or --cost).")
    findings: list[Finding] = Field(default_factory=list, description="What the verifier says, most severe first.")
    verifier: Optional[Verifier] = Field(None, description="Counts by severity, rules run/disabled/not applicable/failed, output kind.")
    errors: dict[str, str] = Field(
        default_factory=dict,
        description="Sections that failed, by JSON path (cost, multi_gpu, cards, verifier), each with its one-line error; the rest of the report stands. A memory mode that fails is under memory.errors.",
    )
    warnings: list[str] = Field(default_factory=list)
