"""Pre-warmed worker processes for the heavy work, with limits the parent enforces.

    pool = Pool(workers=2, time_limit_s=300, memory_limit_bytes=8 << 30, queue_size=16)
    await pool.start()
    result = await pool.submit(job)     # ("ok", report_json, seconds, revision) or raises ApiError
    await pool.close()

* Each worker is a spawned process that imports neurarch, torch and
  transformers once (:func:`neurarch.web.worker.main`), then runs jobs one at a
  time; the event loop only sends a job and waits on a thread.
* Limits, enforced from the parent while a job runs: past ``time_limit_s``
  (plus a grace period; the worker's own timer fires first and answers a
  clean 504) the worker is killed with its whole process group and the job
  answers 504; past ``memory_limit_bytes`` of resident memory (the worker and
  the processes it forked, summed) it is killed and the job answers 422.  A
  killed worker is replaced.
* A bounded queue: when ``queue_size`` jobs already wait, :meth:`submit`
  raises a 429 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ApiError

log = logging.getLogger("neurarch.web")

POLL_S = 0.25  # how often a busy worker's clock and memory are checked
GRACE_S = 10.0  # the worker's own timer fires at the limit; the parent kills it this much later
READY_TIMEOUT_S = 300.0  # a worker that does not finish its imports in this time is a broken install
_ENV_LOCK = threading.Lock()
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in process group ``pgid`` (Linux /proc; 0 elsewhere)."""
    total = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode("ascii", "replace")
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()  # fields after "(comm)": state ppid pgrp ...
        if len(rest) > 21 and rest[2] == str(pgid):
            total += int(rest[21]) * _PAGE  # rss, in pages
    return total


@dataclass
class _Job:
    payload: dict
    future: asyncio.Future
    queued_at: float = field(default_factory=time.monotonic)


class _Worker:
    def __init__(self, ctx, env: dict, test_jobs: bool = False):
        from .worker import main

        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=main, args=(child, env, test_jobs), name="neurarch-worker", daemon=False)
        # A spawned child imports neurarch (and huggingface_hub, which reads its settings
        # at import) before main() runs: its environment must be right when it starts.
        with _ENV_LOCK:
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                self.proc.start()
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        child.close()
        self.pid = self.proc.pid
        self.started = time.monotonic()
        self.jobs_done = 0
        self.peak_rss = 0

    def wait_ready(self) -> None:
        if not self.conn.poll(READY_TIMEOUT_S):
            raise RuntimeError("a worker did not finish starting")
        msg = self.conn.recv()
        if not (isinstance(msg, tuple) and msg[0] == "ready"):
            raise RuntimeError(f"a worker failed to start: {msg!r}")

    def kill(self) -> None:
        for target in ("group", "proc"):
            try:
                if target == "group":
                    os.killpg(self.pid, signal.SIGKILL)
                else:
                    self.proc.kill()
            except (ProcessLookupError, PermissionError, OSError):
                pass
        self.proc.join(timeout=5)
        self.conn.close()

    def rss(self) -> int:
        value = group_rss(self.pid)
        self.peak_rss = max(self.peak_rss, value)
        return value


class Pool:
    def __init__(
        self, workers: int = 1, *, time_limit_s: float = 300.0, memory_limit_bytes: int = 8 << 30, queue_size: int = 16, env: dict | None = None, grace_s: float = GRACE_S, test_jobs: bool = False
    ):
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.size = workers
        self.time_limit_s = time_limit_s
        self.memory_limit_bytes = memory_limit_bytes
        self.queue_size = queue_size
        self.env = dict(env or {})
        self.grace_s = grace_s  # the parent kills a busy worker this long after the time limit
        self._test_jobs = test_jobs  # the pool's own tests only (neurarch.web.worker._test_job); the app never sets it
        self._ctx = multiprocessing.get_context("spawn")
        self._threads = ThreadPoolExecutor(max_workers=workers + 1, thread_name_prefix="neurarch-pool")
        self._queue: asyncio.Queue | None = None
        self._slots: list[asyncio.Task] = []
        self.workers: list[_Worker | None] = [None] * workers
        self.killed = {"time": 0, "memory": 0, "crash": 0}
        self.busy = 0
        self._closed = False

    # ------------------------------------------------------------------ life
    async def start(self) -> None:
        """Start every worker and wait until each has done its imports."""
        loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue(maxsize=self.queue_size)
        started = [_Worker(self._ctx, self.env, self._test_jobs) for _ in range(self.size)]
        self.workers = list(started)
        await asyncio.gather(*(loop.run_in_executor(self._threads, w.wait_ready) for w in started))
        self._slots = [asyncio.create_task(self._slot(i)) for i in range(self.size)]

    async def close(self) -> None:
        self._closed = True
        for t in self._slots:
            t.cancel()
        for t in self._slots:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        for w in self.workers:
            if w is not None:
                try:
                    w.conn.send(None)
                except OSError:
                    pass
                w.kill()
        if self._queue is not None:
            while not self._queue.empty():
                job = self._queue.get_nowait()
                if not job.future.done():
                    job.future.set_exception(ApiError(503, "shutting_down", "the server is shutting down"))
        self._threads.shutdown(wait=False, cancel_futures=True)

    def pids(self) -> list[int]:
        return [w.pid for w in self.workers if w is not None]

    def stats(self) -> dict:
        return {
            "workers": self.size,
            "busy": self.busy,
            "queued": self._queue.qsize() if self._queue else 0,
            "queue_size": self.queue_size,
            "killed": dict(self.killed),
            "worker_rss_bytes": {w.pid: group_rss(w.pid) for w in self.workers if w is not None},
        }

    # ------------------------------------------------------------------ jobs
    async def submit(self, payload: dict):
        """Run ``payload`` on a worker; the worker's answer, or :class:`ApiError`."""
        if self._queue is None or self._closed:
            raise ApiError(503, "not_ready", "the server's workers are not running")
        fut = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait(_Job(payload, fut))
        except asyncio.QueueFull:
            retry = max(1, int(self.time_limit_s // 10))
            raise ApiError(429, "queue_full", f"the server is busy: {self.queue_size} plans already wait; retry in {retry} s", headers={"Retry-After": str(retry)}) from None
        result = await fut
        if result[0] == "error":
            raise ApiError.from_tuple(result[1:])
        return result

    async def _slot(self, i: int) -> None:
        loop = asyncio.get_running_loop()
        assert self._queue is not None
        while True:
            job = await self._queue.get()
            if job.future.cancelled():
                continue
            worker = self.workers[i]
            if worker is None or not worker.proc.is_alive():
                worker = await self._replace(i, "crash" if worker is not None else None)
            self.busy += 1
            try:
                result = await loop.run_in_executor(self._threads, self._run, worker, job.payload)
            except Exception as e:  # noqa: BLE001 - a broken pipe: the worker died
                result = ("error", 500, "internal", f"internal error: the worker failed ({type(e).__name__})", None, {})
            finally:
                self.busy -= 1
            if result[0] == "killed":
                self.killed[result[1]] += 1
                log.warning("worker %d killed (%s): %s", worker.pid, result[1], result[2])
                await self._replace(i, None)
                result = ("error",) + result[3]
            if not job.future.done():
                job.future.set_result(result)

    async def _replace(self, i: int, reason: str | None) -> _Worker:
        loop = asyncio.get_running_loop()
        old = self.workers[i]
        if old is not None:
            if reason:
                self.killed[reason] += 1
            await loop.run_in_executor(self._threads, old.kill)
        new = _Worker(self._ctx, self.env, self._test_jobs)
        self.workers[i] = new
        await loop.run_in_executor(self._threads, new.wait_ready)
        return new

    def _run(self, w: _Worker, payload: dict) -> tuple:
        """Send one job and wait for its answer, watching the clock and the memory (a thread)."""
        limit = payload.get("timeout_s") or self.time_limit_s
        deadline = time.monotonic() + limit + self.grace_s
        w.conn.send(payload)
        while True:
            if w.conn.poll(POLL_S):
                try:
                    answer = w.conn.recv()
                except EOFError:
                    return ("killed", "crash", "the worker died", (500, "internal", "internal error: the worker process died", None, {}))
                w.jobs_done += 1
                return answer
            if not w.proc.is_alive():
                return ("killed", "crash", "the worker died", (500, "internal", "internal error: the worker process died while simulating this model", None, {}))
            rss = w.rss()
            if rss > self.memory_limit_bytes:
                w.kill()
                gib = self.memory_limit_bytes / (1 << 30)
                return (
                    "killed",
                    "memory",
                    f"{rss} bytes resident",
                    (422, "memory_limit", f"simulating this model needed more than the server's memory limit ({gib:g} GiB per worker); run it with the CLI on a larger machine", None, {}),
                )
            if time.monotonic() > deadline:
                w.kill()
                return ("killed", "time", f"past {limit:g} s", (504, "timeout", f"the plan took longer than the server's limit of {limit:g} s per request", None, {}))


def worker_env() -> dict:
    """Environment a worker inherits on top of the server's (offline Hub settings pass through)."""
    keys = ("HF_HUB_OFFLINE", "HF_HOME", "HF_ENDPOINT", "NEURARCH_JOBS", "NEURARCH_CACHE_DIR")
    return {k: os.environ[k] for k in keys if k in os.environ}


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]
