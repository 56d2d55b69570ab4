"""The limits the server (the parent) enforces on its workers, with real
worker processes and jobs the worker's own code cannot stop:

* a job stuck in a C call with every signal blocked (the worker's own timer
  cannot fire) is killed by the parent at the time limit plus the grace
  period: the request gets a 504, the worker (with its process group) is
  gone and replaced, and the next job runs;
* a job that really holds more resident memory than the limit is killed:
  a 422 with the memory message, the worker replaced, the next job runs.

The two job kinds exist only in a pool built with ``test_jobs=True``
(:func:`neurarch.web.worker._test_job`); the app never builds one, and a
worker of the app's kind refuses them (checked below).
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from web_fixtures import TINY_BERT

from neurarch.web import options as O
from neurarch.web.errors import ApiError
from neurarch.web.pool import Pool, group_rss

TRACE_ONLY = {"kind": "config", "name": "paste:tiny", "config": TINY_BERT, "options": O.normalize({"plan": False})}


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_parent_kills_a_job_stuck_in_c_and_one_over_memory():
    async def scenario():
        pool = Pool(1, time_limit_s=1.0, memory_limit_bytes=8 << 30, queue_size=2, grace_s=2.0, test_jobs=True)
        await pool.start()
        try:
            # 1. Stuck in C, signals blocked: only the parent's kill ends it, at 1 s + 2 s grace.
            pid = pool.pids()[0]
            t0 = time.monotonic()
            with pytest.raises(ApiError) as late:
                await pool.submit({"kind": "test:hang", "timeout_s": 1.0})
            waited = time.monotonic() - t0
            assert late.value.status == 504 and late.value.code == "timeout"
            assert "1 s" in late.value.message
            assert 3.0 <= waited < 3.0 + 30  # not before limit + grace; the slack is a loaded machine's
            assert pool.killed["time"] == 1
            assert gone(pid)
            new_pid = pool.pids()[0]
            assert new_pid != pid
            ok = await pool.submit(dict(TRACE_ONLY, timeout_s=120))  # the replacement answers
            assert ok[0] == "ok" and '"derived"' in ok[1]

            # 2. Holding 600 MiB over what the worker holds now, with a limit 300 MiB above it.
            base = group_rss(new_pid)
            assert base > 100 << 20  # torch and transformers are imported: a real worker
            pool.memory_limit_bytes = base + (300 << 20)
            with pytest.raises(ApiError) as big:
                await pool.submit({"kind": "test:hog", "bytes": 600 << 20, "hold_s": 120, "timeout_s": 120})
            assert big.value.status == 422 and big.value.code == "memory_limit"
            assert pool.killed["memory"] == 1 and pool.killed["time"] == 1
            assert gone(new_pid)
            third = pool.pids()[0]
            assert third not in (pid, new_pid)
            pool.memory_limit_bytes = 8 << 30
            ok = await pool.submit(dict(TRACE_ONLY, timeout_s=120))
            assert ok[0] == "ok"
            # A hog under the limit is left alone: the watch measures, it does not guess.
            small = await pool.submit({"kind": "test:hog", "bytes": 50 << 20, "hold_s": 1.0, "timeout_s": 60})
            assert small[:2] == ("ok", str(50 << 20)) and pool.pids() == [third]
        finally:
            await pool.close()
        assert all(gone(p) for p in pool.pids())

    asyncio.run(scenario())


def test_the_apps_workers_refuse_test_jobs():
    """A worker of the kind the app starts (test_jobs off) answers 400 to a test job and runs nothing."""

    async def scenario():
        pool = Pool(1, time_limit_s=30, queue_size=1)
        await pool.start()
        try:
            for kind in ("test:hang", "test:hog", "python", None):
                with pytest.raises(ApiError) as refused:
                    await pool.submit({"kind": kind, "bytes": 1 << 30, "timeout_s": 30})
                assert refused.value.status == 400 and refused.value.code == "bad_job"
            assert pool.killed == {"time": 0, "memory": 0, "crash": 0}
        finally:
            await pool.close()

    asyncio.run(scenario())
