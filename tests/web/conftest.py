"""Fixtures of the web tests: a real PostgreSQL server on a unix socket,
and the system Chromium.  In CI (``CI=true``) a missing dependency fails the
test instead of skipping it."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the local Hub (hubserver.py)

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CHROMIUM = "/usr/bin/chromium"


def missing(what: str) -> None:
    """Skip locally; fail in CI, where the dependency must be installed."""
    if IN_CI:
        pytest.fail(f"{what} (CI installs it: see .ci/run)")
    pytest.skip(what)


def _pg_bin() -> Path | None:
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(d, "pg_ctl").exists() and Path(d, "initdb").exists():
            return Path(d)
    return None


@pytest.fixture(scope="session")
def postgres_url():
    """A throwaway PostgreSQL server (initdb + pg_ctl, unix socket only, no
    TCP), run as the ``postgres`` user when the tests run as root (initdb
    refuses root).  Yields a SQLAlchemy URL; the server is stopped after."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        missing("PostgreSQL server binaries not found (Debian package `postgresql`)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing("psycopg is not installed")
    root = Path(tempfile.mkdtemp(prefix="neurarch-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
        os.chmod(root, 0o755)
        prefix = ["runuser", "-u", "postgres", "--"]

    def run(*cmd):
        return subprocess.run(prefix + list(cmd), capture_output=True, text=True, timeout=120)

    r = run(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    if r.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"initdb failed: {r.stderr.strip()[-500:]}")
    r = run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-t", "60", "-o", f"-k {sock} -c listen_addresses='' -c fsync=off", "start")
    if r.returncode != 0:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"pg_ctl start failed: {r.stderr.strip()[-300:]} {log[-300:]}")
    try:
        r = run(str(bin_dir / "createdb"), "-h", str(sock), "-U", "postgres", "neurarch")
        assert r.returncode == 0, r.stderr
        yield f"postgresql+psycopg://postgres@/neurarch?host={sock}"
    finally:
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def chromium_path():
    if not Path(CHROMIUM).exists():
        missing(f"{CHROMIUM} not found (Debian package `chromium`)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing("the playwright package is not installed")
    return CHROMIUM


# --------------------------------------------------------------------------
# The app, in-process (one worker process; a SQLite store in a temp folder)
# --------------------------------------------------------------------------

from web_fixtures import TINY_BERT, hub_env  # noqa: E402,F401


@pytest.fixture(scope="session")
def web_db(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('web-store') / 'neurarch.db'}"


@pytest.fixture(scope="session")
def web_client(web_db):
    """The real app (routes, pool, store) through FastAPI's test client."""
    from fastapi.testclient import TestClient

    from neurarch.web.app import Settings, create_app

    app = create_app(Settings(db_url=web_db, workers=1, time_limit_s=240))
    with TestClient(app) as client:
        client.app_state = app.state.neurarch
        yield client
