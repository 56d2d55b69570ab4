"""The store in front of the pool: a report is computed once per key, kept in
the database, and served from there (and from a small in-process cache of
parsed reports) ever after.  Identical requests that arrive while the first is
still computing wait for that one computation.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from ..report import Report
from ..store import reports as store
from .errors import ApiError
from .pool import Pool

log = logging.getLogger("neurarch.web")


@dataclass
class Result:
    report: Report
    json: str  # the Index JSON exactly as computed (what `neurarch-trace ID --format json` prints)
    cache: str  # "hit" (store), "coalesced" (waited on an identical request), "miss" (computed now)
    key: store.ReportKey


class Service:
    def __init__(self, engine, pool: Pool, *, time_limit_s: float, offline: bool | None = None, memory_items: int = 256):
        self.engine = engine
        self.pool = pool
        self.time_limit_s = time_limit_s
        self.offline = offline
        self._inflight: dict[store.ReportKey, asyncio.Future] = {}
        self._parsed: collections.OrderedDict[store.ReportKey, tuple[Report, str]] = collections.OrderedDict()
        self._memory_items = memory_items
        self.computed = 0  # reports computed by this process (tests and the benchmark read it)

    def _remember(self, key, report: Report, text: str) -> None:
        self._parsed[key] = (report, text)
        self._parsed.move_to_end(key)
        while len(self._parsed) > self._memory_items:
            self._parsed.popitem(last=False)

    async def model_report(self, model_id: str, revision: str | None, options: dict) -> Result:
        key = store.ReportKey.make(model_id, revision, options)
        job = {"kind": "model", "id": model_id, "revision": revision, "options": options}
        return await self._get(key, job, options)

    async def paste_report(self, pid: str, config: dict, options: dict) -> Result:
        key = store.ReportKey.make(f"paste:{pid}", None, options)
        job = {"kind": "config", "name": f"paste:{pid[:12]}", "config": config, "options": options}
        return await self._get(key, job, options)

    async def _get(self, key: store.ReportKey, job: dict, options: dict) -> Result:
        if key in self._parsed:
            report, text = self._parsed[key]
            self._parsed.move_to_end(key)
            return Result(report, text, "hit", key)
        stored = await run_in_threadpool(store.get_report, self.engine, key)
        if stored is not None:
            report = Report.model_validate_json(stored)
            self._remember(key, report, stored)
            return Result(report, stored, "hit", key)
        waiting = self._inflight.get(key)
        if waiting is not None:
            report, text = await asyncio.shield(waiting)
            return Result(report, text, "coalesced", key)
        fut = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            job = dict(job, timeout_s=self.time_limit_s, offline=self.offline)
            _, text, seconds, revision = await self.pool.submit(job)
            report = Report.model_validate_json(text)
            self.computed += 1
            await run_in_threadpool(store.put_report, self.engine, key, options, text, resolved_revision=revision, seconds=seconds)
            self._remember(key, report, text)
            fut.set_result((report, text))
            return Result(report, text, "miss", key)
        except BaseException as e:
            err = e if isinstance(e, ApiError) else ApiError(500, "internal", f"internal error: {type(e).__name__}")
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        finally:
            self._inflight.pop(key, None)
