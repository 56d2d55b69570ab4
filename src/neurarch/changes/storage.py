"""The tracker with a memory: revisions, file ids and changes kept in the store.

``track_stored(reader)`` asks the repo for its commit list, then reads only the
commits the store does not have yet, each run of new commits compared with the
revision just before it (read again as a baseline: local for a git clone, from
the blob cache for the hub).  Stored commits that the commit list no longer
holds mean the history was rewritten (force-push, squash): their revisions and
changes are marked ``vanished``, reported, and kept.  Everything is written in
one transaction at the end, so a failed run loses nothing already stored.
"""

from __future__ import annotations

import datetime as _dt
import json
from datetime import datetime
from typing import Callable

from sqlalchemy import select

from . import track
from .osv import record_id
from .types import Change, FileId, History, Revision, RevisionNote


class _StoredFiles:
    """A reader whose ``files()`` answers from the store for revisions read before."""

    def __init__(self, reader, known: dict[str, dict[str, FileId]]):
        self._reader = reader
        self._known = known
        self.repo, self.url, self.source = reader.repo, reader.url, reader.source

    def files(self, commit: str) -> dict[str, FileId]:
        if commit not in self._known:
            self._known[commit] = self._reader.files(commit)
        return self._known[commit]

    def read(self, commit, fid):
        return self._reader.read(commit, fid)

    def header(self, commit, fid):
        return self._reader.header(commit, fid)


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=_dt.timezone.utc) if dt.tzinfo is None else dt.astimezone(_dt.timezone.utc)


def track_stored(reader, since: datetime | None = None, url: str | None = None, engine=None, progress: Callable[[str], None] | None = None, plan=None) -> History:
    from ..store.changes import RepoChange, RepoFile, RepoRevision, TrackedRepo
    from ..store.db import connect, session

    engine = engine or connect(url)
    revs, truncated, list_notes = reader.revisions()
    oldest_first = list(reversed(revs))
    listed = {r.commit for r in revs}
    now = datetime.now(_dt.timezone.utc)
    with session(engine) as s, s.begin():
        repo = s.scalars(select(TrackedRepo).where(TrackedRepo.source == reader.source, TrackedRepo.name == reader.repo)).first()
        if repo is None:
            repo = TrackedRepo(source=reader.source, name=reader.repo, url=reader.url, truncated=truncated, notes_json="[]", last_read_at=now)
            s.add(repo)
            s.flush()
        stored = {r.commit: r for r in s.scalars(select(RepoRevision).where(RepoRevision.repo_id == repo.id))}
        # -- history rewritten: stored commits the list no longer has (a cut-short list proves nothing older than its end)
        oldest_listed = oldest_first[0].date if oldest_first else None
        for commit, row in stored.items():
            if commit in listed or row.vanished:
                continue
            if truncated and oldest_listed is not None and _utc(row.date) < oldest_listed:
                continue
            row.vanished = True
        vanished = {c for c, r in stored.items() if r.vanished}
        # -- what is new: runs of consecutive listed commits the store lacks
        known_files: dict[str, dict[str, FileId]] = {}
        if stored:
            rows = s.scalars(select(RepoFile).where(RepoFile.revision_id.in_([r.id for r in stored.values()])))
            by_id = {r.id: r.commit for r in stored.values()}
            for f in rows:
                known_files.setdefault(by_id[f.revision_id], {})[f.path] = FileId(path=f.path, blob=f.blob, size=f.size, lfs_sha256=f.lfs_sha256)
        todo = [i for i, r in enumerate(oldest_first) if (r.commit not in stored or stored[r.commit].vanished) and (since is None or r.date >= since)]
        runs: list[list[int]] = []
        for i in todo:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
        wrapped = _StoredFiles(reader, known_files)
        tracker = track.Tracker(wrapped, since, progress, plan)
        new_revs: list[Revision] = []
        for run in runs:
            walk = ([oldest_first[run[0] - 1]] if run[0] > 0 else []) + [oldest_first[i] for i in run]
            tracker.run(walk)
            new_revs += [oldest_first[i] for i in run]
        # -- write the new revisions, their file ids and notes
        seq = {r.commit: i for i, r in enumerate(oldest_first)}
        notes_by_commit: dict[str, list[str]] = {}
        for n in tracker.notes:
            if n.commit:
                notes_by_commit.setdefault(n.commit, []).append(n.message)
        for r in new_revs:
            rev_row = stored.get(r.commit)
            if rev_row is None:
                rev_row = RepoRevision(
                    repo_id=repo.id,
                    commit=r.commit,
                    date=r.date,
                    author=r.author,
                    title=r.title,
                    seq=seq[r.commit],
                    notes_json=json.dumps(notes_by_commit.get(r.commit, [])),
                    vanished=False,
                    read_at=now,
                )
                s.add(rev_row)
                s.flush()
                stored[r.commit] = rev_row
                try:
                    ids = wrapped.files(r.commit)
                except Exception:
                    ids = {}
                for fid in ids.values():
                    if track.tracked(fid.path):
                        s.add(RepoFile(revision_id=rev_row.id, path=fid.path, blob=fid.blob, size=fid.size, lfs_sha256=fid.lfs_sha256))
            else:  # a commit that came back after being marked vanished
                rev_row.vanished = False
                rev_row.notes_json = json.dumps(notes_by_commit.get(r.commit, []))
        for commit, rev_row in stored.items():
            if commit in seq:
                rev_row.seq = seq[commit]
        # -- every change, old and new, in commit order; reverts linked again over the whole list
        change_rows = {(c.commit, c.file, c.kind): c for c in s.scalars(select(RepoChange).where(RepoChange.repo_id == repo.id))}
        changes: list[Change] = []
        for change_row in change_rows.values():
            c = Change.model_validate_json(change_row.change_json)
            c.vanished = change_row.commit in vanished
            changes.append(c)
        changes += [c for c in tracker.changes if c.key not in change_rows]
        if plan is not None:  # graph changes stored by a run without --plan get their plan now
            for c in changes:
                if c.kind == "config" and c.impact == "graph" and c.plan is None and not c.vanished and c.parent:
                    _add_plan(wrapped, c, plan, progress)
        order = {c: (_utc(r.date), r.seq) for c, r in stored.items()}
        changes.sort(key=lambda c: order.get(c.commit, (_utc(c.date), 0)))
        for c in changes:
            if c.fixed and (c.fixed in vanished or c.vanished):
                c.fixed = None
            if c.reverts and (c.reverts in vanished or c.vanished):
                c.reverts = None
        track.link_reverts(changes)
        for c in changes:
            stored_change = change_rows.get(c.key)
            data = c.model_dump_json()
            if stored_change is None:
                s.add(
                    RepoChange(
                        repo_id=repo.id,
                        osv_id=record_id(reader.url, c),
                        commit=c.commit,
                        kind=c.kind,
                        file=c.file,
                        date=c.date,
                        summary=c.summary,
                        fixed=c.fixed,
                        vanished=c.vanished,
                        change_json=data,
                    )
                )
            else:
                stored_change.fixed, stored_change.vanished, stored_change.change_json = c.fixed, c.vanished, data
        repo.url, repo.truncated, repo.last_read_at = reader.url, truncated, now
        repo.notes_json = json.dumps([n.message for n in list_notes])
        # -- the history as stored
        all_revs = sorted(stored.values(), key=lambda r: (_utc(r.date), r.seq), reverse=True)
        history_revs = [Revision(commit=r.commit, date=_utc(r.date), author=r.author, title=r.title) for r in all_revs if not r.vanished]
        notes = list(list_notes)
        for stored_rev in all_revs:
            notes += [RevisionNote(commit=stored_rev.commit, message=m) for m in json.loads(stored_rev.notes_json or "[]")]
    out_changes = list(reversed(changes))
    if since is not None:
        history_revs = [r for r in history_revs if r.date >= since]
        out_changes = [c for c in out_changes if c.date >= since]
        keep = {r.commit for r in history_revs}
        notes = [n for n in notes if n.commit is None or n.commit in keep]
    for c in out_changes:
        c.date = _utc(c.date)
    return History(
        repo=reader.repo,
        source=reader.source,
        url=reader.url,
        revisions=history_revs,
        changes=out_changes,
        notes=notes,
        truncated=truncated,
        since=since,
        rewritten=sorted(vanished, key=lambda c: order.get(c, (now, 0))),
    )


def _add_plan(reader, change: Change, plan, progress) -> None:
    """The plan at both revisions of a stored graph change (configs read again by blob id)."""
    from ..errors import NeurarchError
    from . import plandiff

    parent = change.parent
    if parent is None:
        return
    try:
        sides = []
        for commit in (parent, change.commit):
            fid = reader.files(commit).get(track.CONFIG)
            if fid is None:
                return
            sides.append(json.loads(reader.read(commit, fid)))
        if progress:
            progress(f"planning both sides of config.json at {change.commit[:12]}")
        change.plan = plandiff.diff_configs(sides[0], sides[1], plan, parent[:12], change.commit[:12])
    except (NeurarchError, ValueError) as e:
        change.details.append(f"the plan could not be made: {str(e).splitlines()[0]}")


def stored_history(name: str, source: str | None = None, engine=None, url: str | None = None) -> History | None:
    """What the store holds for a repo, without reading it again (the web pages use this)."""
    from ..store.changes import RepoChange, RepoRevision, TrackedRepo
    from ..store.db import connect, session

    engine = engine or connect(url)
    with session(engine) as s:
        q = select(TrackedRepo).where(TrackedRepo.name == name)
        if source:
            q = q.where(TrackedRepo.source == source)
        repo = s.scalars(q).first()
        if repo is None:
            return None
        revs = sorted(s.scalars(select(RepoRevision).where(RepoRevision.repo_id == repo.id)), key=lambda r: (_utc(r.date), r.seq), reverse=True)
        rows = s.scalars(select(RepoChange).where(RepoChange.repo_id == repo.id))
        changes = [Change.model_validate_json(r.change_json) for r in rows]
        order = {r.commit: (_utc(r.date), r.seq) for r in revs}
        changes.sort(key=lambda c: order.get(c.commit, (_utc(c.date), 0)), reverse=True)
        for c in changes:
            c.date = _utc(c.date)
        notes = [RevisionNote(message=m) for m in json.loads(repo.notes_json or "[]")]
        for r in revs:
            notes += [RevisionNote(commit=r.commit, message=m) for m in json.loads(r.notes_json or "[]")]
        return History(
            repo=repo.name,
            source=repo.source,
            url=repo.url,
            revisions=[Revision(commit=r.commit, date=_utc(r.date), author=r.author, title=r.title) for r in revs if not r.vanished],
            changes=changes,
            notes=notes,
            truncated=repo.truncated,
            rewritten=[r.commit for r in revs if r.vanished],
        )


def find_osv(osv_id: str, engine=None, url: str | None = None) -> tuple[History, Change] | None:
    """The stored change with this OSV id, and its repo's stored history."""
    from ..store.changes import RepoChange, TrackedRepo
    from ..store.db import connect, session

    engine = engine or connect(url)
    with session(engine) as s:
        row = s.scalars(select(RepoChange).where(RepoChange.osv_id == osv_id)).first()
        if row is None:
            return None
        repo = s.get(TrackedRepo, row.repo_id)
        if repo is None:  # the repo row went with its changes (a delete between the two reads)
            return None
        name, source, key = repo.name, repo.source, (row.commit, row.file, row.kind)
    h = stored_history(name, source, engine=engine)
    if h is None:
        return None
    for c in h.changes:
        if c.key == key:
            return h, c
    return None
