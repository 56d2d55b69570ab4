"""neurarch.supervise: limits enforced from outside the child, checked against what the child really did."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sweep_jobs as jobs

from neurarch.supervise import Supervisor, run_command, run_limited, tree_rss

MB = 1 << 20


def _live(part: str) -> dict[int, bytes]:
    """``{pid: /proc/PID/<part>}`` of every live process (zombies left out)."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            text = Path(f"/proc/{pid}/{part}").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found[int(pid)] = text
    return found


def _running(pattern: str) -> list[str]:
    """Command lines of live processes that contain ``pattern``."""
    cmds = (raw.replace(b"\0", b" ").decode() for raw in _live("cmdline").values())
    return [cmd for cmd in cmds if pattern in cmd]


def _gone(pid: int, within_s: float) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def test_value_comes_back_from_another_process():
    out = run_limited(jobs.answer, ("x",), time_limit_s=20)
    assert out.ok and out.error == ""
    assert out.value["item"] == "x" and out.value["pid"] != os.getpid()
    assert out.exit_code == 0


def test_a_lambda_travels_by_value():
    out = run_limited(lambda a, b: a * b, (6, 7), time_limit_s=20)
    assert out.ok and out.value == 42  # 6 * 7


def test_sleeping_forever_stops_at_the_limit_and_keeps_its_progress():
    t0 = time.monotonic()
    out = run_limited(jobs.sleeps_forever, time_limit_s=1.5, grace_s=5)
    wall = time.monotonic() - t0
    assert out.status == "timeout", out
    assert out.error == "Timeout: over the time limit of 1.5 s"
    assert out.progress == {"stage": "about to sleep"}
    # time.sleep is interruptible: it stops at the limit, well before the 5 s grace runs out
    assert 1.5 <= out.seconds < 3.0 and wall < 10


def test_a_limit_caught_by_the_function_gives_its_partial_answer():
    out = run_limited(jobs.catches_its_limit, time_limit_s=1.0, grace_s=5)
    assert out.ok and out.value["partial"] and out.value["steps"] > 0
    assert "1 s" in out.value["why"]


def test_blocked_in_c_is_killed_from_outside_with_its_children(tmp_path):
    marker = tmp_path / "pid"
    out = run_limited(jobs.blocks_in_c, (str(marker),), time_limit_s=1.0, grace_s=1.0)
    assert out.status == "hang", out
    assert out.exit_code == -signal.SIGKILL
    assert out.progress == {"stage": "in system()"}
    # killed at limit + grace (2 s), not after the 100 s the C call would take
    assert 2.0 <= out.seconds < 4.0
    assert _gone(int(marker.read_text()), 3)
    assert _running("sleep 97.5") == []  # the shell's child went with the group


def test_memory_over_the_limit_is_killed():
    limit = 300 * MB
    out = run_limited(jobs.grows, (20, 4000), time_limit_s=30, memory_limit_bytes=limit)
    assert out.status == "memory", out
    assert out.error.startswith("MemoryLimit: ") and "over the limit of 0.293 GiB" in out.error  # 300 / 1024
    assert out.exit_code == -signal.SIGKILL
    # seen over the limit, and caught within a few 20 MB steps of it (polled every 0.1 s)
    assert limit < out.peak_rss_bytes < limit + 200 * MB
    assert out.seconds < 20


def test_memory_of_a_descendant_in_another_session_counts():
    out = run_limited(jobs.grows_in_a_new_session, (20,), time_limit_s=30, memory_limit_bytes=250 * MB)
    assert out.status == "memory", out
    assert out.peak_rss_bytes > 250 * MB
    assert _running("time.sleep(100)") == []


def test_an_exception_is_one_line():
    out = run_limited(jobs.raises, time_limit_s=20)
    assert out.status == "error" and out.error == "ValueError: first line second line"
    assert out.error_message == "first line second line"
    assert out.error_types == ["ValueError", "Exception", "BaseException"]  # ValueError.__mro__ without object


def test_crashes_give_the_exit_code_or_the_signal():
    out = run_limited(jobs.exits_hard, (9,), time_limit_s=20)
    assert out.status == "crash" and out.exit_code == 9
    assert "exited with code 9" in out.error
    out = run_limited(jobs.segfaults, time_limit_s=20)
    assert out.status == "crash" and out.exit_code == -signal.SIGSEGV
    assert "SIGSEGV" in out.error


def test_commands():
    out = run_command([sys.executable, "-c", "print('hi')"], time_limit_s=20)
    assert out.ok and out.value == "hi\n"
    out = run_command([sys.executable, "-c", "import sys; sys.exit('no such model')"], time_limit_s=20)
    assert out.status == "error" and out.exit_code == 1 and out.error == "no such model"
    out = run_command(["no-such-program-here"], time_limit_s=20)
    assert out.status == "error" and out.error.startswith("FileNotFoundError: ")
    out = run_command(["sleep", "96.5"], time_limit_s=1.0)
    assert out.status == "timeout" and 1.0 <= out.seconds < 3.0
    assert _running("sleep 96.5") == []


def test_one_supervisor_forks_each_call_warm():
    with Supervisor(preload=("decimal",)) as sup:
        first = sup.run(jobs.answer, (1,), time_limit_s=20)
        second = sup.run(jobs.answer, (2,), time_limit_s=20)
        warm = sup.run(jobs.preloaded, ("decimal",), time_limit_s=20)
        assert first.value["pid"] != second.value["pid"]  # a fresh process per call
        assert warm.value is True  # imported by the supervisor before the fork
        killed = sup.run(jobs.grows, (20, 4000), time_limit_s=30, memory_limit_bytes=200 * MB)
        assert killed.status == "memory"
        after = sup.run(jobs.answer, (3,), time_limit_s=20)  # the supervisor survives its item's kill
        assert after.ok
    assert not sup.alive()


def test_the_item_dies_with_its_caller(tmp_path):
    pidfile = tmp_path / "pid"
    code = "import sys; sys.path.insert(0, %r)\nimport sweep_jobs\nfrom neurarch.supervise import run_limited\nrun_limited(sweep_jobs.writes_pid_then_sleeps, (%r,), time_limit_s=100)\n" % (
        str(Path(jobs.__file__).parent),
        str(pidfile),
    )
    caller = subprocess.Popen([sys.executable, "-c", code])
    try:
        end = time.monotonic() + 30
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < end and caller.poll() is None, "the item never started"
            time.sleep(0.1)
        item = int(pidfile.read_text())
        assert tree_rss(item) > 0
        caller.kill()  # SIGKILL: the caller has no chance to clean up
        caller.wait()
        assert _gone(item, 5), "the item outlived its caller"
    finally:
        if caller.poll() is None:
            caller.kill()


@pytest.mark.parametrize("kwargs", [dict(time_limit_s=0), dict(time_limit_s=-1), dict(time_limit_s=1, memory_limit_bytes=0), dict(time_limit_s=1, grace_s=-1)])
def test_bad_limits_are_refused(kwargs):
    with pytest.raises(ValueError):
        run_limited(jobs.answer, (1,), **kwargs)


def test_deadline_interrupts_a_stage_and_nests():
    import threading

    from neurarch.supervise import TimeLimit, deadline

    t0 = time.monotonic()
    with pytest.raises(TimeLimit, match="over 0.5 s"):
        with deadline(3):
            with deadline(0.5):
                time.sleep(5)
    assert 0.5 <= time.monotonic() - t0 < 2.0
    with deadline(0.2):
        pass
    time.sleep(0.4)  # the timer was cancelled: nothing is raised later
    errors = []
    t = threading.Thread(target=lambda: errors.append(pytest.raises(RuntimeError, deadline(1).__enter__)))
    t.start()
    t.join()
    assert errors


def test_uncaptured_output_reaches_the_callers_stdout(tmp_path):
    # the caller's stdout is a file here: what the item prints must land in it, not in the protocol pipe
    code = (
        "import sys; sys.path.insert(0, %r)\nimport sweep_jobs\nfrom neurarch.supervise import run_limited\n"
        "out = run_limited(sweep_jobs.prints, ('from the item',), time_limit_s=20, capture_output=False)\n"
        "print('caller saw', out.status, out.value)\n" % str(Path(jobs.__file__).parent)
    )
    with open(tmp_path / "stdout", "w") as fh:
        proc = subprocess.run([sys.executable, "-c", code], stdout=fh, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "stdout").read_text().splitlines() == ["from the item", "caller saw ok 13"]
    assert "to stderr" in proc.stderr


def test_a_supervisor_not_waited_for_serves_its_first_call(tmp_path):
    with Supervisor(preload=("decimal",), wait=False) as sup:
        warm = sup.run(jobs.preloaded, ("decimal",), time_limit_s=20)
        frozen = sup.run(lambda: __import__("gc").get_freeze_count(), time_limit_s=20)
    assert warm.ok and warm.value is True  # imported before the fork, as when waited for
    assert frozen.ok and frozen.value > 0  # the preload's objects frozen out of the item's collections


def test_a_supervisor_not_waited_for_is_killed_at_once_while_it_imports(tmp_path, monkeypatch):
    (tmp_path / "slow_preload.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    t0 = time.monotonic()
    sup = Supervisor(preload=("slow_preload",), wait=False)
    started = time.monotonic() - t0
    t1 = time.monotonic()
    sup.close()
    closed = time.monotonic() - t1
    assert started < 5 and closed < 5, (started, closed)  # neither waits for the 60 s import
    assert _gone(sup.proc.pid, 5)


def test_a_failed_preload_not_waited_for_is_the_first_calls_error(tmp_path):
    sup = Supervisor(preload=("no_such_module_here",), wait=False)
    try:
        with pytest.raises(RuntimeError, match="no_such_module_here"):
            sup.run(jobs.answer, (1,), time_limit_s=20)
    finally:
        sup.close()


def _with_marker(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker``."""
    return [pid for pid, env in _live("environ").items() if marker.encode() in env]


def test_the_commands_early_supervisor_is_gone_with_a_bad_option(tmp_path):
    """The console command starts its supervisor before it checks the options; a bad one
    answers in one line and leaves no supervisor behind, not even one still importing."""
    marker = f"NEURARCH_TEST_MARKER_{os.getpid()}_{time.monotonic_ns()}"
    env = dict(os.environ, NEURARCH_TEST_MARKER=marker, NEURARCH_CACHE_DIR=str(tmp_path))
    env.pop("NEURARCH_SUPERVISE", None)
    err = tmp_path / "stderr"
    with err.open("w") as fh:  # a file, not a pipe: run() returns when the command exits, not when every holder of the pipe has
        out = subprocess.run([sys.executable, "-m", "neurarch.cli", "gpt2", "--memory-limit", "lots"], stdout=subprocess.DEVNULL, stderr=fh, env=env, timeout=120)
    left = _with_marker(f"NEURARCH_TEST_MARKER={marker}")
    text = err.read_text()
    assert out.returncode == 2 and text.strip().count("\n") == 0, text
    assert left == []
