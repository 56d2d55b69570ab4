"""Alembic environment of the store: one history for every table
(``neurarch.store.models`` imports every ORM module)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from neurarch.store import models  # noqa: F401  fills Base.metadata
from neurarch.store.db import Base

config = context.config
target_metadata = Base.metadata


def run_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:  # the `alembic` command line: open the URL from the config
        url = config.get_main_option("sqlalchemy.url")
        if not url:
            raise SystemExit("alembic: the config names no sqlalchemy.url (the database to migrate)")
        engine = create_engine(url)
        with engine.begin() as connection:
            context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
            with context.begin_transaction():
                context.run_migrations()
        return
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
