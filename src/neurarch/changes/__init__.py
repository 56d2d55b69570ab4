"""What changed upstream: a model repo's revisions, typed changes, OSV records, plan diffs.

    >>> from neurarch.changes import readers, track, osv
    >>> history = track.track(readers.open_source("./my-model-repo"))   # or "org/name" on the Hub
    >>> [(c.commit[:12], c.kind, c.summary) for c in history.changes]    # newest first
    >>> records = osv.records(history)                                     # one OSV record per change

Modules, in the order data flows through them:

* ``readers``: the commit list, file ids and file contents of a git clone or a Hub repo;
* ``compare`` and ``graph``: one file at two revisions -> typed pieces (configs are built);
* ``track``: the walk over revisions -> a :class:`~neurarch.changes.types.History`;
* ``storage``: the same walk, incremental, kept in the store (``neurarch.store``);
* ``plandiff``: two sources analysed side by side (``neurarch-trace diff``);
* ``osv``, ``render``: OSV records and text/Markdown/JSON; ``cli``: the two subcommands.

See docs/changes.md.
"""

__all__ = ["readers", "compare", "graph", "track", "storage", "plandiff", "osv", "render", "types", "errors"]
