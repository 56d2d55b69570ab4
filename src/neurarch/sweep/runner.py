"""Run a job over many items on dask.distributed, each item in its own supervised process.

    from neurarch.sweep import run_sweep
    records = run_sweep(["bert-base-uncased", "gpt2"], job=my_job, results_path="results.jsonl",
                        time_limit_s=600, memory_limit_bytes=8 << 30, workers=2)

* ``scheduler=None`` starts a :class:`distributed.LocalCluster` on this machine
  (``workers`` processes, one thread each, listening on 127.0.0.1 only, no
  dashboard); an address (``"tcp://10.0.0.5:8786"``) sends the items to an
  existing cluster, whose workers need neurarch installed.
* Each item is one dask task; the task runs ``job(item)`` in a fresh process
  forked by a :class:`neurarch.supervise.Supervisor` that the dask worker keeps
  (one per worker, started on its first item, with ``preload`` imported once).
  So the job runs on its process's main thread and may fork its own pool (dask's
  worker processes are daemonic and may not start ``multiprocessing`` children;
  the supervisor is started with :mod:`subprocess`, which they may), and the time
  and memory limits are enforced from outside the job's process: a job stuck in
  C code is killed as a hang ``grace_s`` after its time limit, one over the
  memory limit is killed at once (see :mod:`neurarch.supervise`).
* Every finished item is appended to ``results_path`` as one JSON line at once;
  with ``resume=True`` (the default) items whose key is already there are not
  run again.  ``resume=False`` starts the file afresh.
* The dask worker's own memory manager is switched off on the local cluster
  (``memory_limit=0``): the per-item limit is the one that holds.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterable, Sequence

from ..supervise import GRACE_S, Supervisor
from .records import SweepRecord, append_result, read_results

if TYPE_CHECKING:
    from typing_extensions import Required, TypedDict, Unpack

    class SweepOptions(TypedDict, total=False):
        """:func:`iter_sweep`'s keywords (its signature holds the defaults), as :func:`run_sweep` passes them on."""

        job: Required[Callable[[Any], Any]]
        results_path: Required[str | os.PathLike]
        time_limit_s: Required[float]
        memory_limit_bytes: int | None
        grace_s: float
        scheduler: str | None
        workers: int | None
        resume: bool
        preload: Sequence[str]
        env: dict[str, str] | None
        key: Callable[[Any], str]
        retry_failed: bool


# Supervisors kept by each dask worker process: (preload, env) -> Supervisor.
_SUPERVISORS: dict[tuple, Supervisor] = {}
_SUPERVISORS_LOCK = threading.Lock()


def item_key(item: Any) -> str:
    """The name of an item in the results file: a string as it is, anything else as sorted JSON."""
    return item if isinstance(item, str) else json.dumps(item, sort_keys=True, separators=(",", ":"))


def _supervisor(preload: tuple[str, ...], env: dict[str, str]) -> Supervisor:
    k = (preload, tuple(sorted(env.items())))
    with _SUPERVISORS_LOCK:
        sup = _SUPERVISORS.get(k)
        if sup is None or not sup.alive():
            sup = _SUPERVISORS[k] = Supervisor(preload, env=env)
        return sup


def _not_json(value: Any) -> str:
    """Why ``value`` cannot go in a JSON line ("" when it can)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError) as e:
        return str(e) or type(e).__name__
    return ""


def run_item(job: Callable[[Any], Any], item: Any, key: str, time_limit_s: float, memory_limit_bytes: int | None, grace_s: float, preload: tuple[str, ...], env: dict[str, str]) -> dict:
    """One item, as a dask task: ``job(item)`` in a supervised process; the record as a dict."""
    where = f"{socket.gethostname()}:{os.getpid()}"
    try:
        sup = _supervisor(preload, env)
    except Exception as e:  # noqa: BLE001 - no process could be started: the item's record says why
        return SweepRecord(key, item, "crash", error=f"Crash: {e}", worker=where).__dict__
    out = sup.run(job, (item,), time_limit_s=time_limit_s, memory_limit_bytes=memory_limit_bytes, grace_s=grace_s)
    value, status, error = out.value, out.status, out.error
    if status == "ok" and (why := _not_json(value)):
        value, status, error = None, "error", f"the job's answer is not JSON: {why}"
    progress = out.progress if not _not_json(out.progress) else repr(out.progress)[:2000]
    if status == "crash" and not error and out.stderr_tail:
        error = out.stderr_tail[-1]
    return SweepRecord(
        key,
        item,
        status,
        value=value,
        error=error,
        seconds=out.seconds,
        peak_rss_bytes=out.peak_rss_bytes,
        progress=progress,
        exit_code=out.exit_code,
        stderr_tail=[line[:300] for line in out.stderr_tail[-5:]],
        worker=where,
    ).__dict__


def _check(items: list, keys: list[str], time_limit_s: float, workers: int) -> None:
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
        raise ValueError(f"time_limit_s must be a positive number of seconds, not {time_limit_s!r}")
    if not (isinstance(workers, int) and workers >= 1):
        raise ValueError(f"workers must be a positive whole number, not {workers!r}")
    seen: set[str] = set()
    for k in keys:
        if k in seen:
            raise ValueError(f"the item {k!r} is listed twice")
        seen.add(k)


def iter_sweep(
    items: Iterable[Any],
    *,
    job: Callable[[Any], Any],
    results_path: str | os.PathLike,
    time_limit_s: float,
    memory_limit_bytes: int | None = None,
    grace_s: float = GRACE_S,
    scheduler: str | None = None,
    workers: int | None = None,
    resume: bool = True,
    preload: Sequence[str] = (),
    env: dict[str, str] | None = None,
    key: Callable[[Any], str] = item_key,
    retry_failed: bool = False,
) -> Generator[SweepRecord, None, None]:
    """Run the items not yet in ``results_path``; yield each record as it finishes (and as it is written).

    ``retry_failed``: also run again the items whose record is not ``ok`` (the new line wins on reading).
    """
    items = list(items)
    keys = [key(i) for i in items]
    workers = workers if workers is not None else max(1, os.cpu_count() or 1)
    _check(items, keys, time_limit_s, workers)
    path = Path(results_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not resume:
        path.write_text("")
    done = read_results(path)
    if retry_failed:
        done = {k: r for k, r in done.items() if r.ok}
    todo = [(k, i) for k, i in zip(keys, items) if k not in done]
    if not todo:
        return
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=min(workers, len(todo)), threads_per_worker=1, processes=True, memory_limit=0, host="127.0.0.1", dashboard_address=None, silence_logs=logging.ERROR)
    client = Client(cluster if cluster is not None else scheduler)
    try:
        args = (float(time_limit_s), memory_limit_bytes, float(grace_s), tuple(preload), dict(env or {}))
        run = uuid.uuid4().hex[:12]  # task keys unique on a shared scheduler
        futures = {client.submit(run_item, job, i, k, *args, key=f"neurarch-sweep-{run}-{n}", pure=False, retries=0): (k, i) for n, (k, i) in enumerate(todo)}
        for fut in as_completed(futures):
            k, i = futures[fut]
            try:
                rec = SweepRecord.from_dict(fut.result())
            except Exception as e:  # noqa: BLE001 - the dask worker itself died (KilledWorker) or the task failed
                msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
                rec = SweepRecord(k, i, "crash", error=f"Crash: the dask task failed: {type(e).__name__}: {msg}"[:600])
            append_result(path, rec)
            fut.release()
            yield rec
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def run_sweep(items: Iterable[Any], *, on_record: Callable[[SweepRecord], None] | None = None, **options: Unpack[SweepOptions]) -> list[SweepRecord]:
    """Run every item not yet in ``results_path``; all the items' records (earlier ones too), in the items' order.

    Takes :func:`iter_sweep`'s keywords; ``on_record`` is called with each new record as it finishes (to print progress).
    """
    items = list(items)
    for rec in iter_sweep(items, **options):
        if on_record is not None:
            on_record(rec)
    key = options.get("key", item_key)
    done = read_results(options["results_path"])
    return [done[key(i)] for i in items if key(i) in done]
