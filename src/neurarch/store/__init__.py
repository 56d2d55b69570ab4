"""The store: one database (SQLAlchemy 2, one Alembic history) shared by the
web app's result cache and the revision tracker.

    from neurarch.store.db import connect, session
    engine = connect()                      # SQLite in WAL mode under ~/.cache/neurarch
    engine = connect("postgresql+psycopg://user@host/db")

``connect`` brings the schema to Alembic ``head`` before it returns.
"""
