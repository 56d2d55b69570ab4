"""The web app and HTTP API over the same :class:`neurarch.report.Report`
(``neurarch-trace serve``; docs/web.md).

* :mod:`.options`: the plan options, generated from the options dataclasses;
* :mod:`.pool`: pre-warmed worker processes with time and memory limits;
* :mod:`.service`: cache (the store) in front of the pool, identical requests coalesced;
* :mod:`.app`: the FastAPI app (pages, twins, badges, paste, checks, API);
* :mod:`.cli`: ``neurarch-trace serve``.
"""
