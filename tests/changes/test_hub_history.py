"""The hub path against the suite's fake hub on 127.0.0.1 (tests/hubserver.py), the real huggingface_hub client.

The six revisions of changes_fixtures.py are served as six hub commits; the
tracker must find the same typed changes as on the git clone, read only the
files whose ids changed, never a weight byte past the headers, and nothing at
all on a second run but the commit list.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from changes_fixtures import add_to_fake_hub

from hubserver import FakeHub
from neurarch.changes import osv, readers, storage, track
from neurarch.changes.errors import ChangesError
from neurarch.errors import HubError, SourceNotFoundError

REPO = "neurarch-test/tiny-llama-history"
CUT = "neurarch-test/cut-history"


@pytest.fixture(scope="module")
def fake_hub():
    h = FakeHub()
    h.shas = add_to_fake_hub(h, REPO)
    add_to_fake_hub(h, CUT)
    h.fail_commits_page[CUT] = 2  # the second page of CUT's commit list answers 500
    with h:
        yield h


@pytest.fixture
def online(fake_hub, tmp_path, monkeypatch):
    """What HF_ENDPOINT / HF_HUB_CACHE / HF_HUB_OFFLINE would have set at import time (as tests/sources/test_hub.py does)."""
    from huggingface_hub import constants

    from neurarch.sources import hub

    ep = fake_hub.endpoint
    monkeypatch.setattr(constants, "ENDPOINT", ep)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", ep + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", True)
    monkeypatch.setenv(hub.CACHE_ENV, str(tmp_path / "neurarch-cache"))
    for var in ("HF_HUB_OFFLINE", "HF_HUB_ETAG_TIMEOUT", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    fake_hub.clear_log()
    fake_hub.commits_page_size = 50
    return fake_hub


def test_hub_history_matches_the_git_one(online):
    shas = online.shas
    h = track.track(readers.HubReader(REPO))
    assert [r.commit for r in h.revisions] == list(reversed(shas))
    assert [(c.commit, c.kind) for c in reversed(h.changes)] == [
        (shas[1], "config"), (shas[2], "chat_template"), (shas[3], "weights"), (shas[4], "tokenizer"), (shas[5], "config"),
    ]  # fmt: skip
    width = h.changes[-1]
    assert width.before.parameters == 202_048 and width.after.parameters == 551_808  # hand figures in test_git_history.py
    assert width.fixed == shas[5]
    assert h.changes[2].summary.startswith("weights re-saved in another dtype (F32 -> BF16): same 21 tensors")
    for rec in osv.records(h):
        osv.validate(rec)
        assert rec["affected"][0]["ranges"][0]["repo"] == f"{online.endpoint}/{REPO}"
        assert rec["references"][0]["url"].startswith(f"{online.endpoint}/{REPO}/commit/")


def test_only_changed_files_read_and_no_weight_bytes(online):
    track.track(readers.HubReader(REPO))
    gets = [r for r in online.requests if r.method == "GET" and "/resolve/" in r.path]
    # first revision: every tracked JSON file (4) and the header; then one file per changed revision, except
    # the revert's config.json: the same blob as the first one, so it comes from the cache (keyed by blob id)
    json_reads = [r.path.split("/resolve/")[1].split("/", 1)[1] for r in gets if not r.path.endswith(".safetensors")]
    assert sorted(json_reads) == sorted(["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                         "config.json", "tokenizer_config.json", "tokenizer.json"])  # fmt: skip
    assert not any("README" in r.path for r in online.requests)
    for r in gets:
        if r.path.endswith(".safetensors"):
            assert r.range is not None and r.range.startswith(("bytes=0-", "bytes=8-")), r  # header ranges only
            assert r.body_bytes <= 100_001


def test_second_run_asks_only_for_the_commit_list(online, tmp_path):
    engine_url = f"sqlite:///{tmp_path / 'store.db'}"
    first = storage.track_stored(readers.HubReader(REPO), url=engine_url)
    online.clear_log()
    again = storage.track_stored(readers.HubReader(REPO), url=engine_url)
    assert [r.path for r in online.requests] == [f"/api/models/{REPO}/commits/main"]
    assert [c.model_dump() for c in again.changes] == [c.model_dump() for c in first.changes]
    # a fresh store but a warm blob cache: trees and blobs come from the cache, by id
    online.clear_log()
    track.track(readers.HubReader(REPO))
    assert [r.path for r in online.requests] == [f"/api/models/{REPO}/commits/main"]


def test_commit_list_cut_short_by_the_server(online):
    online.commits_page_size = 4  # page 1: the 4 newest commits; page 2 answers 500
    h = track.track(readers.HubReader(CUT))
    assert h.truncated and len(h.revisions) == 4
    assert h.notes[0].message.startswith("the hub's commit list stopped after 4 commits")
    assert [c.kind for c in h.changes] == ["config", "tokenizer", "weights"]  # the 4th newest is the baseline


def test_bad_repo_and_revision_are_one_line_errors(online):
    with pytest.raises(SourceNotFoundError, match="no such model repo"):
        readers.HubReader("neurarch-test/nope").revisions()
    with pytest.raises(SourceNotFoundError, match="revision 'v9' not found"):
        readers.HubReader(REPO, "v9").revisions()
    with pytest.raises(ChangesError, match="not a hub repo id"):
        readers.open_source("just-a-name")


def test_hub_down_is_one_line(monkeypatch, tmp_path):
    from huggingface_hub import constants

    from hubserver import closed_port

    ep = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setattr(constants, "ENDPOINT", ep)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(HubError, match="cannot reach"):
        readers.HubReader(REPO).revisions()


def test_history_rewrite_on_the_hub_marks_vanished(online, tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    repo = "neurarch-test/rewritten"
    shas = add_to_fake_hub(online, repo)
    storage.track_stored(readers.HubReader(repo), url=url)
    online.drop_commits(repo, 2)  # force-push: the tokenizer and revert commits are gone
    files = dict(online.repos[repo].commits[shas[3]])
    new = online.add_commit(repo, files | {"config.json": b'{"model_type": "llama",'}, date="2026-07-01T00:00:00.000Z", title="squashed", salt="x")
    h = storage.track_stored(readers.HubReader(repo), url=url)
    assert set(h.rewritten) == {shas[4], shas[5]}
    assert {c.commit for c in h.changes if c.vanished} == {shas[4], shas[5]}
    assert not any(c.fixed for c in h.changes if not c.vanished)  # the revert that closed c2 vanished with it
    assert any(n.commit == new and n.message.startswith("config.json: not valid JSON") for n in h.notes)
    assert Path(tmp_path / "store.db").is_file()


def test_offline_is_one_line(online, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ChangesError, match="HF_HUB_OFFLINE is set"):
        readers.HubReader(REPO).revisions()
    assert online.requests == []


def test_diff_of_two_hub_revisions(online):
    from neurarch import Options
    from neurarch.changes import plandiff

    shas = online.shas
    d = plandiff.diff(f"{REPO}@{shas[0]}", f"{REPO}@{shas[1]}", Options(verify=False, offline=False))
    assert (d.a.parameters, d.b.parameters) == (202_048, 551_808)  # hand figures in test_git_history.py
    # both commits hold the same (small) checkpoint: its header count is read at each revision
    assert d.a.checkpoint == d.b.checkpoint == 202_048
    md = plandiff.markdown(d)
    assert "| Published checkpoint (scalars) | 202,048 | 202,048 | same |" in md
    assert [(k.key, k.before, k.after) for k in d.keys] == [("hidden_size", 64, 128), ("num_hidden_layers", 2, 3)]
