"""Errors of the revision tracker (each a NeurarchError: one line on the CLI, exit 2)."""

from __future__ import annotations

from ..errors import NeurarchError


class ChangesError(NeurarchError, ValueError):
    """A source the tracker cannot read as a model repo, or a bad argument."""

    def __init__(self, source: str, detail: str):
        self.source = source
        super().__init__(f"{source}: {detail}")


class RevisionError(ChangesError, LookupError):
    """A revision that the repo does not have."""

    def __init__(self, source: str, revision: str, detail: str = "no such revision"):
        self.revision = revision
        super().__init__(source, f"{detail}: {revision!r}")
