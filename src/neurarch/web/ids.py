"""What a model id may be on the server: a catalog or Hub id (``org/name`` or
``name``), or a ``timm:``/``torchvision:`` name.  Never a path, never a
``python:`` spec, never anything with ``..``, a NUL, a backslash or a percent
sign (a double-encoded ``%252e%252e`` decodes once to ``%2e%2e``)."""

from __future__ import annotations

import re

from ..errors import SourceNotFoundError

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,95})"
_HUB = re.compile(rf"^{_NAME}(?:/{_NAME})?$")
_VISION = re.compile(rf"^(?:timm|torchvision):{_NAME}$")
MAX_ID = 200


class BadModelId(SourceNotFoundError):
    """An id the server refuses before looking anywhere (a path, a python: spec ...)."""

    def __init__(self, spec: str, why: str):
        super().__init__(spec, why)
        self.field = "id"


def check_model_id(raw: str) -> str:
    """``raw`` if the server may look it up, else :class:`BadModelId` (a 400)."""
    if not isinstance(raw, str) or not raw:
        raise BadModelId(str(raw), "empty model id")
    shown = raw[:MAX_ID]
    if len(raw) > MAX_ID:
        raise BadModelId(shown, f"a model id has at most {MAX_ID} characters")
    if "\x00" in raw or "\\" in raw or "%" in raw:
        raise BadModelId(shown.replace("\x00", "\\x00"), "a model id holds no NUL, backslash or percent sign")
    if ".." in raw:
        raise BadModelId(shown, "a model id never holds '..'")
    if raw.startswith(("/", "~", ".")):
        raise BadModelId(shown, "the server looks up model ids, never paths")
    if raw.startswith("python:"):
        raise BadModelId(shown, "the server never runs Python files (python: specs are for the CLI)")
    if raw.endswith(".json") or (not _HUB.match(raw) and not _VISION.match(raw)):
        raise BadModelId(shown, "not a catalog id, a Hugging Face model id (org/name) or a timm:/torchvision: name")
    return raw
