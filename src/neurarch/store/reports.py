"""The web app's tables: computed reports, and permalinks of pasted configs.

A report is stored under the five things it depends on:

* ``source``: the model as asked (``microsoft/resnet-50``), or ``paste:<hash>``
  for a pasted config;
* ``revision``: the revision it was computed at: what the user pinned
  (``?revision=``), else ``""`` (the bundled catalog, or the Hub's default
  branch); ``resolved_revision`` keeps the commit the report names;
* ``options_hash``: SHA-256 of the canonical JSON of the options;
* ``code_fingerprint``: :func:`neurarch.store.fingerprint.code_fingerprint`;
* ``library_versions``: torch/transformers/peft versions.

A permalink's id is the SHA-256 of the canonical JSON of ``{"config": ...,
"options": ...}``: the same paste always gets the same link.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from dataclasses import dataclass

from sqlalchemy import DateTime, Float, Integer, String, Text, UniqueConstraint, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from .db import Base, session
from .fingerprint import code_fingerprint, library_versions


def canonical_json(value) -> str:
    """JSON with sorted keys and no whitespace: equal values, equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def content_hash(value) -> str:
    """SHA-256 (hex) of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


class StoredReport(Base):
    __tablename__ = "reports"
    __table_args__ = (UniqueConstraint("source", "revision", "options_hash", "code_fingerprint", "library_versions", name="uq_reports_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(512))
    revision: Mapped[str] = mapped_column(String(255), default="")
    options_hash: Mapped[str] = mapped_column(String(64))
    code_fingerprint: Mapped[str] = mapped_column(String(64))
    library_versions: Mapped[str] = mapped_column(String(255))
    resolved_revision: Mapped[str | None] = mapped_column(String(255), nullable=True)
    options_json: Mapped[str] = mapped_column(Text)
    report_json: Mapped[str] = mapped_column(Text)
    compute_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[_dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Permalink(Base):
    __tablename__ = "permalinks"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # content_hash({"config", "options"})
    config_json: Mapped[str] = mapped_column(Text)
    options_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[_dt.datetime] = mapped_column(DateTime(timezone=True), default=_now)


@dataclass(frozen=True)
class ReportKey:
    source: str
    revision: str
    options_hash: str
    code_fingerprint: str
    library_versions: str

    @classmethod
    def make(cls, source: str, revision: str | None, options: dict) -> "ReportKey":
        return cls(source, revision or "", content_hash(options), code_fingerprint(), library_versions())


def get_report(engine, key: ReportKey) -> str | None:
    """The stored report JSON under ``key``, or None."""
    with session(engine) as s:
        row = s.scalars(
            select(StoredReport.report_json).where(
                StoredReport.source == key.source,
                StoredReport.revision == key.revision,
                StoredReport.options_hash == key.options_hash,
                StoredReport.code_fingerprint == key.code_fingerprint,
                StoredReport.library_versions == key.library_versions,
            )
        ).first()
        return row


def put_report(engine, key: ReportKey, options: dict, report_json: str, *, resolved_revision: str | None = None, seconds: float | None = None) -> None:
    """Store a report under ``key``; a report already there (another process won the race) is kept."""
    with session(engine) as s:
        s.add(
            StoredReport(
                source=key.source,
                revision=key.revision,
                options_hash=key.options_hash,
                code_fingerprint=key.code_fingerprint,
                library_versions=key.library_versions,
                resolved_revision=resolved_revision,
                options_json=canonical_json(options),
                report_json=report_json,
                compute_seconds=seconds,
            )
        )
        try:
            s.commit()
        except IntegrityError:
            s.rollback()


def count_reports(engine) -> int:
    from sqlalchemy import func

    with session(engine) as s:
        return s.scalar(select(func.count()).select_from(StoredReport)) or 0


def permalink_id(config: dict, options: dict) -> str:
    return content_hash({"config": config, "options": options})


def put_permalink(engine, config: dict, options: dict) -> str:
    """Store a pasted config with its options; returns the permalink id (idempotent)."""
    pid = permalink_id(config, options)
    with session(engine) as s:
        if s.get(Permalink, pid) is None:
            s.add(Permalink(id=pid, config_json=canonical_json(config), options_json=canonical_json(options)))
            try:
                s.commit()
            except IntegrityError:
                s.rollback()
    return pid


def get_permalink(engine, pid: str) -> tuple[dict, dict] | None:
    """``(config, options)`` of a permalink, or None."""
    with session(engine) as s:
        row = s.get(Permalink, pid)
        if row is None:
            return None
        return json.loads(row.config_json), json.loads(row.options_json)
