"""``--warm``: catalog pages computed at start-up through the sweep runner
(:mod:`neurarch.sweep`, each item in a supervised process), stored under the
key a visit looks up; the first visit is a cache hit and computes nothing.

all-MiniLM-L6-v2 (the smallest catalog text model): 22,713,216 parameters by
hand (tests/sweep counts them) against the published checkpoint's 22,713,728."""

from __future__ import annotations

import re
import time

import pytest
from fastapi.testclient import TestClient

from neurarch.web.app import Settings, create_app

pytestmark = pytest.mark.slow

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def test_warm_computes_before_the_first_visit(tmp_path):
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path / 'n.db'}", workers=1, warm=[MODEL], warm_catalog=False, offline=True, time_limit_s=400))
    with TestClient(app) as client:
        deadline = time.monotonic() + 600
        while True:
            warm = client.get("/api/v1/status").json()["warm"]
            if warm["finished"] or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert warm == {"done": 1, "skipped": 0, "failed": 0, "finished": True}
        service = app.state.neurarch["service"]
        assert service.computed == 0  # the pool computed nothing: the sweep did
        page = client.get(f"/models/{MODEL}", headers={"accept": "text/html"})
        assert page.status_code == 200 and page.headers["x-neurarch-cache"] == "hit"
        assert re.search(r'<b id="derived">([^<]+)</b>', page.text).group(1) == "22,713,216"
        assert re.search(r'<b id="checkpoint">([^<]+)</b>', page.text).group(1) == "22,713,728"
        twin = client.get(f"/models/{MODEL}.json")
        assert twin.headers["x-neurarch-cache"] == "hit" and twin.json()["cards"]  # the default plan: every card
        assert service.computed == 0
    # A second start on the same store finds the page there and runs no sweep.
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path / 'n.db'}", workers=1, warm=[MODEL], warm_catalog=False, offline=True))
    with TestClient(app) as client:
        deadline = time.monotonic() + 60
        while not (warm := client.get("/api/v1/status").json()["warm"])["finished"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert warm == {"done": 0, "skipped": 1, "failed": 0, "finished": True}
