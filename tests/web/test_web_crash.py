"""Crash safety of the store: the real server (``neurarch-trace serve``, a
subprocess in its own process group, SQLite in WAL mode) is SIGKILLed as a
whole group while clients are still writing; it is started again on the same
database, and every result it had acknowledged (HTTP 200/201 received before
the kill) must be there and intact, and the database must pass SQLite's
``PRAGMA integrity_check``.

Writes: reports computed through ``POST /api/v1/plan`` (a tiny config, trace
only), then many permalinks through ``POST /api/v1/paste`` from 8 clients at
once; the kill lands while those are in flight."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from web_fixtures import TINY_BERT

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def canonical(value) -> str:  # the permalink's documented hash input: sorted keys, no whitespace
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Server:
    def __init__(self, tmp: Path, db: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / f"serve-{self.port}.log", "w")
        env = dict(os.environ, NEURARCH_CACHE_DIR=str(tmp / "cache"), HF_HUB_OFFLINE="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "neurarch.cli", "serve", "--port", str(self.port), "--db", db, "--workers", "1", "--queue", "2", "--offline", "--request-timeout", "120"],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # its own process group
        deadline = time.monotonic() + 240
        while True:
            try:
                if httpx.get(f"{self.base}/api/v1/status", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert self.proc.poll() is None, (tmp / f"serve-{self.port}.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the server did not start in 240 s"
            time.sleep(0.3)

    def kill_group(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if not self.log.closed:
            self.log.close()


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped by init is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def test_sigkill_during_writes_loses_nothing_acknowledged(tmp_path):
    dbfile = tmp_path / "store.db"
    db = f"sqlite:///{dbfile}"
    server = Server(tmp_path, db)
    plans: dict[str, bytes] = {}  # permalink id -> the report JSON received
    pastes: dict[str, dict] = {}  # permalink id -> the config sent
    try:
        workers = list(httpx.get(f"{server.base}/api/v1/status").json()["worker_rss_bytes"])
        # 1. two reports computed and acknowledged
        for batch in (1, 2):
            r = httpx.post(f"{server.base}/api/v1/plan", timeout=180, json={"config": TINY_BERT, "options": {"plan": False, "batch": batch}})
            assert r.status_code == 200, r.text[:300]
            pid = r.headers["link"].split("</p/")[1].split(">")[0]
            plans[pid] = r.content

        # 2. permalinks from 8 clients; the kill comes once 120 are acknowledged, with writes still in flight
        lock = threading.Lock()
        stop = threading.Event()
        sent = [0]

        def client(c: int):
            with httpx.Client(base_url=server.base, timeout=30) as h:
                for k in range(400):
                    if stop.is_set():
                        return
                    config = dict(TINY_BERT, vocab_size=1000 + c * 1000 + k)
                    with lock:
                        sent[0] += 1
                    try:
                        r = h.post("/api/v1/paste", json={"config": config, "options": {"plan": False}})
                    except httpx.TransportError:
                        return  # the server is gone
                    if r.status_code == 201:
                        with lock:
                            pastes[r.json()["id"]] = config
                    else:
                        assert r.status_code in (429, 503), r.text[:300]

        threads = [threading.Thread(target=client, args=(c,)) for c in range(8)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while len(pastes) < 120 and time.monotonic() < deadline and any(t.is_alive() for t in threads):
            time.sleep(0.01)
        server.kill_group()  # SIGKILL to the server's whole process group, mid-writes
        stop.set()
        for t in threads:
            t.join(timeout=60)
        acknowledged = dict(pastes)
        assert len(acknowledged) >= 120, len(acknowledged)
        assert sent[0] > len(acknowledged)  # requests were in flight at the kill
        # the workers (their own process groups) die with the server: the kernel kills them (PR_SET_PDEATHSIG)
        until = time.monotonic() + 30
        while any(alive(int(p)) for p in workers) and time.monotonic() < until:
            time.sleep(0.2)
        assert not any(alive(int(p)) for p in workers), workers
    finally:
        server.stop()

    # 3. the database after the kill, as the next start finds it
    with sqlite3.connect(dbfile) as con:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = {pid: (cfg, opts) for pid, cfg, opts in con.execute("SELECT id, config_json, options_json FROM permalinks")}
        for pid, config in acknowledged.items():
            assert pid in rows, f"acknowledged permalink {pid} lost"
            cfg, opts = rows[pid]
            assert json.loads(cfg) == config
            assert hashlib.sha256(canonical({"config": json.loads(cfg), "options": json.loads(opts)}).encode()).hexdigest() == pid
        stored = [r[0] for r in con.execute("SELECT report_json FROM reports")]
        for body in plans.values():
            assert body.decode() in stored  # byte-equal to the answer received

    # 4. restarted on the same database: the acknowledged results are served from the store
    again = Server(tmp_path, db)
    try:
        with httpx.Client(base_url=again.base, timeout=60) as h:
            for batch, (pid, body) in zip((1, 2), plans.items()):
                r = h.post("/api/v1/plan", json={"config": TINY_BERT, "options": {"plan": False, "batch": batch}})
                assert r.status_code == 200 and r.headers["x-neurarch-cache"] == "hit"
                assert r.content == body
                assert h.get(f"/p/{pid}.json").content == body + b"\n"  # the .json twin ends its text with a newline
            assert h.get("/api/v1/status").json()["computed"] == 0  # nothing recomputed
            for pid in list(acknowledged)[:5]:
                r = h.post("/api/v1/paste", json={"config": acknowledged[pid], "options": {"plan": False}})
                assert r.status_code == 201 and r.json()["id"] == pid  # the same link: the stored row
    finally:
        again.stop()
    with sqlite3.connect(dbfile) as con:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
