"""The typed objects of the revision tracker: revisions, file ids, changes, a history.

Everything the library returns is one of these pydantic models; the CLI, the
OSV writer and the store read them, never loose dicts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Optional

from pydantic import BaseModel, Field


class _Model(BaseModel):
    model_config = {"extra": "forbid"}


ChangeKind = Literal["config", "tokenizer", "chat_template", "generation_config", "preprocessor", "weights"]
# What a config change does, decided by building both revisions:
#   graph     - the built model differs (parameter counts, layer shapes or layer types)
#   numerics  - same layers and shapes, but the model computes differently (rope, positions, dtype, eps ...)
#   cosmetic  - both revisions build the same model with the same settings (a rename, a version string)
#   unknown   - one side could not be built (the reason is in ``details``)
Impact = Literal["graph", "numerics", "cosmetic", "unknown"]


class Revision(_Model):
    """One commit of the model repo."""

    commit: str = Field(description="Full 40-hex commit id.")
    date: datetime = Field(description="Commit time, UTC.")
    author: str = ""
    title: str = ""


class FileId(_Model):
    """What identifies one file at one revision without reading it."""

    path: str
    blob: str = Field(description="Git blob id (sha1 of the stored object; for an LFS file, of its pointer).")
    size: int = Field(description="Bytes of the file (for LFS files, of the real object).")
    lfs_sha256: Optional[str] = Field(None, description="sha256 of the real object for an LFS file.")

    @property
    def key(self) -> str:
        """The identity that says whether the content changed."""
        return self.lfs_sha256 or self.blob


class KeyChange(_Model):
    """One key of a JSON file that differs between two revisions (``None`` + ``present`` False = absent)."""

    key: str
    before: Any = None
    after: Any = None
    before_present: bool = True
    after_present: bool = True
    renamed_from: Optional[str] = Field(None, description="The old key name when this is a known rename (torch_dtype -> dtype).")


class PlanFigures(_Model):
    """The figures of one side of a graph change (from ``neurarch.analyze`` on that revision's config)."""

    parameters: Optional[int] = None
    layers: Optional[int] = None
    model_class: Optional[str] = None
    error: Optional[str] = None


class TensorChange(_Model):
    name: str
    before: Optional[str] = Field(None, description="dtype[shape] before, None when added.")
    after: Optional[str] = Field(None, description="dtype[shape] after, None when removed.")


class WeightsSummary(_Model):
    files: list[str] = Field(default_factory=list)
    tensors: int = 0
    scalars: int = 0
    dtypes: dict[str, int] = Field(default_factory=dict, description="dtype -> scalars.")


class Side(_Model):
    spec: str = Field(description="What the user named.")
    provenance: Optional[str] = None
    model_class: Optional[str] = None
    parameters: Optional[int] = None
    checkpoint: Optional[int] = Field(None, description="Scalars in the published checkpoint, when read.")
    layers: Optional[int] = None
    memory: dict[str, int] = Field(default_factory=dict, description="Mode -> peak_bytes (the card need).")
    memory_errors: dict[str, str] = Field(default_factory=dict)
    batch: Optional[int] = None
    seq_len: Optional[int] = None
    max_batch: dict[str, dict[str, int]] = Field(default_factory=dict, description="Card -> mode -> largest batch (0: batch 1 does not fit).")
    cost_card: Optional[str] = None
    cost_usd: Optional[float] = None
    cost_hours: Optional[float] = None
    cheapest_card: Optional[str] = Field(None, description="The card of the cheapest priced run.")
    cheapest_usd: Optional[float] = None
    cheapest_hours: Optional[float] = None
    config: dict = Field(default_factory=dict, description="The config the side was built from.")


class CardFlip(_Model):
    card: str
    mode: str
    before: int
    after: int


class PlanDiff(_Model):
    a: Side
    b: Side
    keys: list[KeyChange] = Field(default_factory=list, description="Config keys that differ (A -> B).")
    stop_fitting: list[CardFlip] = Field(default_factory=list, description="Card and mode where batch 1 fitted at A and does not at B.")
    start_fitting: list[CardFlip] = Field(default_factory=list)
    planned: bool = False


class Change(_Model):
    """One typed change: one file (or the checkpoint's files) at one commit."""

    kind: ChangeKind
    file: str = Field(description="The file that changed (for weights: the checkpoint's files, comma-separated).")
    commit: str = Field(description="The commit that made the change.")
    parent: Optional[str] = Field(None, description="The revision it is compared with (the previous one read).")
    date: datetime
    summary: str = Field(description="One line a user reads first.")
    details: list[str] = Field(default_factory=list, description="Lines that explain the change (Markdown).")
    impact: Optional[Impact] = Field(None, description="config: what the change does to the built model.")
    keys: list[KeyChange] = Field(default_factory=list, description="config / generation / tokenizer / preprocessor: the keys that differ.")
    before: Optional[PlanFigures] = None
    after: Optional[PlanFigures] = None
    tensors: list[TensorChange] = Field(default_factory=list, description="weights: tensors added, removed or changed (first 50).")
    weights_before: Optional[WeightsSummary] = None
    weights_after: Optional[WeightsSummary] = None
    template_diff: Optional[str] = Field(None, description="chat_template: unified diff of the template text.")
    findings: list[str] = Field(default_factory=list, description="Problems this revision now has (tokenizer outgrows the embedding ...).")
    plan: Optional[PlanDiff] = Field(None, description="config, graph changes with --plan: the plan at both revisions side by side.")
    fixed: Optional[str] = Field(None, description="A later commit that returns the same keys (or file) to their earlier value.")
    reverts: Optional[str] = Field(None, description="The earlier commit whose change this one undoes.")
    vanished: bool = Field(False, description="The commit is no longer in the repo's history (force-push, squash).")
    fingerprint_before: Optional[str] = Field(None, description="Content identity before (for revert detection).")
    fingerprint_after: Optional[str] = Field(None, description="Content identity after.")

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.commit, self.file, self.kind)


class RevisionNote(_Model):
    """Something the tracker could not read at one revision (never a crash)."""

    commit: Optional[str] = None
    message: str


class History(_Model):
    """Every revision read and every change found, newest first."""

    repo: str = Field(description="What the user named: a hub id or a local path.")
    source: Literal["git", "hub"]
    url: str = Field(description="The repo's URL (OSV ranges name it).")
    revisions: list[Revision] = Field(default_factory=list, description="Newest first.")
    changes: list[Change] = Field(default_factory=list, description="Newest first.")
    notes: list[RevisionNote] = Field(default_factory=list)
    truncated: bool = Field(False, description="The commit list stopped before the first commit.")
    since: Optional[datetime] = None
    rewritten: list[str] = Field(default_factory=list, description="Commits stored before that the repo no longer has (history rewritten).")
