"""Engine, declarative base and migrations of the store.

``connect(url)`` opens the database (SQLite file ``neurarch.db`` in
``$NEURARCH_CACHE_DIR`` or ``~/.cache/neurarch`` by default; any SQLAlchemy URL,
e.g. ``postgresql+psycopg://user@host/db``), and runs the Alembic migrations in
``migrations/`` up to ``head`` on it, so a caller always sees the current
schema.  On SQLite every connection gets ``journal_mode=WAL`` (readers never
wait for the writer), ``foreign_keys=ON`` and a busy timeout.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import sqlalchemy
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Session
from sqlalchemy.pool import StaticPool

from ..errors import NeurarchError

MIGRATIONS = Path(__file__).with_name("migrations")
BUSY_TIMEOUT_MS = 30_000  # a writer waits this long for another writer (SQLite)


class Base(DeclarativeBase):
    """Every ORM model of the store derives from this (one ``MetaData``)."""


def cache_dir() -> Path:
    """``$NEURARCH_CACHE_DIR``, else ``~/.cache/neurarch``."""
    env = os.environ.get("NEURARCH_CACHE_DIR", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "neurarch"


def default_url() -> str:
    """The SQLite file ``neurarch.db`` in the cache folder."""
    return f"sqlite:///{cache_dir() / 'neurarch.db'}"


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cur = dbapi_connection.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; a commit does not fsync twice
    finally:
        cur.close()


def connect(url: str | None = None) -> sqlalchemy.Engine:
    """An engine on ``url`` (default :func:`default_url`) with the schema at ``head``."""
    try:
        u = make_url(url or default_url())
    except Exception as e:  # sqlalchemy.exc.ArgumentError and friends
        raise NeurarchError(f"--db: not a database URL: {url!r} ({e})") from None
    kwargs: dict = {}
    memory = False
    if u.get_backend_name() == "sqlite":
        db = u.database or ""
        memory = db in ("", ":memory:") or db.startswith("file::memory:")
        if memory:  # one shared connection, or every connection sees an empty database
            kwargs.update(poolclass=StaticPool, connect_args={"check_same_thread": False})
        else:
            Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
            kwargs.update(connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000})
    else:
        kwargs.update(pool_pre_ping=True)
    try:
        engine = sqlalchemy.create_engine(u, **kwargs)
    except Exception as e:  # an unknown dialect or a missing driver
        raise NeurarchError(f"--db: cannot open {u.render_as_string(hide_password=True)}: {e}") from None
    if u.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    try:
        upgrade(engine)
    except sqlalchemy.exc.OperationalError as e:
        engine.dispose()
        first = str(e.orig).strip().splitlines()[0] if e.orig else str(e)
        raise NeurarchError(f"--db: cannot open {u.render_as_string(hide_password=True)}: {first}") from None
    return engine


def upgrade(engine: sqlalchemy.Engine, revision: str = "head") -> None:
    """Run the Alembic migrations on ``engine`` up to ``revision``.

    Several processes may start at once (server workers, the tracker): on
    PostgreSQL an advisory lock, on SQLite ``BEGIN IMMEDIATE`` semantics via
    a lock file beside the database, make them migrate one after another.
    """
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    with _migration_lock(engine):
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(7310551)"))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)


@contextlib.contextmanager
def _migration_lock(engine: sqlalchemy.Engine):
    db = engine.url.database or ""
    if engine.dialect.name != "sqlite" or db in ("", ":memory:") or db.startswith("file:"):
        yield
        return
    import fcntl

    with open(f"{db}.migrate-lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def session(engine: sqlalchemy.Engine) -> Session:
    """A new ORM session on ``engine`` (use as ``with session(engine) as s: ...``).

    Objects stay readable after commit (``expire_on_commit=False``): the web
    app hands them to templates after the transaction ends.
    """
    return Session(engine, expire_on_commit=False)
