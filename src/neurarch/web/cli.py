"""``neurarch-trace serve``: the web app and HTTP API on one port.

    neurarch-trace serve                         # http://127.0.0.1:8000, SQLite in ~/.cache/neurarch
    neurarch-trace serve --db postgresql+psycopg://user@host/db --workers 4 --host 0.0.0.0
    neurarch-trace serve --warm                  # pre-compute every catalog page at start-up
    neurarch-trace serve --warm gpt2 microsoft/phi-2

The CLI dispatches here with ``commands["serve"] = neurarch.web.cli.main``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from ..errors import NeurarchError


class _JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.name == "neurarch.web.access":
            return msg  # already one JSON object
        return json.dumps({"level": record.levelname.lower(), "logger": record.name, "message": msg})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neurarch-trace serve", description="Serve every report as a web page and behind an HTTP API.")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--db", metavar="URL", help="database URL (default: SQLite neurarch.db in $NEURARCH_CACHE_DIR or ~/.cache/neurarch)")
    p.add_argument("--workers", type=int, default=1, help="worker processes that compute plans (default 1; each imports torch once, ~0.5 GB)")
    p.add_argument("--warm", nargs="*", metavar="ID", help="pre-compute every catalog page, and these ids, at start-up")
    p.add_argument("--request-timeout", type=float, default=300.0, help="seconds one plan may take before the request gets a 504 (default 300)")
    p.add_argument("--worker-memory", type=float, default=8.0, metavar="GIB", help="resident memory a worker may use before it is replaced and the request gets a 422 (default 8)")
    p.add_argument("--queue", type=int, default=16, help="plans that may wait for a worker before requests get 429 (default 16)")
    p.add_argument("--max-body", type=int, default=1_000_000, metavar="BYTES", help="largest request body (default 1,000,000; larger gets 413)")
    p.add_argument("--offline", action="store_true", help="never contact the Hub: bundled catalog and the local HF cache only")
    p.add_argument("--debug", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for name, value, low in (("--port", args.port, 1), ("--workers", args.workers, 1), ("--queue", args.queue, 0), ("--max-body", args.max_body, 1)):
        if value < low or (name == "--port" and value > 65535):
            raise NeurarchError(f"{name} must be {'between 1 and 65535' if name == '--port' else f'at least {low}'}, got {value}")
    if args.request_timeout <= 0 or args.worker_memory <= 0:
        raise NeurarchError("--request-timeout and --worker-memory must be positive")
    import uvicorn

    from ..store.db import connect
    from .app import Settings, create_app

    connect(args.db).dispose()  # a bad --db is one line now, not an error inside the server's start-up
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines())
    for name in ("neurarch.web", "neurarch.web.access"):
        lg = logging.getLogger(name)
        lg.handlers = [handler]
        lg.setLevel(logging.INFO)
        lg.propagate = False
    app = create_app(
        Settings(
            db_url=args.db,
            workers=args.workers,
            time_limit_s=args.request_timeout,
            memory_limit_gib=args.worker_memory,
            queue_size=args.queue,
            body_limit=args.max_body,
            warm=args.warm,
            offline=True if args.offline else None,
        )
    )
    print(f"neurarch: serving on http://{args.host}:{args.port} ({args.workers} worker(s); Ctrl-C stops)", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
    return 0
