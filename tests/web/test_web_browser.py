"""The real server (``neurarch-trace serve`` in a subprocess, on 127.0.0.1)
driven by Debian's Chromium through Playwright: open a model page, read the
count and the chart, paste a config and follow the permalink.  Also, over a
raw socket: a 10 MB body gets 413 long before it has been sent."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from web_fixtures import TINY_BERT

RESNET_PUBLISHED = "25,610,152"  # Hub safetensors.total of microsoft/resnet-50
TINY_BERT_COUNT = "23,684"  # hand count, see test_web_routes.py
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(web_db, tmp_path_factory):
    """``neurarch-trace serve`` on a free loopback port, sharing the session's
    store (a page the in-process tests computed is served from it)."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = dict(os.environ, NEURARCH_CACHE_DIR=str(log.parent), HF_HUB_OFFLINE="1")
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "neurarch.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--db", web_db, "--workers", "1", "--request-timeout", "240"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(base + "/api/v1/status", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield {"base": base, "port": port, "log": log}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _read_reply(s: socket.socket) -> bytes:
    """Headers and body of one HTTP answer (the server closes the connection after a 413)."""
    data = b""
    while True:
        try:
            part = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not part:
            break
        data += part
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), None)
            if length is not None and len(body) >= length:
                break
    return data


def test_big_body_is_refused_without_being_read(server):
    """Content-Length says 10 MB: the answer (413) comes after 64 kB were sent."""
    with socket.create_connection(("127.0.0.1", server["port"]), timeout=10) as s:
        s.sendall(b"POST /api/v1/plan HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n")
        s.sendall(b" " * 65536)
        reply = _read_reply(s).decode()
    assert reply.startswith("HTTP/1.1 413"), reply[:200]
    body = json.loads(reply.partition("\r\n\r\n")[2])
    assert body["error"]["code"] == "too_large"


def test_chunked_big_body_is_cut_off(server):
    """No Content-Length (chunked): the server stops at the limit; the client is answered
    while most of the 10 MB is still unsent."""
    chunk = b" " * 262144
    sent = 0
    with socket.create_connection(("127.0.0.1", server["port"]), timeout=10) as s:
        s.sendall(b"POST /api/v1/plan HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        reply = b""
        while sent < 10_000_000:
            # Wait a moment for the answer after each chunk: without it a loaded machine lets the
            # client fill the loopback buffers (several MB) before the server's 413 is read.
            readable, _, _ = select.select([s], [], [], 0.05)
            if readable:
                reply = s.recv(4096)
                break
            try:
                s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        s.settimeout(10)
        reply += _read_reply(s)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert sent < 5_000_000


def test_browser_model_page_and_paste(server, chromium_path, tmp_path):
    from playwright.sync_api import sync_playwright

    base = server["base"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 412, "height": 915})  # a phone
            page.set_default_timeout(180_000)

            # A model page: the count on both sides and the charts.
            page.goto(f"{base}/models/microsoft/resnet-50?modes=full")
            assert page.locator("#derived").inner_text() == RESNET_PUBLISHED
            assert page.locator("#checkpoint").inner_text() == RESNET_PUBLISHED
            chart = page.locator("#chart-full svg")
            assert "full fine-tune: peak" in chart.get_attribute("aria-label")
            assert chart.locator("rect.seg").count() >= 3  # weights, gradients, optimizer at least
            assert chart.bounding_box()["width"] <= 412  # fits the phone's width
            bars = page.locator("#chart-batch svg rect.bar")
            assert bars.count() >= 5
            labels = page.locator("#chart-batch svg text.batch-full").all_text_contents()
            table = page.locator("#fit-table tr td:nth-child(3)").all_inner_texts()
            assert sorted(labels) == sorted(t for t in table if t != "0")
            page.screenshot(path=str(tmp_path / "model-page.png"), full_page=False)
            page.locator("#memory").scroll_into_view_if_needed()
            page.screenshot(path=str(tmp_path / "model-page-charts.png"))

            # Paste a config, follow the permalink.
            page.goto(f"{base}/paste")
            page.fill("#config", json.dumps(TINY_BERT))
            page.fill("input[name=modes]", "full")
            page.click("#submit")
            page.wait_for_url(f"{base}/p/*")
            link = page.url
            assert page.locator("#derived").inner_text() == TINY_BERT_COUNT
            assert page.locator("#chart-full svg").count() == 1
            page.screenshot(path=str(tmp_path / "permalink.png"), full_page=True)
            other = browser.new_page()
            again = other.goto(link)  # anyone can open it later: served from the store
            assert other.locator("#derived").inner_text() == TINY_BERT_COUNT
            assert again.headers["x-neurarch-cache"] == "hit"
        finally:
            browser.close()
    assert (tmp_path / "model-page.png").stat().st_size > 10_000
    shots = os.environ.get("NEURARCH_KEEP_SCREENSHOTS")
    if shots:  # for a person to look at
        import shutil

        for p in tmp_path.glob("*.png"):
            shutil.copy(p, shots)


def test_share_posts_the_config_to_the_server(server, tmp_path):
    """``--share`` with NEURARCH_SERVER: the CLI posts config + options; the permalink serves the report."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_BERT))
    env = dict(os.environ, NEURARCH_SERVER=server["base"], NO_COLOR="1")
    r = subprocess.run([sys.executable, "-m", "neurarch.cli", str(cfg), "--plan", "--modes", "full", "--batch", "2", "--share"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    url = r.stderr.strip().splitlines()[-1].removeprefix("shared: ")
    assert url.startswith(server["base"] + "/p/")
    with urllib.request.urlopen(url + ".json", timeout=300) as resp:
        rep = json.loads(resp.read())
    assert rep["params"]["derived"] == int(TINY_BERT_COUNT.replace(",", ""))
    assert rep["input"]["batch"] == 2 and list(rep["memory"]) and rep["memory"]["full"]["batch"] == 2
    # A config that needs remote code never reaches the server: one line, exit 2.
    bad = tmp_path / "remote.json"
    bad.write_text(json.dumps({**TINY_BERT, "model_type": "my-own", "auto_map": {"AutoModel": "m.X"}}))
    r = subprocess.run([sys.executable, "-m", "neurarch.cli", str(bad), "--share"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
