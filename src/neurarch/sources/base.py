"""Types shared by every model source.

A source turns what the user typed (a path, a catalog id, a hub id, a
``timm:`` name...) into a :class:`ModelSource`: the config (or a factory for
models that have none), where it came from, and — when one could be read
without touching weights — the published checkpoint's scalar count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

SourceKind = Literal["local", "catalog", "hub", "timm", "torchvision", "python"]


@dataclass
class CheckpointInfo:
    """Scalars in a published checkpoint, never computed from our own graph.

    ``scalars`` counts every tensor element except step counters
    (BatchNorm ``num_batches_tracked``), which are counted apart in
    ``counters`` because they are bookkeeping, not model state, and hubs
    and converters disagree on keeping them.
    """

    scalars: int
    source: str  # human-readable: which file/header/record the figure came from
    counters: int = 0
    # name -> shape, when a real header was read (local file or hub); lets us
    # explain a delta tensor by tensor.  None for a recorded figure.
    tensors: dict[str, tuple[int, ...]] | None = None
    dtypes: dict[str, int] = field(default_factory=dict)  # dtype -> scalars
    date: str | None = None
    note: str | None = None  # what the record itself says about its contents


@dataclass
class Factored:
    """What a library's factory made (timm, torchvision): the module, and what the report says about it."""

    model: Any  # an nn.Module on meta
    library: str  # "timm 1.0.9"
    architecture: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class ModelSource:
    """A resolved model: config or factory, plus provenance."""

    id: str
    kind: SourceKind
    provenance: str
    config: dict[str, Any] | None = None
    revision: str | None = None
    checkpoint: CheckpointInfo | None = None
    # For sources without a transformers config (timm, torchvision, python:).
    factory: Callable[[], Any] | None = None
    # Per-sample input shape the source knows (timm pretrained_cfg, ...).
    default_input_shape: tuple[int, ...] | None = None
    notes: list[str] = field(default_factory=list)
    # The model folder's tokenizer (tokenizer.json / tokenizer_config.json read as JSON), when it has one.
    tokenizer: Any = None
