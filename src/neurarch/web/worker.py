"""One worker process of the pool: imports neurarch once, then answers jobs.

The parent sends a job dict over a pipe; the worker answers
``("ok", report_json, seconds, revision)`` or ``("error", status, code,
message, field, headers)``.  The worker never sees a path from a user: it
works in an empty folder of its own, model ids are checked again here
(:func:`neurarch.web.ids.check_model_id`), and a pasted config is written by
the worker itself to a file it names.  ``trust_remote_code`` is always off.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path


def _die_with_parent() -> None:
    """Linux: the kernel sends SIGKILL to this worker when the server process dies."""
    if sys.platform != "linux":
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # best effort; the pipe's EOF also ends the loop
        pass


def warm() -> None:
    """Everything a job imports, once (the first request does not pay for it).

    A plan's memory modes and cost count run in children forked from this
    process afresh for every plan (:class:`neurarch.jobs.Jobs`): a module
    only they import (peft for LoRA and QLoRA, bitsandbytes for QLoRA, the
    cost's op count) would be imported again by every plan's children (3-4 s
    per child on 2 busy cores), so it is imported here, before any fork; and
    transformers' modeling base, which the first build would import; and
    transformers' checkpoint renaming table, which peft builds on first use
    (:func:`_conversion_table`).  The
    children run the same modules, imported earlier: the same figures
    (tests/web/test_web_worker_warm.py).  No cyclic collection while it imports;
    what it imported is then frozen out of later collections
    (:func:`neurarch.jobs.hold_collection`)."""
    import importlib

    from neurarch.jobs import hold_collection, release_collection

    hold_collection()
    try:
        _import_all(importlib)
    finally:
        release_collection()


def _import_all(importlib) -> None:
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import transformers.modeling_utils  # noqa: F401  (every transformers build needs it; about 2 s)

    import neurarch.cost.estimate  # noqa: F401  (the cost's op count, a forked job)
    import neurarch.pipeline  # noqa: F401
    import neurarch.plan.curve  # noqa: F401
    import neurarch.plan.fit  # noqa: F401
    import neurarch.plan.memory  # noqa: F401
    import neurarch.verify  # noqa: F401
    from neurarch.jobs import library_logs
    from neurarch.sources import catalog

    with library_logs():  # bitsandbytes' notice about an optional CPU package stays off the server's log, as in a plan
        for name in ("peft", "bitsandbytes", "bitsandbytes.functional"):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - not installed or broken: the modes that need it report it in their section, as before
                pass
        _conversion_table()
    catalog.entries()


def _conversion_table() -> None:
    """transformers' table of checkpoint renamings (every model type's, built
    on first use by compiling its patterns), which peft reads when it injects
    adapters: built here once, so the LoRA and QLoRA children of every plan
    inherit it instead of each building it again.  The table is a constant of
    the installed transformers (what the children read is a copy of an entry);
    with a transformers that has no such table, nothing."""
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping

        get_checkpoint_conversion_mapping("llama")
    except Exception:  # noqa: BLE001 - another transformers: the children build what they need, as before
        pass


def _test_job(job: dict) -> tuple:
    """Jobs that only the pool's own tests can send (``Pool(test_jobs=True)``,
    which the app never sets; no HTTP route builds a job of these kinds):

    * ``test:hang``: a call into C that never returns, with every signal
      blocked first, so the worker's own timer cannot fire: only the parent's
      kill ends it;
    * ``test:hog``: holds ``bytes`` of resident memory (every page written),
      then waits: the parent's memory watch must kill it;
    * ``test:modules``: which of ``names`` this worker has imported (what
      the children it forks for a plan inherit); a name ``module:attribute``
      asks whether that module is imported and that attribute is not None
      (a table built before the fork).
    """
    if job["kind"] == "test:hang":
        signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
        time.sleep(3600)  # nanosleep in C; with the signals blocked nothing interrupts it
    elif job["kind"] == "test:hog":
        held = b"\x01" * int(job["bytes"])  # written, so resident (not lazily mapped zeros)
        time.sleep(float(job.get("hold_s", 600)))
        return ("ok", str(len(held)), 0.0, None)
    elif job["kind"] == "test:modules":
        return ("ok", json.dumps({name: _imported(name) for name in job["names"]}), 0.0, None)
    return ("error", 400, "bad_job", f"unknown job kind {job['kind']!r}", None, {})


def _imported(name: str) -> bool:
    module, _, attribute = name.partition(":")
    if module not in sys.modules:
        return False
    return not attribute or getattr(sys.modules[module], attribute, None) is not None


def run_job(job: dict, workdir: Path, test_jobs: bool = False) -> tuple:
    from ..pipeline import analyze
    from .errors import from_exception
    from .ids import check_model_id
    from .options import to_options

    if job.get("kind") not in ("model", "config"):
        if test_jobs and str(job.get("kind")).startswith("test:"):
            return _test_job(job)
        return ("error", 400, "bad_job", f"unknown job kind {job.get('kind')!r}", None, {})
    started = time.monotonic()
    try:
        opts = to_options(job["options"], timeout_s=job.get("timeout_s"))
        opts = dataclasses.replace(opts, offline=job.get("offline"))  # options are frozen: a new value
        if job["kind"] == "model":
            spec = check_model_id(job["id"])
            opts = dataclasses.replace(opts, revision=job.get("revision") or None)
            report = analyze(spec, opts)
        else:
            from ..sources import check_remote_code

            name = job["name"]
            check_remote_code(job["config"], name, False)
            folder = Path(tempfile.mkdtemp(dir=workdir))
            path = folder / "config.json"
            path.write_text(json.dumps(job["config"]), encoding="utf-8")
            try:
                report = analyze(str(path), opts)
            finally:
                path.unlink(missing_ok=True)
                folder.rmdir()
            # The worker's own temporary path means nothing to a reader: name the paste.
            report.model.id = name
            report.model.provenance = f"pasted config.json ({name})"
        return ("ok", report.model_dump_json(indent=2), time.monotonic() - started, report.model.revision)
    except BaseException as e:  # noqa: BLE001 - every failure goes back as a value
        if isinstance(e, KeyboardInterrupt):
            raise
        return ("error",) + from_exception(e).as_tuple()


def warm_job(item: dict) -> list:
    """One ``--warm`` item, run by :func:`neurarch.sweep.iter_sweep` in a
    supervised process of its own: the same work as a ``model`` job of the
    pool (:func:`run_job`), from an empty folder; its answer as a list."""
    workdir = Path(tempfile.mkdtemp(prefix="neurarch-warm-"))
    os.chdir(workdir)
    try:
        return list(run_job({"kind": "model", **item}, workdir))
    finally:
        try:
            os.rmdir(workdir)
        except OSError:
            pass


def main(conn, env: dict, test_jobs: bool = False) -> None:
    """The worker's loop (the target of the pool's ``Process``); ``test_jobs``
    admits the pool tests' job kinds (:func:`_test_job`)."""
    os.setpgrp()  # its own process group: the parent kills the worker with its forked children
    _die_with_parent()
    os.environ.update(env)
    workdir = Path(tempfile.mkdtemp(prefix="neurarch-worker-"))
    os.chdir(workdir)  # an empty folder: a relative name never finds a file
    from ..jobs import no_collection

    try:
        warm()
        conn.send(("ready", os.getpid()))
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):
                break
            if job is None:
                break
            with no_collection():  # none while its workers simulate (little to spare: benchmarks/collection_time.py)
                reply = run_job(job, workdir, test_jobs)
            conn.send(reply)
            del reply
            gc.collect()  # once answered: what the plan left
    finally:
        try:
            os.rmdir(workdir)
        except OSError:
            pass
