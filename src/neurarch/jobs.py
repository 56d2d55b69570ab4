"""Running the plan's work: a wall-clock limit, the libraries' log lines, and jobs side by side.

* :func:`time_limit` — a SIGALRM timer around the build and trace (main thread only).
* :func:`library_logs` — the warnings transformers logs while building, collected
  as report notes; torch's fake-tensor tracebacks and bitsandbytes' CPU notice kept off stderr.
* :class:`Jobs` / :func:`run_jobs` — independent jobs (one per memory mode, the
  cost count) in forked worker processes, each returning a :class:`JobOutcome`.
* :func:`hold_collection` / :func:`release_collection` — no cyclic garbage
  collection while a process of neurarch's own imports the libraries and builds
  the model; what exists then is frozen out of later collections.

Nothing here imports torch or transformers at import time.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sys
import threading
from typing import Any, NamedTuple

from .errors import TraceTimeout


class JobOutcome(NamedTuple):
    """What one job gave back: ``(True, its value)`` or ``(False, (error type, first line))``."""

    ok: bool
    value: Any

    @property
    def error(self) -> str:
        """The failure's first line ("" for a job that ran)."""
        return "" if self.ok else self.value[1]


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str):
    """Raise TraceTimeout after ``seconds`` (main thread only; elsewhere no limit)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    message = f"{what} took longer than {seconds:g} s (raise the limit with --timeout)"
    fired = []

    def on_alarm(signum, frame):
        fired.append(True)
        raise TraceTimeout(message)

    saved = _torch_state()
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if fired:
            _restore_torch_state(saved)
    if fired:  # the trace catches a failing forward pass as a result; a timeout is not one
        raise TraceTimeout(message)


def _torch_state() -> tuple | None:
    """torch's process-wide switches, if torch is imported (it is not imported here)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return torch.is_grad_enabled(), torch.get_default_dtype(), torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


def _restore_torch_state(saved: tuple | None) -> None:
    """Put torch's switches back after the alarm: it can fire inside a context manager's
    ``__enter__`` after the switch is set (``no_grad``, a default dtype, a fake or meta
    mode pushed) and before its ``with`` block began, and then no ``__exit__`` runs.
    Left so, a process that goes on (a library caller, a test) would run later
    backward passes without gradients."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    grad, dtype, functions, dispatch = saved if saved is not None else (True, torch.float32, 0, 0)
    torch.set_grad_enabled(grad)
    torch.set_default_dtype(dtype)
    while torch._C._len_torch_function_stack() > functions:
        torch._C._pop_torch_function_stack()
    from torch.utils._python_dispatch import _pop_mode

    while torch._C._len_torch_dispatch_stack() > dispatch:
        _pop_mode()


class _ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        msg = record.getMessage().strip().splitlines()
        if msg and msg[0] not in self.messages:
            self.messages.append(msg[0])


@contextlib.contextmanager
def library_logs():
    """Collect the warnings transformers logs while building (they become report notes)."""
    from transformers.utils import logging as hf_logging

    logger = hf_logging.get_logger("transformers")  # also installs transformers' own handler first
    handler = _ListHandler()
    saved = (logger.handlers[:], logger.level, logger.propagate)
    logger.handlers = [handler]
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    # FakeTensorMode logs a full traceback at ERROR when an op fails; the
    # failure is reported in forward_pass.error, so keep stderr to one line.
    fake_logger = logging.getLogger("torch._subclasses.fake_tensor")
    fake_level = fake_logger.level
    fake_logger.setLevel(logging.CRITICAL)
    # bitsandbytes warns that an optional CPU kernel package is missing; it falls back by itself.
    bnb_logger = logging.getLogger("bitsandbytes")
    bnb_level = bnb_logger.level
    bnb_logger.setLevel(logging.ERROR)
    try:
        yield handler.messages
    finally:
        logger.handlers, level, logger.propagate = saved[0], saved[1], saved[2]
        logger.setLevel(level)
        fake_logger.setLevel(fake_level)
        bnb_logger.setLevel(bnb_level)


# --------------------------------------------------------------------------
# Plan and cost: independent jobs, run side by side where the OS can fork
# --------------------------------------------------------------------------

_JOBS: dict | None = None  # name -> callable, read by forked workers

_HELD = [False]
_WHOLE_RUN = [False]


def hold_collection(whole_run: bool = False) -> None:
    """No cyclic garbage collection until :func:`release_collection` (which the pipeline calls
    once the model is built).  For a process that does nothing but one plan (the console
    command's supervised child): importing torch and transformers and building the model
    make hundreds of thousands of objects that live as long as the process, and every full
    collection while they are made walks all of them again (``benchmarks/collection_time.py``).
    The entry point releases it too once done, in case ``analyze`` stopped before the build.

    ``whole_run``: the process ends with this plan, so the collection stays off after the
    build too (:func:`release_collection` only freezes).  What the plan makes from then on
    (the trace's fake tensors and autograd graph, the workers' results, the report) lives
    until the report is written anyway; a collection now would only take CPU from the
    workers (little: ``benchmarks/collection_time.py``)."""
    gc.disable()
    _HELD[0] = True
    _WHOLE_RUN[0] = whole_run


def release_collection() -> None:
    """After :func:`hold_collection`: freeze what exists now (``gc.freeze``: later collections,
    here and in the workers forked from here, walk only what is made from now on, and a
    forked worker does not touch the parent's pages) and collect again, unless held for the
    whole run.  Nothing held, nothing done (a library caller's process keeps its own settings)."""
    if _HELD[0]:
        _HELD[0] = False
        gc.freeze()
        if not _WHOLE_RUN[0]:
            gc.enable()


@contextlib.contextmanager
def no_collection():
    """No cyclic garbage collection inside the block: a long-lived process's plan (the web
    worker's), which collects once after it has answered.  Collection as it was before
    outside the block."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _child_init(init=None) -> None:
    import torch

    torch.set_num_threads(1)
    if init is not None:
        init()


def _call_job(name: str):
    try:
        assert _JOBS is not None, "a job runs only while Jobs has set the table"
        return name, True, _JOBS[name]()
    except BaseException as e:  # noqa: BLE001 - carried to the parent as a value
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return name, False, (type(e).__name__, msg)


class Jobs:
    """Independent jobs, started at once; :meth:`results` waits for them.

    The jobs (one per memory mode, plus the cost count) only read the built
    model, so on Linux they run in forked processes, one per CPU core: a
    forked child sees the model as it was at the fork, and returns plain
    results.  Started before the parent traces the model, they overlap that
    trace.  Elsewhere, or with one core, they run one after another inside
    :meth:`results`.  ``NEURARCH_JOBS=N`` caps the workers (1: no worker
    processes).  ``start``: the order to start workers' jobs in (a free
    worker takes the next; by default the dict's order); :meth:`results`
    gives them in the dict's order whatever the start order.  ``init``: called
    in each worker process as it starts (not when the jobs run in this one).
    :meth:`close` stops workers still running (a timeout, a failed trace):
    never a hang, never an orphan.
    """

    def __init__(self, jobs: dict, workers: int | None = None, start: list | None = None, init=None):
        global _JOBS
        self.jobs = jobs
        self.names = list(jobs)
        if start is not None:
            if sorted(start) != sorted(self.names):
                raise ValueError(f"start must name every job once: {start} for {self.names}")
            self.names = list(start)
        if workers is None:
            env = os.environ.get("NEURARCH_JOBS", "").strip()
            want = int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1)
            workers = min(len(self.names), want)
        self.pool = None
        self.futures: dict = {}
        if workers <= 1 or len(self.names) <= 1 or sys.platform != "linux":
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        _JOBS = jobs  # the children read it: with fork, all of them start at the first submit
        try:
            self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_child_init, initargs=(init,))
            self.futures = {n: self.pool.submit(_call_job, n) for n in self.names}
        finally:
            _JOBS = None

    @contextlib.contextmanager
    def one_thread(self):
        """This process's torch on one thread inside the block while workers run (the parent's
        trace beside them): every core is already a worker's, and a second intra-op thread here
        only waits for one (its spinning is CPU the workers lose).  As it was outside the block,
        and unchanged where the jobs run in this process."""
        torch = sys.modules.get("torch")
        if self.pool is None or torch is None or torch.get_num_threads() == 1:
            yield
            return
        saved = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(saved)

    def results(self) -> dict[str, JobOutcome]:
        """``{name: JobOutcome(ok, value or (error type, message))}`` for each job."""
        global _JOBS
        if self.pool is None:
            _JOBS = self.jobs
            try:
                # one after another: the order to start them in changes nothing, so the dict's
                return {n: JobOutcome(ok, v) for n, ok, v in map(_call_job, list(self.jobs))}
            finally:
                _JOBS = None
        from concurrent.futures.process import BrokenProcessPool

        out: dict = {}
        for n in self.jobs:
            fut = self.futures[n]
            try:
                _, ok, v = fut.result()
            except BrokenProcessPool:
                # A worker that dies (killed, out of memory) breaks the pool: its jobs become errors, never a hang.
                ok, v = False, ("WorkerCrash", "the worker process simulating this died (out of memory?)")
            out[n] = JobOutcome(ok, v)
        return out

    def close(self) -> None:
        """Shut the workers down; any still running are killed."""
        if self.pool is None:
            return
        pool, self.pool = self.pool, None
        if not all(f.done() for f in self.futures.values()):
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.kill()
            pool.shutdown(wait=False, cancel_futures=True)
        else:
            pool.shutdown(wait=True)


def run_jobs(jobs: dict, workers: int | None = None) -> dict[str, JobOutcome]:
    """Run ``jobs`` (see :class:`Jobs`) and return ``{name: (ok, value or (error type, message))}``."""
    started = Jobs(jobs, workers)
    try:
        return started.results()
    finally:
        started.close()
