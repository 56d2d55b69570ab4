"""The worker pool and the service in front of it, with real worker processes:
identical requests coalesce into one computation, a full queue answers 429
with Retry-After, a plan past the time limit answers 504, a worker past its
memory limit is killed (with its process group) and replaced, the request
answering 422."""

from __future__ import annotations

import asyncio
import os

import pytest
from web_fixtures import TINY_BERT

from neurarch.store.db import connect
from neurarch.web import options as O
from neurarch.web.errors import ApiError
from neurarch.web.pool import Pool, group_rss
from neurarch.web.service import Service


def job(batch: int, plan: bool = True, **extra) -> dict:
    values = O.normalize({"modes": ["full"], "batch": batch, "plan": plan})
    return {"kind": "config", "name": f"paste:tiny{batch}", "config": TINY_BERT, "options": values, **extra}


def test_group_rss_reads_this_process():
    assert group_rss(os.getpgid(0)) > 10 << 20  # this test process (python + torch) is well over 10 MiB


def test_pool_limits_queue_and_coalescing(tmp_path):
    async def scenario():
        pool = Pool(1, time_limit_s=120, memory_limit_bytes=8 << 30, queue_size=1)
        await pool.start()
        try:
            engine = connect(f"sqlite:///{tmp_path / 's.db'}")
            service = Service(engine, pool, time_limit_s=120)
            values = O.normalize({"plan": False})  # the trace only: enough to keep two more requests waiting

            # 1. Three identical requests at once: one computation, two waiters.
            results = await asyncio.gather(*(service.paste_report("a" * 64, TINY_BERT, values) for _ in range(3)))
            assert sorted(r.cache for r in results) == ["coalesced", "coalesced", "miss"]
            assert service.computed == 1
            assert len({r.json for r in results}) == 1
            again = await service.paste_report("a" * 64, TINY_BERT, values)
            assert again.cache == "hit" and service.computed == 1

            # 2. A full queue: one job runs, one waits (queue_size=1), the third is refused at once.
            running = asyncio.ensure_future(pool.submit(job(1)))
            await asyncio.sleep(0.2)
            waiting = asyncio.ensure_future(pool.submit(job(2)))
            await asyncio.sleep(0.2)
            with pytest.raises(ApiError) as refused:
                await pool.submit(job(3))
            assert refused.value.status == 429 and int(refused.value.headers["Retry-After"]) >= 1
            assert (await running)[0] == "ok" and (await waiting)[0] == "ok"

            # 3. Past the per-request time limit: a clean 504 (the worker's own timer), the worker stays.
            pid = pool.pids()[0]
            with pytest.raises(ApiError) as late:
                await pool.submit(job(4, timeout_s=0.5))
            assert late.value.status == 504 and "0.5 s" in late.value.message
            assert pool.pids() == [pid]

            # 4. Past the memory limit: the worker (torch imported: hundreds of MiB) is killed and replaced.
            pool.memory_limit_bytes = 64 << 20
            with pytest.raises(ApiError) as big:
                await pool.submit(job(5))
            assert big.value.status == 422 and big.value.code == "memory_limit"
            assert pool.killed["memory"] == 1
            new_pid = pool.pids()[0]
            assert new_pid != pid
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)  # the old worker is gone
            pool.memory_limit_bytes = 8 << 30
            ok = await pool.submit(job(6, plan=False))
            assert ok[0] == "ok"
            engine.dispose()
        finally:
            await pool.close()
        for p in pool.pids():
            with pytest.raises(ProcessLookupError):
                os.kill(p, 0)

    asyncio.run(scenario())
