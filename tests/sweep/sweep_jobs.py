"""Jobs for the sweep and supervise tests: each one is named after the way it misbehaves."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from neurarch.supervise import TimeLimit, progress


def answer(x):
    """Returns at once: the item, the process it ran in."""
    return {"item": x, "pid": os.getpid()}


def logged(x, log: str):
    """Appends the item to ``log`` (so a test can count the runs), then answers."""
    with open(log, "a") as fh:
        fh.write(f"{x}\n")
    return {"item": x}


def sleeps_forever(x=None):
    progress({"stage": "about to sleep"})
    while True:
        time.sleep(60)


def blocks_in_c(marker: str):
    """Blocks in C: ``system()`` waits on a shell child and does not return to Python for 100 s."""
    progress({"stage": "in system()"})
    Path(marker).write_text(str(os.getpid()))
    os.system("sleep 97.5")  # a distinctive argument, to find the process afterwards
    return "returned"


def grows(chunk_mb: int = 20, upto_mb: int = 4000):
    """Allocates and touches memory in a loop (bytearray zero-fills: every page is resident)."""
    keep = []
    for _ in range(upto_mb // chunk_mb):
        keep.append(bytearray(chunk_mb << 20))
        time.sleep(0.01)
    return len(keep)


def grows_in_a_new_session(chunk_mb: int = 20):
    """The allocation happens in a grandchild that leaves the process group (setsid)."""
    code = "import time\nkeep=[]\nfor _ in range(200):\n    keep.append(bytearray(%d << 20)); time.sleep(0.01)\ntime.sleep(100)\n" % chunk_mb
    return subprocess.run([sys.executable, "-c", code], start_new_session=True).returncode


def raises(x=None):
    raise ValueError("first line\nsecond line")


def exits_hard(code: int = 9):
    os._exit(code)


def segfaults():
    import signal

    os.kill(os.getpid(), signal.SIGSEGV)


def catches_its_limit():
    """Catches TimeLimit and answers with what it had."""
    done = 0
    try:
        while True:
            time.sleep(0.05)
            done += 1
    except TimeLimit as e:
        return {"partial": True, "steps": done, "why": str(e)}


def preloaded(name: str):
    import sys

    return name in sys.modules


def writes_pid_then_sleeps(path: str):
    Path(path).write_text(str(os.getpid()))
    while True:
        time.sleep(60)


def fails_until(x, flag: str):
    """Fails for "y" until the file ``flag`` exists."""
    if x == "y" and not os.path.exists(flag):
        raise RuntimeError("not yet")
    return x


def forks_a_pool(n: int = 4):
    """Starts its own process pool, as the planner does (multiprocessing refuses in a daemonic process)."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(2) as pool:
        return pool.map(abs, range(-n, 0))


def prints(text: str):
    print(text, flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    return len(text)
