"""What was built and traced: the model, its input, the passes, the layer table and the counts (JSON paths ``model``, ``input``, ``forward_pass``, ``backward_pass``, ``structure``, ``params``)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from .base import ReportModel


class ModelInfo(ReportModel):
    id: str = Field(description="What the user asked for, as resolved (catalog/hub id or path).")
    source: Literal["local", "catalog", "hub", "timm", "torchvision", "python"]
    provenance: str = Field(description="Where the config came from, with tier/commit where known.")
    architecture: Optional[str] = Field(None, description="architectures[0] from the config, as published.")
    model_class: Optional[str] = Field(None, description="The class actually built.")
    model_type: Optional[str] = None
    library: str = Field(description="Library and version that built the model, e.g. transformers 5.24.0.")
    revision: Optional[str] = None
    notes: list[str] = Field(default_factory=list, description="Fallbacks and caveats of the build.")


class InputTensor(ReportModel):
    name: str
    shape: list[int]
    dtype: str


class InputInfo(ReportModel):
    shape: list[int] = Field(description="Shape of the main input, batch first.")
    batch: int
    seq_len: Optional[int] = None
    image_size: Optional[list[int]] = None
    tensors: list[InputTensor] = Field(default_factory=list, description="Every tensor passed to forward.")
    how: str = Field(description="How the shape was chosen (config field, default, user option).")


class PassResult(ReportModel):
    ok: bool
    error: Optional[str] = Field(None, description="Exception type and message when ok is false.")
    module: Optional[str] = Field(None, description="Qualified name of the innermost module running at the failure.")
    seconds: Optional[float] = None


class Node(ReportModel):
    index: int
    name: str = Field(description="Qualified module name; for functional ops, the module that called them plus '.<op>#k'.")
    type: str = Field(description="Readable layer type (Conv2D, Linear, Multi-Head Attention, Add ...).")
    module_class: Optional[str] = Field(None, description="Python class of the module; None for functional ops.")
    output_shape: Optional[list[int]] = Field(None, description="Output shape without the batch dimension.")
    parameters: int = Field(0, description="Parameters of this row (its whole subtree), tied ones once.")
    depth: int = Field(0, description="Depth of the module in the tree (root children = 1).")
    calls: int = Field(1, description="How many times the forward pass called it.")


class Structure(ReportModel):
    layers: int = Field(description="Rows in the layer table at this granularity.")
    depth: Optional[int] = Field(None, description="--depth used; None = default granularity (compute layers, attention/MLP blocks as one row).")
    modules: int = Field(description="Modules in the tree, root excluded.")
    nodes: list[Node] = Field(default_factory=list)
    unused_modules: list[str] = Field(default_factory=list, description="Modules with parameters that the forward pass never called.")
    unused_parameters: list[str] = Field(default_factory=list, description="Parameters that received no gradient in the backward pass.")


class CountDifference(ReportModel):
    scalars: int = Field(description="Signed: positive = the graph has more than the checkpoint.")
    cause: str
    tensors: list[str] = Field(default_factory=list)


class Params(ReportModel):
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
