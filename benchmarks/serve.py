"""Load on the real server: ``neurarch-trace serve`` in a subprocess on
127.0.0.1, 50 concurrent clients (one keep-alive connection each), bounded in
requests and in time.

    python benchmarks/serve.py                    # 50 clients x 40 requests per phase, 2 workers
    python benchmarks/serve.py --clients 20 --requests 10 --workers 1
    python benchmarks/serve.py --client httpx     # the clients on httpx instead of raw sockets

Phases, one after another:

1. cold plans: distinct tiny configs through ``POST /api/v1/plan`` (each one
   computed by a worker: trace + memory plan of one mode), a few at once;
2. a cached model page: ``GET /models/microsoft/resnet-50?modes=full`` (the
   HTML page, computed once before the phase starts), by one client (the
   latency without queueing), then by all of them;
3. the JSON API on a cached report: ``POST /api/v1/plan`` with the same body;
4. mixed (issue 14): every client sends, in a fixed pattern, cached pages,
   cold plans (distinct tiny configs: the workers are saturated and the
   queue fills) and bad requests (a bad option, a path as an id, a
   ``python:`` spec as an id, a body that does not validate), each kind with the statuses it may
   answer: 200 or 429 for a cold plan (504 past the time limit), exactly its
   4xx for a bad one, 200 for a cached page.  The cached pages' latency in
   this phase is reported on its own: the server keeps answering them while
   every worker is busy.

The clients are plain asyncio sockets speaking HTTP/1.1 (``--client raw``,
the default: a few microseconds of client CPU per request, so the clients,
which share the machine with the server, take little from it), or httpx.

It prints p50/p99 latency per phase, the errors (any status the request kind
may not answer; documented 429s and 504s are counted on their own), and the
resident memory of every worker (from ``/api/v1/status``) and of the server
process.  Not a test: the figures depend on the machine (docs/web.md says which).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

TINY_BERT = {
    "model_type": "bert",
    "architectures": ["BertForMaskedLM"],
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "vocab_size": 100,
    "max_position_embeddings": 64,
}
PAGE = "/models/microsoft/resnet-50?modes=full"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(q / 100 * len(v) + 0.5)) - 1))]


def rss_of(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class RawClient:
    """One keep-alive HTTP/1.1 connection on asyncio streams (Content-Length or chunked answers)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        lines = [f"{method} {path} HTTP/1.1", f"host: {self.host}:{self.port}"]
        for k, v in (headers or {}).items():
            lines.append(f"{k}: {v}")
        if body is not None:
            lines.append(f"content-length: {len(body)}")
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        fields = {}
        for line in head.split(b"\r\n")[1:]:
            if b":" in line:
                k, v = line.split(b":", 1)
                fields[k.strip().lower()] = v.strip()
        if b"content-length" in fields:
            data = await self.reader.readexactly(int(fields[b"content-length"]))
        elif fields.get(b"transfer-encoding", b"").lower() == b"chunked":
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            data = b"".join(parts)
        else:
            data = await self.reader.read()
        if fields.get(b"connection", b"").lower() == b"close" or b"content-length" not in fields and b"transfer-encoding" not in fields:
            await self.close()
        return status, data

    async def close(self):
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
        self.reader = self.writer = None


class HttpxClient:
    def __init__(self, base: str):
        self.c = httpx.AsyncClient(base_url=base, timeout=120, limits=httpx.Limits(max_connections=1))

    async def request(self, method, path, body=None, headers=None):
        r = await self.c.request(method, path, content=body, headers=headers)
        return r.status_code, r.content

    async def close(self):
        await self.c.aclose()


def page_request(i, k):
    return "page", ("GET", PAGE, None, {"accept": "text/html"})


async def load(args, clients: int, per_client: int, make_request, deadline_s: float, allowed=None) -> dict:
    """``clients`` concurrent clients, each sending ``per_client`` requests back to back.

    ``make_request(i, k)`` gives ``(kind, (method, path, body, headers))``;
    latencies and statuses are kept per kind."""
    lat: dict[str, list[float]] = {}
    statuses: dict[str, dict[int, int]] = {}
    stop = time.monotonic() + deadline_s

    async def client(i: int):
        c = RawClient("127.0.0.1", args.port) if args.client == "raw" else HttpxClient(args.base)
        try:
            for k in range(per_client):
                if time.monotonic() > stop:
                    return
                kind, (method, path, body, headers) = make_request(i, k)
                t0 = time.perf_counter()
                try:
                    status, _ = await asyncio.wait_for(c.request(method, path, body, headers), timeout=args.request_timeout)
                except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, httpx.HTTPError):
                    status = -1  # no answer: an error whatever the kind
                    await c.close()
                lat.setdefault(kind, []).append((time.perf_counter() - t0) * 1000)
                per = statuses.setdefault(kind, {})
                per[status] = per.get(status, 0) + 1
        finally:
            await c.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.perf_counter() - t0
    out: dict = {}
    for kind, values in lat.items():
        out[kind] = {
            "requests": len(values),
            "p50_ms": round(pct(values, 50), 1),
            "p99_ms": round(pct(values, 99), 1),
            "max_ms": round(max(values), 1),
            "rps": round(len(values) / wall, 1),
            "statuses": statuses[kind],
        }
        ok = (allowed or {}).get(kind, (200,))
        out[kind]["errors"] = sum(n for code, n in statuses[kind].items() if code not in ok and code not in (429, 504))
    if len(out) == 1:
        return next(iter(out.values()))
    out["wall_s"] = round(wall, 1)
    return out


def server_side(log_path: Path, start: int, end: int) -> dict:
    """p50/p99 of the server's own time per request (its access log lines between two offsets)."""
    with open(log_path, "rb") as fh:
        fh.seek(start)
        chunk = fh.read(end - start).decode("utf-8", "replace")
    ms, caches = [], {}
    for line in chunk.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "ms" in rec and "route" in rec:
            ms.append(rec["ms"])
            caches[rec.get("cache")] = caches.get(rec.get("cache"), 0) + 1
    return {"server_p50_ms": round(pct(ms, 50), 2), "server_p99_ms": round(pct(ms, 99), 2), "cache": caches}


def _json(body: dict) -> tuple[bytes, dict]:
    return json.dumps(body).encode(), {"content-type": "application/json", "accept": "application/json"}


def cold_request(i, k, salt=0):
    """A distinct tiny config each time (another batch size): a worker computes it."""
    body, h = _json({"config": TINY_BERT, "options": {"modes": ["full"], "batch": 1 + salt + i * 1000 + k}})
    return "cold", ("POST", "/api/v1/plan", body, h)


BAD = [  # (request, the status it must answer)
    (("GET", "/models/microsoft/resnet-50?optimizer=nope", None, {"accept": "application/json"}), 400),
    (("GET", "/models/..%2F..%2Fetc%2Fpasswd", None, {"accept": "application/json"}), 400),
    (("GET", "/models/python:os.system", None, {"accept": "application/json"}), 400),
    (("POST", "/api/v1/plan", b'{"model": "gpt2", "options": {"batch": "2"}}', {"content-type": "application/json"}), 422),
]


async def run(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="neurarch-bench-"))
    args.port = port = free_port()
    args.base = base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, NEURARCH_CACHE_DIR=str(tmp), HF_HUB_OFFLINE="1")
    log = open(tmp / "serve.log", "w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "neurarch.cli",
            "serve",
            "--port",
            str(port),
            "--db",
            f"sqlite:///{tmp}/n.db",
            "--workers",
            str(args.workers),
            "--queue",
            str(args.queue),
            "--offline",
            "--request-timeout",
            str(args.plan_timeout),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out: dict = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start, Python {platform.python_version()}",
        "clients": args.clients,
        "client": args.client,
        "workers": args.workers,
    }
    out["http"] = "httptools" if _importable("httptools") else "h11"  # what uvicorn's "auto" picks
    out["loop"] = "uvloop" if _importable("uvloop") else "asyncio"
    try:
        t0 = time.monotonic()
        async with httpx.AsyncClient(base_url=base, timeout=10) as c:
            while True:
                try:
                    if (await c.get("/api/v1/status")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() - t0 > 300:
                    raise SystemExit(f"the server did not start; see {tmp / 'serve.log'}")
                await asyncio.sleep(0.5)
        out["startup_s"] = round(time.monotonic() - t0, 1)

        # 1. cold plans: distinct configs (another batch each), `cold_parallel` at once
        out["cold_plan"] = await load(args, args.cold_parallel, args.cold, cold_request, args.deadline)

        # 2. a cached model page: computed once, then 1 client, then all of them
        async with httpx.AsyncClient(base_url=base, timeout=1200) as c:
            t = time.perf_counter()
            r = await c.get(PAGE, headers={"accept": "text/html"})
            out["page_first_s"] = round(time.perf_counter() - t, 1)
            out["page_bytes"] = len(r.content)
            assert r.status_code == 200, r.text[:300]
            api_body = {"config": TINY_BERT, "options": {"modes": ["full"]}}
            assert (await c.post("/api/v1/plan", json=api_body)).status_code == 200

        out["cached_page_1_client"] = await load(args, 1, args.requests * 5, page_request, args.deadline)
        log.flush()
        mark = (tmp / "serve.log").stat().st_size
        out["cached_page"] = await load(args, args.clients, args.requests, page_request, args.deadline)
        await asyncio.sleep(0.5)
        end = (tmp / "serve.log").stat().st_size
        out["cached_page"].update(server_side(tmp / "serve.log", mark, end))

        body, h = _json(api_body)

        def api(i, k):
            return "api", ("POST", "/api/v1/plan", body, h)

        out["cached_api"] = await load(args, args.clients, args.requests, api, args.deadline)
        await asyncio.sleep(0.5)
        out["cached_api"].update(server_side(tmp / "serve.log", end, (tmp / "serve.log").stat().st_size))

        # 4. mixed: per 10 requests of a client, 7 cached pages, 2 bad requests, 1 cold plan
        def mixed(i, k):
            slot = (i + k) % 10
            if slot == 0:
                return cold_request(i, k, salt=500_000)
            if slot in (3, 7):
                j = (i + k) // 5 % len(BAD)  # slot 3 gives the even ones, slot 7 the odd ones
                return f"bad{j}", BAD[j][0]
            return page_request(i, k)

        allowed = {"page": (200,), "cold": (200,), **{f"bad{j}": (status,) for j, (_, status) in enumerate(BAD)}}
        out["mixed"] = await load(args, args.clients, args.mixed_requests, mixed, args.deadline, allowed=allowed)

        async with httpx.AsyncClient(base_url=base, timeout=10) as c:
            st = (await c.get("/api/v1/status")).json()
        out["worker_rss_mib"] = {pid: round(b / 2**20) for pid, b in st["worker_rss_bytes"].items()}
        out["server_rss_mib"] = round(rss_of(server.pid) / 2**20)
        out["computed"] = st["computed"]
        out["killed"] = st["killed"]
        errors = 0
        for phase in ("cold_plan", "cached_page_1_client", "cached_page", "cached_api"):
            errors += out[phase]["errors"]
        errors += sum(v["errors"] for v in out["mixed"].values() if isinstance(v, dict))
        out["errors"] = errors
        out["load_average_end"] = round(os.getloadavg()[0], 1)
        return out
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--requests", type=int, default=40, help="requests per client per cached phase")
    p.add_argument("--mixed-requests", type=int, default=20, help="requests per client in the mixed phase")
    p.add_argument("--cold", type=int, default=3, help="cold plans per cold client")
    p.add_argument("--cold-parallel", type=int, default=2, help="cold clients at once")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--queue", type=int, default=16)
    p.add_argument("--client", choices=("raw", "httpx"), default="raw", help="the clients' HTTP stack (default raw asyncio sockets)")
    p.add_argument("--plan-timeout", type=float, default=300, help="the server's --request-timeout")
    p.add_argument("--request-timeout", type=float, default=600, help="seconds a client waits for one answer (then it counts as an error)")
    p.add_argument("--deadline", type=float, default=300, help="seconds a phase may run before its clients stop")
    args = p.parse_args(argv)
    try:
        import uvloop  # the clients' loop too: less of the shared CPU for them

        out = uvloop.run(run(args))
    except ImportError:
        out = asyncio.run(run(args))
    print(json.dumps(out, indent=2))
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
