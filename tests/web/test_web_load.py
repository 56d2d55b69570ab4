"""Load on the real server at small scale (the full size is benchmarks/serve.py):
``neurarch-trace serve`` in a subprocess on 127.0.0.1 (1 worker, a queue of
2), 12 concurrent clients sending a fixed mix of cached pages, cold plans
(distinct configs: the one worker is saturated and the queue overflows) and
bad requests.  Bounded: 12 x 16 requests, 240 s.

Every answer must be one this kind of request may give: 200 for a cached page,
exactly its 4xx for a bad request, 200 or the documented 429 (with
Retry-After) / 504 for a cold plan; no connection error, no 5xx.  And the
server keeps answering cached pages while its worker is busy."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from test_web_crash import Server  # the real server in its own process group
from web_fixtures import TINY_BERT

pytestmark = pytest.mark.slow

BAD = [  # (method, path, json body, the status it must answer)
    ("GET", "/models/gpt2?optimizer=nope", None, 400),
    ("GET", "/models/..%2F..%2Fetc%2Fpasswd", None, 400),
    ("GET", "/models/python:os.system", None, 400),
    ("POST", "/api/v1/plan", {"model": "gpt2", "options": {"batch": "2"}}, 422),
    ("POST", "/api/v1/plan", {"config": {"model_type": "bert", "auto_map": {"AutoModel": "x.Y"}}}, 400),
    ("GET", "/badge/gpt2/nope.json", None, 400),
]


def test_mixed_load_with_a_saturated_worker(tmp_path):
    server = Server(tmp_path, f"sqlite:///{tmp_path / 'n.db'}")
    try:
        results = asyncio.run(_load(server.base))
    finally:
        server.stop()
    by_kind: dict[str, dict[int, int]] = {}
    for kind, status, _, _ in results:
        by_kind.setdefault(kind, {})
        by_kind[kind][status] = by_kind[kind].get(status, 0) + 1
    assert len(results) == 12 * 16, by_kind
    assert set(by_kind["page"]) == {200}, by_kind
    for j, (_, _, _, want) in enumerate(BAD):
        assert set(by_kind[f"bad{j}"]) == {want}, (j, by_kind)
    assert set(by_kind["cold"]) <= {200, 429, 504}, by_kind
    assert by_kind["cold"].get(200, 0) >= 1 and by_kind["cold"].get(429, 0) >= 1, by_kind  # worker saturated, queue full
    # cached pages answered while a cold plan was being computed or queued
    during = [ms for kind, _, ms, cold_inflight in results if kind == "page" and cold_inflight]
    assert len(during) >= 50, len(during)


async def _load(base: str) -> list[tuple[str, int, float, bool]]:
    async with httpx.AsyncClient(base_url=base, timeout=120) as c:
        r = await c.post("/api/v1/paste", json={"config": TINY_BERT, "options": {"plan": False}})
        page = r.json()["url"]
        first = await c.get(page, headers={"accept": "text/html"})  # computed once (or waits for the background one)
        assert first.status_code == 200, first.text[:300]
    results: list[tuple[str, int, float, bool]] = []
    cold_inflight = 0
    stop = time.monotonic() + 240

    async def client(i: int):
        nonlocal cold_inflight
        async with httpx.AsyncClient(base_url=base, timeout=180) as c:
            for k in range(16):
                if time.monotonic() > stop:
                    return
                slot = (i + k) % 8
                t0 = time.perf_counter()
                if slot == 0:
                    kind = "cold"
                    cold_inflight += 1
                    try:
                        r = await c.post("/api/v1/plan", json={"config": TINY_BERT, "options": {"plan": False, "batch": 2 + i * 100 + k}})
                    finally:
                        cold_inflight -= 1
                    if r.status_code == 429:
                        assert int(r.headers["retry-after"]) >= 1
                elif slot in (3, 6):
                    j = (i + k) // 4 % len(BAD)
                    method, path, body, _ = BAD[j]
                    kind = f"bad{j}"
                    r = await c.request(method, path, json=body, headers={"accept": "application/json"})
                    assert r.json()["error"]["message"], r.text[:300]  # the one JSON error shape
                else:
                    kind = "page"
                    busy = cold_inflight > 0
                    r = await c.get(page, headers={"accept": "text/html"})
                    results.append((kind, r.status_code, (time.perf_counter() - t0) * 1000, busy and cold_inflight > 0))
                    continue
                results.append((kind, r.status_code, (time.perf_counter() - t0) * 1000, False))

    await asyncio.gather(*(client(i) for i in range(12)))
    return results
