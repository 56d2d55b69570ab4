"""The /changes and /osv pages, driven in-process through the web engineer's real app (a test client)."""

from __future__ import annotations

import json

import pytest

from neurarch.changes import osv, readers, storage


@pytest.fixture(scope="module")
def client(tmp_path_factory, model_repo):
    from fastapi.testclient import TestClient

    from neurarch.store.db import connect
    from neurarch.web.app import Settings, create_app

    url = f"sqlite:///{tmp_path_factory.mktemp('web') / 'store.db'}"
    engine = connect(url)
    reader = readers.GitReader(model_repo.path)
    reader.repo = "neurarch-test/tiny-llama"  # stored under a hub-style id, as a hub repo would be
    storage.track_stored(reader, engine=engine)
    app = create_app(Settings(engine=engine, workers=1))
    with TestClient(app) as c:
        c.repo_id = reader.repo
        yield c


def test_history_page_and_twins(client, model_repo):
    rid = client.repo_id
    html = client.get(f"/changes/{rid}", headers={"accept": "text/html"})
    assert html.status_code == 200 and "What changed upstream" in html.text
    assert "config changes the model" in html.text and "&lt;|im_start|&gt;" in html.text  # escaped
    data = client.get(f"/changes/{rid}.json").json()
    assert [c["commit"] for c in data["changes"]][0] == model_repo.commits[5]
    md = client.get(f"/changes/{rid}.md")
    assert md.headers["content-type"].startswith("text/markdown") and "| Date | Commit | Kind | What changed |" in md.text


def test_osv_routes_validate(client):
    recs = client.get(f"/changes/{client.repo_id}/osv.json").json()
    assert len(recs) == 5
    for r in recs:
        osv.validate(r)
        one = client.get(f"/osv/{r['id']}.json")
        assert one.status_code == 200 and one.json() == r


def test_index_and_errors(client):
    idx = client.get("/changes.json").json()
    assert idx["repos"][0]["repo"] == client.repo_id and idx["repos"][0]["changes"] == 5
    assert client.get("/changes", headers={"accept": "text/html"}).status_code == 200
    miss = client.get("/changes/nobody/nothing.json")
    assert miss.status_code == 404 and miss.json()["error"]["code"] == "not_found"
    bad = client.get("/osv/GHSA-xxxx.json")
    assert bad.status_code == 404 and set(bad.json()) == {"error"}
    assert json.loads(client.get("/osv/x_NEURARCH-0000.json").text)["error"]["code"] == "not_found"


def test_changes_badge_counts_the_stored_changes(client):
    # The six-revision fixture repo holds 5 typed changes; the newest commit is dated 2026-06-01.
    allowed = {"schemaVersion", "label", "message", "color", "labelColor", "isError", "namedLogo", "logoSvg", "logoColor", "logoSize", "logoWidth", "style", "cacheSeconds"}  # shields' endpoint schema
    b = client.get(f"/badge/{client.repo_id}/changes.json").json()
    assert set(b) <= allowed and b["schemaVersion"] == 1
    assert b["message"] == "5 since first read, latest 2026-06-01"
    none = client.get("/badge/nobody/nothing/changes.json").json()
    assert none["message"] == "not tracked" and set(none) <= allowed
