"""Stage 1 of the pipeline: turn what the user typed into a :class:`ModelSource`.

Resolution order (the report says which one was used):

1. ``timm:NAME``, ``torchvision:NAME``, ``python:FILE.py:Factory`` prefixes;
2. a local path: a ``config.json`` or a folder holding one (plus safetensors headers);
3. the bundled offline catalog;
4. the Hugging Face Hub (``config.json`` and safetensors headers, never weights).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import RemoteCodeError, SourceNotFoundError
from .base import CheckpointInfo, ModelSource

__all__ = ["resolve", "ModelSource", "CheckpointInfo", "check_remote_code"]

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


def _looks_like_path(spec: str) -> bool:
    return spec.startswith((".", "/", "~")) or spec.endswith(".json") or spec.count("/") > 1 or "\\" in spec


def check_remote_code(config: dict, model_id: str, trust_remote_code: bool) -> None:
    """Refuse configs that need code from the model repo unless the user allowed it."""
    if trust_remote_code:
        return
    if config.get("auto_map"):
        raise RemoteCodeError(model_id, "its config has an auto_map")
    if config.get("trust_remote_code"):
        raise RemoteCodeError(model_id, "its config sets trust_remote_code")


def resolve(
    spec: str,
    *,
    revision: str | None = None,
    trust_remote_code: bool = False,
    offline: bool | None = None,
) -> ModelSource:
    """Resolve a model spec to a source.  Raises a NeurarchError subclass on failure."""
    spec = spec.strip()
    if not spec:
        raise SourceNotFoundError(spec, "empty model name")
    if spec.startswith(("timm:", "torchvision:")):
        from . import vision

        return vision.load(spec)
    if spec.startswith("python:"):
        from . import python_file

        return python_file.load(spec, trust_remote_code=trust_remote_code)

    path = Path(spec).expanduser()
    if path.exists():
        from . import local

        src = local.load(path)
    elif _looks_like_path(spec):
        raise SourceNotFoundError(spec, "no such file or folder")
    else:
        from . import catalog

        src = catalog.load(spec) if revision is None else None
        if src is None:
            if not HUB_ID.match(spec):
                raise SourceNotFoundError(spec, "not a path, a catalog id or a Hugging Face model id")
            from . import hub

            src = hub.load(spec, revision=revision, offline=offline)
    if src.config is not None:
        check_remote_code(src.config, src.id, trust_remote_code)
    return src
