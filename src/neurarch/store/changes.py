"""The revision tracker's tables: repos tracked, revisions read, file ids, typed changes.

* ``tracked_repos``: one row per repo (``source`` git|hub + ``name`` as the user wrote it);
* ``repo_revisions``: each commit read, with its notes; ``vanished`` once the repo's
  history no longer has it (force-push, squash) - kept and marked, never deleted;
* ``repo_files``: the tracked files' ids at each revision read (blob id, size, LFS sha256);
* ``repo_changes``: one typed change per row (the :class:`neurarch.changes.types.Change`
  as JSON), with its OSV id for lookups and ``vanished`` like its revision.
"""

from __future__ import annotations

import datetime as _dt

from sqlalchemy import Boolean, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from .db import Base


class TrackedRepo(Base):
    __tablename__ = "tracked_repos"
    __table_args__ = (UniqueConstraint("source", "name", name="uq_tracked_repos_source_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(512))
    url: Mapped[str] = mapped_column(String(1024))
    truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    notes_json: Mapped[str] = mapped_column(Text, default="[]")  # notes about the whole repo (commit list cut short ...)
    last_read_at: Mapped[_dt.datetime] = mapped_column(DateTime(timezone=True))


class RepoRevision(Base):
    __tablename__ = "repo_revisions"
    __table_args__ = (UniqueConstraint("repo_id", "commit", name="uq_repo_revisions_commit"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("tracked_repos.id", ondelete="CASCADE"), index=True)
    commit: Mapped[str] = mapped_column(String(64))
    date: Mapped[_dt.datetime] = mapped_column(DateTime(timezone=True))
    author: Mapped[str] = mapped_column(String(512), default="")
    title: Mapped[str] = mapped_column(Text, default="")
    seq: Mapped[int] = mapped_column(Integer, default=0)  # position, oldest first, in the commit list it was read from
    notes_json: Mapped[str] = mapped_column(Text, default="[]")
    vanished: Mapped[bool] = mapped_column(Boolean, default=False)
    read_at: Mapped[_dt.datetime] = mapped_column(DateTime(timezone=True))


class RepoFile(Base):
    __tablename__ = "repo_files"
    __table_args__ = (UniqueConstraint("revision_id", "path", name="uq_repo_files_path"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    revision_id: Mapped[int] = mapped_column(ForeignKey("repo_revisions.id", ondelete="CASCADE"), index=True)
    path: Mapped[str] = mapped_column(String(1024))
    blob: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(Integer, default=0)
    lfs_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)


class RepoChange(Base):
    __tablename__ = "repo_changes"
    __table_args__ = (UniqueConstraint("repo_id", "commit", "file", "kind", name="uq_repo_changes_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("tracked_repos.id", ondelete="CASCADE"), index=True)
    osv_id: Mapped[str] = mapped_column(String(64), unique=True)
    commit: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(32))
    file: Mapped[str] = mapped_column(String(1024))
    date: Mapped[_dt.datetime] = mapped_column(DateTime(timezone=True))
    summary: Mapped[str] = mapped_column(Text)
    fixed: Mapped[str | None] = mapped_column(String(64), nullable=True)
    vanished: Mapped[bool] = mapped_column(Boolean, default=False)
    change_json: Mapped[str] = mapped_column(Text)
