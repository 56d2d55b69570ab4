"""Run a function (or a command) in a child process under a wall-clock and a memory limit.

    from neurarch.supervise import run_limited
    out = run_limited(fn, (arg,), time_limit_s=60, memory_limit_bytes=4 << 30)
    out.status      # "ok" | "error" | "timeout" | "hang" | "memory" | "crash"
    out.value       # fn's return value when ok
    out.error       # one line otherwise ("MemoryLimit: 4.3 GB resident, over the limit of 4 GiB")

The limits are enforced from *outside* the process that does the work, so they
hold whatever it is doing (a C call, a deadlock, a runaway allocation):

* A **supervisor** process (``python -c "from neurarch.supervise import serve; serve()"``,
  started with :mod:`subprocess`, so it works from daemonic processes such as
  dask workers and from any thread) forks one **item** process per call; the
  item runs in its own process group.  The supervisor may import modules first
  (``preload=("torch", "transformers")``) so that each item starts warm: one
  supervisor serves many calls (:class:`Supervisor`).
* **Time**: at ``time_limit_s`` the supervisor sends the item ``SIGUSR1``; the
  item's handler raises :class:`TimeLimit` in Python code (a ``BaseException``,
  so ``except Exception`` does not swallow it).  A function may catch it to
  return what it has (status ``ok``); uncaught, the status is ``timeout``.  An
  item still running ``grace_s`` later (stuck in C code, a handler that ignored
  it) is killed with its whole process group: status ``hang``.
* **Memory**: every ``poll_s`` the supervisor sums the resident memory (RSS,
  from ``/proc``) of the item's process group and of all its descendants; over
  ``memory_limit_bytes`` they are killed with ``SIGKILL``: status ``memory``.
  (Not ``RLIMIT_AS``: torch's allocator reserves address space far beyond what
  it touches, so an address-space limit breaks healthy runs.)
* A function that raises gives status ``error`` with the exception as one line;
  an item that dies without an answer (a segfault, ``os._exit``) gives
  ``crash`` with its exit code or signal and the last line it wrote to stderr.
* :func:`progress` lets a function report how far it got; the last value
  reported comes back in :attr:`Outcome.progress` whatever the status, so a
  killed item still tells where it was.
* When the caller goes away, the supervisor kills its item and exits: an item
  never outlives the process that asked for it.

Linux only (``/proc``, ``fork``, process groups).  Nothing here imports torch.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import os
import pickle
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Sequence

from .errors import one_line

Status = Literal["ok", "error", "timeout", "hang", "memory", "crash"]
STATUSES: tuple[str, ...] = ("ok", "error", "timeout", "hang", "memory", "crash")

POLL_S = 0.1  # how often the supervisor reads the item's clock and memory
GRACE_S = 5.0  # after the soft time limit (SIGUSR1), how long before the item is killed as a hang
READY_TIMEOUT_S = 300.0  # a supervisor that cannot finish its preload imports in this time is a broken install
STDERR_TAIL_LINES = 20  # lines of the item's captured stderr kept in an Outcome
_SOFT_SIGNAL = signal.SIGUSR1
_DEADLINE_SIGNAL = signal.SIGUSR2  # deadline(): a signal of its own, so that a late one is told apart
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PROGRESS_ENV = "NEURARCH_SUPERVISE_PROGRESS"  # set in an item: the file progress() appends to
_SRC = str(Path(__file__).resolve().parents[1])  # the folder holding the neurarch package


class TimeLimit(BaseException):
    """Raised inside an item when its wall-clock limit is reached.

    A ``BaseException``: the ``except Exception`` fallbacks in libraries cannot
    swallow it.  Catch it to return a partial answer before the kill ``grace_s`` later.
    """


# --------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------


@dataclass
class Outcome:
    """What became of one supervised call."""

    status: Status
    value: Any = None  # the function's return value (status "ok"); for a command, its stdout
    error: str = ""  # one line, for every status but "ok"
    seconds: float = 0.0  # wall clock from the fork to the end
    peak_rss_bytes: int = 0  # the most resident memory seen (item, its group and descendants, summed)
    progress: Any = None  # the last value the item passed to progress(), None if it never did
    exit_code: int | None = None  # the item's exit code, or -N when signal N ended it
    stderr_tail: list[str] = field(default_factory=list)  # its last stderr lines (when captured)
    error_message: str = ""  # status "error": the exception's message alone (no class name)
    error_types: list[str] = field(default_factory=list)  # status "error": its class and bases, e.g. ["HubError", ..., "NeurarchError", ...]

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# --------------------------------------------------------------------------
# Memory of a process tree, from /proc
# --------------------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, int, int]]:
    """``{pid: (ppid, pgrp, rss_bytes)}`` for every process visible in /proc."""
    table: dict[int, tuple[int, int, int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode("ascii", "replace")
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()  # fields after "(comm)": state ppid pgrp session ...
        if len(rest) > 21:
            table[int(name)] = (int(rest[1]), int(rest[2]), int(rest[21]) * _PAGE)
    return table


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in process group ``pgid`` (Linux /proc; 0 elsewhere)."""
    return sum(rss for _, pgrp, rss in _proc_table().values() if pgrp == pgid)


def tree_pids(pid: int, table: dict[int, tuple[int, int, int]] | None = None) -> set[int]:
    """``pid``, the processes in its process group, and all their descendants."""
    table = _proc_table() if table is None else table
    found = {p for p, (_, pgrp, _) in table.items() if pgrp == pid}
    if pid in table:
        found.add(pid)
    children: dict[int, list[int]] = {}
    for p, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(p)
    todo = list(found)
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid``, its process group and its descendants, summed."""
    table = _proc_table()
    return sum(table[p][2] for p in tree_pids(pid, table) if p in table)


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid``'s process group and every descendant (also those in other groups)."""
    pids = tree_pids(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass


# --------------------------------------------------------------------------
# Frames on pipes and files: 8-byte length, then a pickle
# --------------------------------------------------------------------------


def _send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    buf = memoryview(struct.pack("<Q", len(data)) + data)
    while buf:
        n = os.write(fd, buf)
        buf = buf[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no answer from the supervisor process")
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv(fd: int, deadline: float | None = None) -> Any:
    """The next frame from ``fd``; None at end of file."""
    head = _read_exact(fd, 8, deadline)
    if head is None:
        return None
    body = _read_exact(fd, struct.unpack("<Q", head)[0], deadline)
    return None if body is None else pickle.loads(body)


def _read_frames(path: str) -> list[tuple[str, bytes]]:
    """The (kind, payload) frames an item wrote to its result file; a frame cut short by a kill is dropped."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return []
    frames, at = [], 0
    while at + 8 <= len(data):
        (n,) = struct.unpack("<Q", data[at : at + 8])
        if at + 8 + n > len(data):
            break
        try:
            frames.append(pickle.loads(data[at + 8 : at + 8 + n]))
        except Exception:  # noqa: BLE001 - a damaged frame: keep the ones before it
            break
        at += 8 + n
    return frames


def _append_frame(path: str, kind: str, payload: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        _send(fd, (kind, payload))
    finally:
        os.close(fd)


def _dumps(value: Any) -> bytes:
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - a lambda or a local class: cloudpickle carries those
        import cloudpickle

        return cloudpickle.dumps(value)


# --------------------------------------------------------------------------
# Inside an item
# --------------------------------------------------------------------------


def progress(value: Any) -> None:
    """Report how far the current item got (any picklable value; the last one wins).

    Outside a supervised item it does nothing, so a function can call it
    whether or not it runs under :func:`run_limited`.
    """
    path = os.environ.get(_PROGRESS_ENV)
    if path:
        _append_frame(path, "progress", _dumps(value))


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`TimeLimit` in the block if it runs longer than ``seconds`` (main thread only).

    For a stage inside an item that needs a shorter limit of its own (a quick
    check after the main work).  Like the item's own limit it interrupts Python
    code and sleeps, not a C call: the supervisor's kill still backs it.
    Deadlines nest; a signal that arrives just after the block is ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("deadline() works on the main thread only (signals are delivered there)")
    if not seconds > 0:
        raise ValueError(f"deadline needs a positive number of seconds, not {seconds!r}")
    end = time.monotonic() + seconds
    state = {"active": True}

    def on_signal(signum, frame):
        if state["active"] and time.monotonic() >= end - 0.001:
            state["active"] = False
            raise TimeLimit(f"over {seconds:g} s")
        if callable(previous):  # an outer deadline's signal
            previous(signum, frame)

    previous = signal.signal(_DEADLINE_SIGNAL, on_signal)
    timer = threading.Timer(seconds, os.kill, (os.getpid(), _DEADLINE_SIGNAL))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        state["active"] = False
        timer.cancel()
        # a signal already on its way must not end the process: never back to the default action
        signal.signal(_DEADLINE_SIGNAL, previous if callable(previous) else (lambda signum, frame: None))


def _on_soft_limit(signum, frame):
    raise TimeLimit(os.environ.get("NEURARCH_SUPERVISE_LIMIT_TEXT", "over the time limit"))


def _error_payload(e: BaseException) -> bytes:
    """An exception as plain data: its one-line text, its message alone, and its classes' names."""
    msg = one_line(str(e)) if str(e).strip() else ""
    return pickle.dumps({"text": f"{type(e).__name__}: {msg}" if msg else type(e).__name__, "message": msg, "types": [c.__name__ for c in type(e).__mro__ if c is not object]})


def _item_main(req: dict, result_path: str, log_path: str | None) -> None:
    """The forked item: run the call, write its answer to ``result_path``, exit."""
    code = 0
    try:
        signal.signal(_SOFT_SIGNAL, _on_soft_limit)
        os.setpgid(0, 0)
        if log_path:
            fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            out = os.open(log_path + ".out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) if req.get("argv") else fd
            os.dup2(out, 1)  # a command's stdout is its answer; a function's goes with its stderr
            os.dup2(fd, 2)
            for f in {fd, out}:
                os.close(f)
        else:
            os.dup2(req["_stdout_fd"], 1)  # the caller's own stdout, not the supervisor's protocol pipe
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        for fd in req.get("_close_fds", ()):
            try:
                os.close(fd)
            except OSError:
                pass
        os.environ.update(req.get("env") or {})
        os.environ[_PROGRESS_ENV] = result_path
        os.environ["NEURARCH_SUPERVISE_LIMIT_TEXT"] = f"over the time limit of {req['time_limit_s']:g} s"
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        for p in reversed(req.get("sys_path") or []):
            if p not in sys.path:
                sys.path.insert(0, p)
        if req.get("cwd"):
            os.chdir(req["cwd"])
        if req.get("argv"):
            signal.signal(_SOFT_SIGNAL, signal.SIG_DFL)
            os.execvp(req["argv"][0], req["argv"])  # a command: its exit code is its answer
        fn, args, kwargs = pickle.loads(req["call"])
        try:
            value = fn(*args, **kwargs)
            _append_frame(result_path, "ok", _dumps(value))
        except TimeLimit as e:
            _append_frame(result_path, "timeout", str(e).encode())
        except BaseException as e:  # noqa: BLE001 - every failure becomes a value for the caller
            payload = _error_payload(e)
            try:
                _append_frame(result_path, "error", payload)
            except TimeLimit:
                _append_frame(result_path, "error", payload)
        sys.stdout.flush()
        sys.stderr.flush()
    except TimeLimit:
        _append_frame(result_path, "timeout", b"over the time limit while starting")
    except BaseException as e:  # noqa: BLE001 - e.g. the call cannot be unpickled here
        try:
            _append_frame(result_path, "error", _error_payload(e))
        except BaseException:  # noqa: BLE001
            code = 70
    finally:
        os._exit(code)


# --------------------------------------------------------------------------
# The supervisor process
# --------------------------------------------------------------------------


def _become_subreaper() -> None:
    """Orphans of an item are re-parented here (not to init), so they stay in its tree."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _reap(item: int) -> int | None:
    """Collect every child that ended (the item, orphans re-parented here); the item's status word if it ended."""
    found = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return found
        if pid == 0:
            return found
        if pid == item:
            found = status


def _tail(path: str | None) -> list[str]:
    if not path:
        return []
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-STDERR_TAIL_LINES:]


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.3g} GiB"


def _supervise_one(req: dict, proto_in: int) -> dict:
    """Fork the item, watch its clock and memory until it ends, and describe what happened."""
    work = tempfile.mkdtemp(prefix="neurarch-item-")
    result_path = os.path.join(work, "result")
    log_path = os.path.join(work, "log") if req.get("capture_output", True) else None
    limit, grace = float(req["time_limit_s"]), float(req.get("grace_s", GRACE_S))
    memory = req.get("memory_limit_bytes")
    poll = float(req.get("poll_s", POLL_S))
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _item_main(req, result_path, log_path)
    try:
        os.setpgid(pid, pid)  # also here: the group exists before the first kill, whoever runs first
    except OSError:
        pass
    try:
        ended_fd: int | None = os.pidfd_open(pid)  # readable once the item ends: the wait between polls ends with it
    except (AttributeError, OSError):  # before Linux 5.3 or Python 3.9: the poll's sleep alone
        ended_fd = None
    killed: str | None = None
    killed_text = ""
    peak = 0
    soft_sent = False
    status_word = 0
    caller_gone = False
    while True:
        ended = _reap(pid)
        if ended is not None:
            status_word = ended
            break
        now = time.monotonic()
        if killed is None:
            rss = tree_rss(pid)
            peak = max(peak, rss)
            if memory and rss > memory:
                killed, killed_text = "memory", f"MemoryLimit: {_gib(rss)} resident, over the limit of {_gib(memory)}"
            elif now - t0 >= limit and (grace == 0 or req.get("argv")):  # no soft limit: killed at the limit
                killed, killed_text = "timeout", f"Timeout: over the time limit of {limit:g} s; killed"
            elif now - t0 >= limit + grace:
                killed, killed_text = "hang", (f"Hang: still running {grace:g} s after the time limit of {limit:g} s (stuck where Python cannot interrupt it); killed")
            elif not soft_sent and now - t0 >= limit:
                soft_sent = True
                try:
                    os.kill(pid, _SOFT_SIGNAL)
                except ProcessLookupError:
                    pass
            if killed:
                kill_tree(pid)
        # the caller closed its end (it exited or was killed): stop the item, then stop
        if select.select([proto_in], [], [], 0)[0] and not os.read(proto_in, 1):
            caller_gone = True
            kill_tree(pid)
            os.waitpid(pid, 0)
            break
        if ended_fd is not None:
            select.select([ended_fd], [], [], poll)
        else:
            time.sleep(poll)
    if ended_fd is not None:
        os.close(ended_fd)
    seconds = time.monotonic() - t0
    kill_tree(pid)  # whatever the item left running in its group
    _reap(pid)
    frames = _read_frames(result_path)
    tail = _tail(log_path)
    stdout = None
    if req.get("argv") and log_path:
        try:
            stdout = Path(log_path + ".out").read_text(errors="replace")
        except OSError:
            stdout = ""
    shutil.rmtree(work, ignore_errors=True)
    if caller_gone:
        sys.exit(0)
    if os.WIFSIGNALED(status_word):
        exit_code = -os.WTERMSIG(status_word)
    elif os.WIFEXITED(status_word):
        exit_code = os.WEXITSTATUS(status_word)
    else:
        exit_code = None
    out: dict[str, Any] = {"status": "crash", "value": None, "error": "", "seconds": round(seconds, 3), "peak_rss_bytes": peak, "progress": None, "exit_code": exit_code, "stderr_tail": tail}
    for kind, payload in frames:
        if kind == "progress":
            out["progress"] = payload
    final = next((f for f in reversed(frames) if f[0] != "progress"), None)
    if killed:
        out["status"], out["error"] = killed, killed_text
    elif req.get("argv") and final is not None and final[0] == "error":  # it could not be started
        err = pickle.loads(final[1])
        out["status"], out["error"] = "error", err["text"]
        out["error_message"], out["error_types"] = err["message"], err["types"]
    elif req.get("argv"):  # a command: its exit code decides
        out["value"] = stdout
        if exit_code == 0:
            out["status"] = "ok"
        elif exit_code is not None and exit_code > 0:
            out["status"] = "error"
            out["error"] = one_line(tail[-1]) if tail else f"exited with code {exit_code}"
        else:
            out["error"] = _crash_text(exit_code, tail)
    elif final is None:
        out["error"] = _crash_text(exit_code, tail)
    elif final[0] == "ok":
        out["status"], out["value"] = "ok", final[1]
    elif final[0] == "timeout":
        out["status"], out["error"] = "timeout", f"Timeout: {final[1].decode()}"
    else:
        err = pickle.loads(final[1])
        out["status"], out["error"] = "error", err["text"]
        out["error_message"], out["error_types"] = err["message"], err["types"]
    return out


def _crash_text(exit_code: int | None, tail: list[str]) -> str:
    if exit_code is not None and exit_code < 0:
        try:
            how = f"was killed by signal {signal.Signals(-exit_code).name}"
        except ValueError:
            how = f"was killed by signal {-exit_code}"
    else:
        how = f"exited with code {exit_code} without an answer"
    last = f": {one_line(tail[-1], 300)}" if tail else ""
    return f"Crash: the process {how}{last}"


def serve() -> None:
    """The supervisor process's loop: preload, then one request at a time from stdin."""
    proto_in = 0
    proto_out = os.dup(1)
    os.dup2(2, 1)  # stray prints (and the items' stdout) must not reach the protocol pipe
    os.set_inheritable(proto_out, False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides when this stops
    _become_subreaper()
    hello = _recv(proto_in)
    if not isinstance(hello, dict):
        return
    for p in reversed(hello.get("sys_path") or []):
        if p not in sys.path:
            sys.path.insert(0, p)
    # No cyclic collection while the preload imports (it would walk the modules' objects again
    # and again); they live as long as the process, so they are then frozen out of later
    # collections, here and in every item forked from here.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for name in hello.get("preload") or ():
            importlib.import_module(name)
    except BaseException as e:  # noqa: BLE001 - reported to the caller, who decides
        _send(proto_out, ("failed", f"{type(e).__name__}: {one_line(str(e))}"))
        return
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    try:
        _send(proto_out, ("ready", os.getpid()))
    except OSError:  # the caller went away while it imported: nothing to serve
        return
    while True:
        req = _recv(proto_in)
        if req is None:
            break
        req["_close_fds"] = (proto_out,)
        req["_stdout_fd"] = hello["stdout_fd"] if hello.get("stdout_fd") is not None else 2
        _send(proto_out, ("done", _supervise_one(req, proto_in)))
    # The caller closed its end: done.  Exit now, without the interpreter's teardown (unloading a
    # preloaded torch takes a tenth of a second or two, which the caller's close() would wait
    # for, and a shell pipe too, while this process holds the caller's output).  Nothing is left
    # to clean up: each item's files went with its answer.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream: nothing to flush
            pass
    os._exit(0)


# --------------------------------------------------------------------------
# The caller's side
# --------------------------------------------------------------------------


def _check_limits(time_limit_s: float, memory_limit_bytes: int | None, grace_s: float) -> None:
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
        raise ValueError(f"time_limit_s must be a positive number of seconds, not {time_limit_s!r}")
    if memory_limit_bytes is not None and not (isinstance(memory_limit_bytes, int) and memory_limit_bytes > 0):
        raise ValueError(f"memory_limit_bytes must be a positive number of bytes, not {memory_limit_bytes!r}")
    if not (isinstance(grace_s, (int, float)) and grace_s >= 0):
        raise ValueError(f"grace_s must be zero or more seconds, not {grace_s!r}")


class Supervisor:
    """A supervisor process that runs calls one at a time, each in a fresh forked item.

    ``preload`` names modules the supervisor imports once, before the first
    call, so every item forks with them loaded (``("torch", "transformers")``
    saves seconds per item).  ``wait``: False returns at once, while the
    supervisor starts and imports them, and the first call waits for it (the
    caller does its own work meanwhile; :meth:`close` before that kills it
    rather than wait for the imports).  Safe to share between threads: calls
    wait their turn.  Close it (or use ``with``) when done; it also exits on its
    own when the process that started it goes away.
    """

    def __init__(self, preload: Sequence[str] = (), *, env: dict[str, str] | None = None, capture_output: bool = True, wait: bool = True):
        self.preload = tuple(preload)
        self.capture_output = capture_output
        self._ready = False
        self._lock = threading.Lock()
        child_env = dict(os.environ)
        child_env.update(env or {})
        child_env["PYTHONPATH"] = os.pathsep.join([_SRC] + [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p])
        stdout_fd = None
        if not capture_output:  # the items write to this process's stdout: hand the supervisor a copy of it
            try:
                sys.stdout.flush()
                stdout_fd = os.dup(sys.stdout.fileno())
            except (AttributeError, OSError, ValueError):
                stdout_fd = None
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from neurarch.supervise import serve; serve()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None if not capture_output else subprocess.DEVNULL,
                env=child_env,
                start_new_session=True,
                pass_fds=(stdout_fd,) if stdout_fd is not None else (),
            )
        finally:
            if stdout_fd is not None:
                os.close(stdout_fd)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        try:
            _send(self._in, {"preload": self.preload, "sys_path": [p for p in sys.path if p], "stdout_fd": stdout_fd})
        except OSError as e:
            self.close()
            raise RuntimeError(f"the supervisor process did not start: {e}") from None
        if wait:
            self._await_ready()

    def _await_ready(self) -> None:
        """Wait for the supervisor's "ready" (its preload imported), once; RuntimeError if it failed."""
        if self._ready:
            return
        try:
            answer = _recv(self._out, time.monotonic() + READY_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            self.close()
            raise RuntimeError(f"the supervisor process did not start: {e}") from None
        if not (isinstance(answer, tuple) and answer[0] == "ready"):
            self.close()
            why = answer[1] if isinstance(answer, tuple) and len(answer) > 1 else "it exited"
            raise RuntimeError(f"the supervisor process could not import {', '.join(self.preload) or 'neurarch'}: {why}")
        self.pid = answer[1]
        self._ready = True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        time_limit_s: float,
        memory_limit_bytes: int | None = None,
        grace_s: float = GRACE_S,
        poll_s: float = POLL_S,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> Outcome:
        """``fn(*args, **kwargs)`` in a new item process under the limits (see the module's docstring)."""
        _check_limits(time_limit_s, memory_limit_bytes, grace_s)
        import cloudpickle  # functions defined in a test or a notebook travel by value

        call = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
        return self._request({"call": call}, time_limit_s, memory_limit_bytes, grace_s, poll_s, env, cwd)

    def run_command(
        self,
        argv: Sequence[str],
        *,
        time_limit_s: float,
        memory_limit_bytes: int | None = None,
        grace_s: float = GRACE_S,
        poll_s: float = POLL_S,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> Outcome:
        """A command (``[sys.executable, "-m", "neurarch.cli", ...]``) under the limits; ok when it exits 0."""
        _check_limits(time_limit_s, memory_limit_bytes, grace_s)
        if not argv:
            raise ValueError("argv must name a command")
        return self._request({"argv": [str(a) for a in argv]}, time_limit_s, memory_limit_bytes, grace_s, poll_s, env, cwd)

    def _request(self, req: dict, time_limit_s, memory_limit_bytes, grace_s, poll_s, env, cwd) -> Outcome:
        req.update(
            time_limit_s=float(time_limit_s),
            memory_limit_bytes=memory_limit_bytes,
            grace_s=float(grace_s),
            poll_s=float(poll_s),
            env=dict(env or {}),
            cwd=cwd,
            capture_output=self.capture_output,
            sys_path=[p for p in sys.path if p],
        )
        # The supervisor answers within the limits; past this something is badly wrong with it.
        deadline = time.monotonic() + time_limit_s + grace_s + 60
        with self._lock:
            self._await_ready()
            if not self.alive():
                raise RuntimeError("the supervisor process has exited")
            try:
                _send(self._in, req)
                answer = _recv(self._out, deadline)
            except (OSError, TimeoutError) as e:
                self.close()
                return Outcome("crash", error=f"Crash: the supervisor process failed ({type(e).__name__}: {e})")
        if not (isinstance(answer, tuple) and answer[0] == "done"):
            self.close()
            return Outcome("crash", error="Crash: the supervisor process died")
        d = answer[1]
        out = Outcome(
            d["status"],
            error=d["error"],
            seconds=d["seconds"],
            peak_rss_bytes=d["peak_rss_bytes"],
            exit_code=d["exit_code"],
            stderr_tail=d["stderr_tail"],
            error_message=d.get("error_message", ""),
            error_types=d.get("error_types", []),
        )
        try:
            if d["progress"] is not None:
                out.progress = pickle.loads(d["progress"])
            if d["status"] == "ok" and isinstance(d["value"], bytes) and "call" in req:
                out.value = pickle.loads(d["value"])
            elif d["value"] is not None:
                out.value = d["value"]
        except Exception as e:  # noqa: BLE001 - e.g. the value's class is not importable here
            out.status, out.value = "error", None
            out.error = f"the result could not be read back: {type(e).__name__}: {one_line(str(e))}"
        return out

    def close(self) -> None:
        """Stop the supervisor (an item it is running is killed with it); one still importing its
        preload is killed at once."""
        if not self._ready and self.proc.poll() is None:
            kill_tree(self.proc.pid)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            kill_tree(self.proc.pid)
            self.proc.wait(timeout=5)

    def __enter__(self) -> "Supervisor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_limited(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    time_limit_s: float,
    memory_limit_bytes: int | None = None,
    grace_s: float = GRACE_S,
    preload: Sequence[str] = (),
    env: dict[str, str] | None = None,
    capture_output: bool = True,
) -> Outcome:
    """``fn(*args, **kwargs)`` once in a child process, under a wall-clock and a resident-memory limit.

    ``fn`` and its arguments are pickled (cloudpickle: a lambda or a local
    function works); its return value must pickle back.  Returns an
    :class:`Outcome`; never raises for what the call does (only for bad limits,
    or when no child process can be started).
    """
    _check_limits(time_limit_s, memory_limit_bytes, grace_s)
    with Supervisor(preload, env=env, capture_output=capture_output) as sup:
        return sup.run(fn, args, kwargs, time_limit_s=time_limit_s, memory_limit_bytes=memory_limit_bytes, grace_s=grace_s)


def run_command(
    argv: Sequence[str], *, time_limit_s: float, memory_limit_bytes: int | None = None, grace_s: float = GRACE_S, env: dict[str, str] | None = None, capture_output: bool = True
) -> Outcome:
    """A command once, under the limits: ``ok`` when it exits 0, ``error`` (its last stderr line) otherwise."""
    _check_limits(time_limit_s, memory_limit_bytes, grace_s)
    with Supervisor((), env=env, capture_output=capture_output) as sup:
        return sup.run_command(argv, time_limit_s=time_limit_s, memory_limit_bytes=memory_limit_bytes, grace_s=grace_s)
