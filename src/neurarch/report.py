"""The report: the one typed object every renderer sees.

``Report.model_dump_json()`` is the Index JSON (see ``docs/json.md``).  Paths
documented there are stable: add fields freely, but rename or remove one only
with a ``SCHEMA_VERSION`` major bump.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field

from .cost.schema import CostSection
from .plan.fit import CardFit, MultiGpuPlan
from .plan.schema import MemorySection
from .verify.schema import Finding, Verifier

SCHEMA_VERSION = "1.2"


class _Model(BaseModel):
    model_config = {"extra": "forbid"}


class ModelInfo(_Model):
    id: str = Field(description="What the user asked for, as resolved (catalog/hub id or path).")
    source: Literal["local", "catalog", "hub", "timm", "torchvision", "python"]
    provenance: str = Field(description="Where the config came from, with tier/commit where known.")
    architecture: Optional[str] = Field(None, description="architectures[0] from the config, as published.")
    model_class: Optional[str] = Field(None, description="The class actually built.")
    model_type: Optional[str] = None
    library: str = Field(description="Library and version that built the model, e.g. transformers 5.24.0.")
    revision: Optional[str] = None
    notes: list[str] = Field(default_factory=list, description="Fallbacks and caveats of the build.")


class InputTensor(_Model):
    name: str
    shape: list[int]
    dtype: str


class InputInfo(_Model):
    shape: list[int] = Field(description="Shape of the main input, batch first.")
    batch: int
    seq_len: Optional[int] = None
    image_size: Optional[list[int]] = None
    tensors: list[InputTensor] = Field(default_factory=list, description="Every tensor passed to forward.")
    how: str = Field(description="How the shape was chosen (config field, default, user option).")


class PassResult(_Model):
    ok: bool
    error: Optional[str] = Field(None, description="Exception type and message when ok is false.")
    module: Optional[str] = Field(None, description="Qualified name of the innermost module running at the failure.")
    seconds: Optional[float] = None


class Node(_Model):
    index: int
    name: str = Field(description="Qualified module name; for functional ops, the module that called them plus '.<op>#k'.")
    type: str = Field(description="Readable layer type (Conv2D, Linear, Multi-Head Attention, Add ...).")
    module_class: Optional[str] = Field(None, description="Python class of the module; None for functional ops.")
    output_shape: Optional[list[int]] = Field(None, description="Output shape without the batch dimension.")
    parameters: int = Field(0, description="Parameters of this row (its whole subtree), tied ones once.")
    depth: int = Field(0, description="Depth of the module in the tree (root children = 1).")
    calls: int = Field(1, description="How many times the forward pass called it.")


class Structure(_Model):
    layers: int = Field(description="Rows in the layer table at this granularity.")
    depth: Optional[int] = Field(None, description="--depth used; None = default granularity (compute layers, attention/MLP blocks as one row).")
    modules: int = Field(description="Modules in the tree, root excluded.")
    nodes: list[Node] = Field(default_factory=list)
    unused_modules: list[str] = Field(default_factory=list, description="Modules with parameters that the forward pass never called.")
    unused_parameters: list[str] = Field(default_factory=list, description="Parameters that received no gradient in the backward pass.")


class CountDifference(_Model):
    scalars: int = Field(description="Signed: positive = the graph has more than the checkpoint.")
    cause: str
    tensors: list[str] = Field(default_factory=list)


class Params(_Model):
    parameters: int = Field(description="Unique parameter scalars (tied weights once).")
    trainable: int
    buffers: int = Field(description="Persistent buffer scalars a checkpoint stores (BatchNorm statistics ...), step counters excluded.")
    counters: int = Field(0, description="Step-counter scalars (BatchNorm num_batches_tracked), kept apart from buffers.")
    non_persistent_buffers: int = Field(0, description="Buffers the module has but does not save (rotary inv_freq, causal masks).")
    derived: int = Field(description="parameters + buffers: what the graph says a checkpoint holds.")
    checkpoint: Optional[int] = Field(None, description="Scalars in the published checkpoint (never computed from the graph); None when none was read.")
    checkpoint_source: Optional[str] = None
    checkpoint_date: Optional[str] = None
    checkpoint_counters: Optional[int] = Field(None, description="Step counters found in the checkpoint header (not in checkpoint).")
    delta: Optional[int] = Field(None, description="derived - checkpoint.")
    delta_pct: Optional[float] = Field(None, description="100 * delta / checkpoint.")
    explained: Optional[bool] = Field(None, description="True when the differences below add up to delta exactly.")
    differences: list[CountDifference] = Field(default_factory=list)
    tied: list[list[str]] = Field(default_factory=list, description="Groups of parameter names sharing one tensor.")


class Report(_Model):
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
    errors: dict[str, str] = Field(default_factory=dict, description="Sections that failed, by JSON path (cost, multi_gpu, cards, verifier), each with its one-line error; the rest of the report stands. A memory mode that fails is under memory.errors.")
    warnings: list[str] = Field(default_factory=list)


if __name__ == "__main__":  # python -m neurarch.report > docs/report.schema.json
    import json

    print(json.dumps(Report.model_json_schema(), indent=2))
