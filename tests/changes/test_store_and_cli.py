"""The stored tracker (incremental runs, history rewrites) and the CLI faces, driven in-process."""

from __future__ import annotations

import json

import pytest
from changes_fixtures import BASE_CONFIG, build_model_repo, js
from sqlalchemy import func, select

from neurarch.changes import osv, readers, storage
from neurarch.cli import main


class CountingReader:
    """A GitReader that counts what it is asked (to prove a second run reads nothing old)."""

    def __init__(self, path):
        self.inner = readers.GitReader(path)
        self.repo, self.url, self.source = self.inner.repo, self.inner.url, self.inner.source
        self.files_asked: list[str] = []
        self.read_asked: list[tuple[str, str]] = []

    def revisions(self):
        return self.inner.revisions()

    def files(self, commit):
        self.files_asked.append(commit)
        return self.inner.files(commit)

    def read(self, commit, fid):
        self.read_asked.append((commit, fid.path))
        return self.inner.read(commit, fid)

    def header(self, commit, fid):
        self.read_asked.append((commit, fid.path))
        return self.inner.header(commit, fid)


@pytest.fixture
def repo(tmp_path):
    return build_model_repo(tmp_path / "model")


@pytest.fixture
def store_url(tmp_path):
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_second_run_reads_only_new_commits(repo, store_url):
    first = CountingReader(repo.path)
    h1 = storage.track_stored(first, url=store_url)
    assert len(h1.changes) == 5 and len(first.files_asked) == 6
    again = CountingReader(repo.path)
    h2 = storage.track_stored(again, url=store_url)
    assert again.files_asked == [] and again.read_asked == []
    assert [c.model_dump() for c in h2.changes] == [c.model_dump() for c in h1.changes]
    # one new commit: its files, and the baseline's files from the store (not asked again)
    new = repo.commit({"generation_config.json": js({"bos_token_id": 1, "eos_token_id": 2, "max_new_tokens": 128})}, "longer answers", "2026-07-01T00:00:00+00:00")
    third = CountingReader(repo.path)
    h3 = storage.track_stored(third, url=store_url)
    assert third.files_asked == [new]
    assert {c for c, _ in third.read_asked} <= {new, repo.commits[-2]}
    assert h3.changes[0].commit == new and h3.changes[0].details == ["`max_new_tokens`: 64 -> 128"]
    assert len(h3.changes) == 6


def test_rewrite_is_reported_and_vanished_records_marked(repo, store_url):
    from neurarch.store.changes import RepoChange, RepoRevision
    from neurarch.store.db import connect, session

    storage.track_stored(readers.GitReader(repo.path), url=store_url)
    gone = repo.commits[4:]  # the tokenizer change and the revert
    repo.git("reset", "-q", "--hard", repo.commits[3])
    squashed = repo.commit({"config.json": js(dict(BASE_CONFIG, hidden_size=96))}, "squash", "2026-08-01T00:00:00+00:00")
    h = storage.track_stored(readers.GitReader(repo.path), url=store_url)
    assert set(h.rewritten) == set(gone)
    assert {c.commit for c in h.changes if c.vanished} == set(gone)
    width = next(c for c in h.changes if c.commit == repo.commits[1])
    assert width.fixed is None  # the revert that closed it is gone
    assert h.changes[0].commit == squashed and h.changes[0].impact == "graph"
    with session(connect(store_url)) as s:
        assert s.scalar(select(func.count()).select_from(RepoRevision).where(RepoRevision.vanished)) == 2
        assert s.scalar(select(func.count()).select_from(RepoChange)) == 6  # nothing deleted
    text_out = __import__("neurarch.changes.render", fromlist=["text"]).text(h)
    assert "history rewritten: 2 commit(s) read before are gone" in text_out
    recs = osv.records(h)
    for r in recs:
        osv.validate(r)
    assert sum(r["database_specific"]["vanished"] for r in recs) == 2


def test_stored_history_and_osv_lookup(repo, store_url):
    h = storage.track_stored(readers.GitReader(repo.path), url=store_url)
    s = storage.stored_history(str(repo.path), url=store_url)
    assert [c.key for c in s.changes] == [c.key for c in h.changes]
    rec = osv.records(h)[0]
    found = storage.find_osv(rec["id"], url=store_url)
    assert found is not None and found[1].commit == repo.commits[5]


# --------------------------------------------------------------------------- CLI


def test_cli_changes_osv_array(repo, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NEURARCH_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["changes", str(repo.path), "--format", "osv", "-q"]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert len(recs) == 5
    for r in recs:
        osv.validate(r)
    assert (tmp_path / "cache" / "neurarch.db").is_file()  # stored by default


def test_cli_changes_json_and_since(repo, capsys):
    assert main(["changes", str(repo.path), "--format", "json", "--since", "2026-05-01", "--no-store", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["kind"] for c in data["changes"]] == ["config", "tokenizer"]
    assert data["since"].startswith("2026-05-01T00:00:00")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["changes", "/no/such/dir"], "no such folder"),
        (["changes", "justaname"], "not a hub repo id"),
        (["changes", ".", "--since", "June"], "--since wants a date like 2026-06-01"),
        (["changes", ".", "--format", "yaml"], "invalid choice: 'yaml'"),
        (["diff", "only-one"], "the following arguments are required: B"),
    ],
)
def test_cli_bad_arguments_one_line_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_cli_diff_missing_revision_is_one_line(repo, capsys):
    assert main(["diff", f"{repo.path}@{repo.commits[0]}", f"{repo.path}@deadbeef", "--no-verify"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no such revision: 'deadbeef'" in err and len(err.splitlines()) == 1


def test_cli_diff_two_revisions_of_a_clone(repo, capsys):
    # base and head of a pull request, read with git show: hidden 64 x 2 layers -> 128 x 3
    assert main(["diff", f"{repo.path}@{repo.commits[0]}", f"{repo.path}@{repo.commits[1]}", "--format", "markdown", "--no-verify"]) == 0
    out = capsys.readouterr().out
    assert "| Parameters | 202,048 | 551,808 | +349,760 (+173.1 %) |" in out  # hand figures: see test_git_history.py
    assert "`hidden_size`: 64 -> 128; `num_hidden_layers`: 2 -> 3" in out
