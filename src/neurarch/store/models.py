"""Every ORM model module of the store, imported once so that
``Base.metadata`` is complete (Alembic's ``env.py`` imports this module)."""

from . import (
    changes,  # noqa: F401  the revision tracker's repos, revisions, file ids and changes
    reports,  # noqa: F401  the web app's result cache and permalinks
)
