"""Load on the real server: ``neurarch-trace serve`` in a subprocess on
127.0.0.1, 50 concurrent clients (asyncio + httpx, one keep-alive connection
each), bounded in requests and in time.

    python benchmarks/serve.py                    # 50 clients x 40 requests per phase, 2 workers
    python benchmarks/serve.py --clients 20 --requests 10 --workers 1

Phases, one after another:

1. cold plans: distinct tiny configs through ``POST /api/v1/plan`` (each one
   computed by a worker: trace + memory plan of one mode), a few at once;
2. a cached model page: ``GET /models/microsoft/resnet-50?modes=full`` (the
   HTML page, computed once before the phase starts), by one client (the
   latency without queueing), then by all of them;
3. the JSON API on a cached report: ``POST /api/v1/plan`` with the same body.

It prints p50/p99 latency per phase, the errors (any status but 200, apart
from documented 429s, which are counted on their own), and the resident
memory of every worker (from ``/api/v1/status``) and of the server process.
Not a test: the figures depend on the machine (docs/web.md says which).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

TINY_BERT = {"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 64}
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


async def load(base: str, clients: int, per_client: int, make_request, deadline_s: float) -> dict:
    """``clients`` concurrent clients, each sending ``per_client`` requests back to back."""
    lat: list[float] = []
    statuses: dict[int, int] = {}
    stop = time.monotonic() + deadline_s

    async def client(i: int):
        async with httpx.AsyncClient(base_url=base, timeout=120, limits=httpx.Limits(max_connections=1)) as c:
            for k in range(per_client):
                if time.monotonic() > stop:
                    return
                t0 = time.perf_counter()
                r = await make_request(c, i, k)
                await r.aread()
                lat.append((time.perf_counter() - t0) * 1000)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.perf_counter() - t0
    return {"requests": len(lat), "p50_ms": round(pct(lat, 50), 1), "p99_ms": round(pct(lat, 99), 1),
            "max_ms": round(max(lat), 1) if lat else None, "rps": round(len(lat) / wall, 1), "statuses": statuses}


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


async def run(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="neurarch-bench-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, NEURARCH_CACHE_DIR=str(tmp), HF_HUB_OFFLINE="1")
    log = open(tmp / "serve.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "neurarch.cli", "serve", "--port", str(port), "--db", f"sqlite:///{tmp}/n.db",
                               "--workers", str(args.workers), "--queue", str(args.queue)], env=env, stdout=log, stderr=subprocess.STDOUT)
    out: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
                 "clients": args.clients, "workers": args.workers}
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
        async def cold(c, i, k):
            return await c.post("/api/v1/plan", json={"config": TINY_BERT, "options": {"modes": ["full"], "batch": 1 + i * 1000 + k}})

        out["cold_plan"] = await load(base, args.cold_parallel, args.cold, cold, args.deadline)

        # 2. a cached model page: computed once, then 50 clients
        async with httpx.AsyncClient(base_url=base, timeout=1200) as c:
            t = time.perf_counter()
            r = await c.get(PAGE, headers={"accept": "text/html"})
            out["page_first_s"] = round(time.perf_counter() - t, 1)
            out["page_bytes"] = len(r.content)
            assert r.status_code == 200, r.text[:300]
            body = {"config": TINY_BERT, "options": {"modes": ["full"]}}
            assert (await c.post("/api/v1/plan", json=body)).status_code == 200

        async def page(c, i, k):
            return await c.get(PAGE, headers={"accept": "text/html"})

        out["cached_page_1_client"] = await load(base, 1, args.requests * 5, page, args.deadline)
        log.flush()
        mark = (tmp / "serve.log").stat().st_size
        out["cached_page"] = await load(base, args.clients, args.requests, page, args.deadline)
        await asyncio.sleep(0.5)
        end = (tmp / "serve.log").stat().st_size
        out["cached_page"].update(server_side(tmp / "serve.log", mark, end))

        async def api(c, i, k):
            return await c.post("/api/v1/plan", json=body)

        out["cached_api"] = await load(base, args.clients, args.requests, api, args.deadline)
        await asyncio.sleep(0.5)
        out["cached_api"].update(server_side(tmp / "serve.log", end, (tmp / "serve.log").stat().st_size))

        async with httpx.AsyncClient(base_url=base, timeout=10) as c:
            st = (await c.get("/api/v1/status")).json()
        out["worker_rss_mib"] = {pid: round(b / 2**20) for pid, b in st["worker_rss_bytes"].items()}
        out["server_rss_mib"] = round(rss_of(server.pid) / 2**20)
        out["computed"] = st["computed"]
        errors = 0
        for phase in ("cold_plan", "cached_page_1_client", "cached_page", "cached_api"):
            errors += sum(n for code, n in out[phase]["statuses"].items() if code not in (200, 429))
        out["errors"] = errors
        return out
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--requests", type=int, default=40, help="requests per client per cached phase")
    p.add_argument("--cold", type=int, default=3, help="cold plans per cold client")
    p.add_argument("--cold-parallel", type=int, default=2, help="cold clients at once")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--queue", type=int, default=16)
    p.add_argument("--deadline", type=float, default=300, help="seconds a phase may run before its clients stop")
    args = p.parse_args(argv)
    out = asyncio.run(run(args))
    print(json.dumps(out, indent=2))
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
