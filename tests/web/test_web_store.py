"""The store: migrations to head, SQLite pragmas, the report key, permalinks,
the code fingerprint; the same on a real PostgreSQL server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import sqlalchemy

from neurarch.errors import NeurarchError
from neurarch.store import reports as R
from neurarch.store.db import connect, default_url
from neurarch.store.fingerprint import code_fingerprint, library_versions, tree_hash


def _roundtrip(engine):
    tables = set(sqlalchemy.inspect(engine).get_table_names())
    assert {"alembic_version", "reports", "permalinks"} <= tables
    with engine.connect() as c:
        heads = [r[0] for r in c.exec_driver_sql("SELECT version_num FROM alembic_version")]
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(R.__file__).with_name("migrations")))
    assert heads == [ScriptDirectory.from_config(cfg).get_current_head()]

    opts = {"plan": {"modes": ["full"]}, "batch": 1}
    key = R.ReportKey.make("microsoft/resnet-50", None, opts)
    assert R.get_report(engine, key) is None
    R.put_report(engine, key, opts, '{"a": 1}', seconds=1.5)
    R.put_report(engine, key, opts, '{"a": 2}')  # a second writer loses quietly; the first stays
    assert R.get_report(engine, key) == '{"a": 1}'
    # every part of the key separates entries
    other = R.ReportKey.make("microsoft/resnet-50", "abc123", opts)
    assert R.get_report(engine, other) is None
    changed = R.ReportKey(key.source, key.revision, key.options_hash, "0" * 64, key.library_versions)
    assert R.get_report(engine, changed) is None
    # option order does not matter; values do
    assert R.ReportKey.make("m", None, {"a": 1, "b": 2}) == R.ReportKey.make("m", None, {"b": 2, "a": 1})
    assert R.ReportKey.make("m", None, {"a": 1}) != R.ReportKey.make("m", None, {"a": 2})

    config = {"model_type": "bert", "hidden_size": 64}
    pid = R.put_permalink(engine, config, opts)
    assert pid == R.put_permalink(engine, dict(reversed(list(config.items()))), opts)  # content hash
    assert len(pid) == 64
    assert R.get_permalink(engine, pid) == (config, opts)
    assert R.get_permalink(engine, "f" * 64) is None
    return key


def test_sqlite_store(tmp_path):
    url = f"sqlite:///{tmp_path}/sub/dir/neurarch.db"
    engine = connect(url)  # creates the folders
    assert (tmp_path / "sub/dir/neurarch.db").exists()
    with engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    _roundtrip(engine)
    engine.dispose()
    again = connect(url)  # upgrading an up-to-date database is a no-op that keeps the data
    assert R.count_reports(again) == 1


def test_default_url(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURARCH_CACHE_DIR", str(tmp_path / "c"))
    assert default_url() == f"sqlite:///{tmp_path / 'c' / 'neurarch.db'}"
    monkeypatch.delenv("NEURARCH_CACHE_DIR")
    assert default_url() == f"sqlite:///{Path.home() / '.cache' / 'neurarch' / 'neurarch.db'}"


def test_bad_url_is_one_line_error():
    with pytest.raises(NeurarchError, match="not a database URL"):
        connect("not a url")
    with pytest.raises(NeurarchError, match="cannot open"):
        connect("nosuchdialect://x/y")


def test_fingerprint_follows_the_files(tmp_path):
    import neurarch

    fp = code_fingerprint()
    assert len(fp) == 64 and fp == code_fingerprint()
    assert library_versions().startswith("torch ") and "transformers " in library_versions() and "peft " in library_versions()
    # the hash is over the files, not the version string: one changed byte in a copy changes it
    src = Path(neurarch.__file__).parent
    copy = tmp_path / "neurarch"
    shutil.copytree(src / "store", copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = tree_hash(copy)
    assert tree_hash(copy) == before
    (copy / "db.py").write_text((copy / "db.py").read_text() + "\n# changed\n")
    assert tree_hash(copy) != before
    assert tree_hash(copy, "torch 1") != tree_hash(copy, "torch 2")


def test_postgresql_store(postgres_url):
    engine = connect(postgres_url)
    assert engine.dialect.name == "postgresql"
    key = _roundtrip(engine)
    engine.dispose()
    assert R.get_report(connect(postgres_url), key) == '{"a": 1}'  # kept across connections


def test_web_app_on_postgresql(postgres_url):
    """The app's cache and permalinks on the real server: a second request computes nothing."""
    from fastapi.testclient import TestClient
    from web_fixtures import TINY_BERT

    from neurarch.web.app import Settings, create_app

    app = create_app(Settings(db_url=postgres_url, workers=1, time_limit_s=120))
    body = {"config": TINY_BERT, "options": {"plan": False}}
    with TestClient(app) as client:
        first = client.post("/api/v1/plan", json=body)
        assert first.status_code == 200, first.text
        assert first.headers["x-neurarch-cache"] == "miss"
        second = client.post("/api/v1/plan", json=body)
        assert second.headers["x-neurarch-cache"] == "hit" and second.json() == first.json()
        pid = first.headers["link"].split("/p/")[1].split(">")[0]
        assert client.get(f"/p/{pid}.json").json() == first.json()
    engine = connect(postgres_url)
    with engine.connect() as c:
        stored = c.execute(sqlalchemy.text("SELECT source, report_json FROM reports WHERE source = :s"), {"s": f"paste:{pid}"}).all()
    assert len(stored) == 1 and json.loads(stored[0][1])["params"]["derived"] == first.json()["params"]["derived"]
    engine.dispose()
