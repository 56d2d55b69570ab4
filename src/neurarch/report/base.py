"""The base of every report type: pydantic, strict (unknown fields are an error)."""

from __future__ import annotations

from pydantic import BaseModel


class ReportModel(BaseModel):
    model_config = {"extra": "forbid"}
