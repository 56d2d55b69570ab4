"""The server against a local Hub (127.0.0.1): a Hub model's page with its
checkpoint count read from the safetensors header, 404 for a repo the Hub
does not have, 503 when the Hub fails, a pinned revision, remote code refused."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import save
from web_fixtures import hub_env

from hubserver import FakeHub

TINY_GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 100, "n_positions": 64}
# GPT2LMHeadModel, hand count (lm_head tied to wte): wte 100*32 + wpe 64*32 = 5,248;
# block: ln_1 64 + c_attn 32*96+96 = 3,168 + c_proj 32*32+32 = 1,056 + ln_2 64 + c_fc 32*128+128 = 4,224
#        + mlp c_proj 128*32+32 = 4,128 -> 12,704; ln_f 64.  Total 5,248 + 12,704 + 64 = 18,016.
TINY_GPT2_COUNT = 18_016


def _tensors() -> dict:
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(**{k: v for k, v in TINY_GPT2.items() if k not in ("model_type", "architectures")}))
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}  # tied: saved once
    return state


@pytest.fixture(scope="module")
def hub_client(tmp_path_factory):
    from fastapi.testclient import TestClient

    from neurarch.web.app import Settings, create_app

    tmp = tmp_path_factory.mktemp("hub")
    hub = FakeHub()
    tensors = _tensors()
    files = {"config.json": json.dumps(TINY_GPT2).encode(), "model.safetensors": save(tensors)}
    hub.shas = {"v1": hub.add_commit("org/tiny-gpt2", files, refs=("main", "v1"))}
    hub.add_commit("org/flaky", {"config.json": json.dumps(TINY_GPT2).encode()})
    hub.fail_get["org/flaky", "config.json"] = 500
    hub.add_commit("org/remote", {"config.json": json.dumps({**TINY_GPT2, "model_type": "my-gpt", "auto_map": {"AutoModel": "m.X"}}).encode()})
    hub.written = sum(t.numel() for t in tensors.values())
    with hub:
        app = create_app(Settings(db_url=f"sqlite:///{tmp}/n.db", workers=1, time_limit_s=120, worker_env=hub_env(hub.endpoint, tmp)))
        with TestClient(app) as client:
            client.hub = hub
            yield client


def test_hub_model_page_reads_the_checkpoint_header(hub_client):
    r = hub_client.get("/models/org/tiny-gpt2.json?plan=false")
    assert r.status_code == 200, r.text
    rep = r.json()
    assert rep["model"]["source"] == "hub"
    assert rep["params"]["derived"] == TINY_GPT2_COUNT
    assert rep["params"]["checkpoint"] == hub_client.hub.written == TINY_GPT2_COUNT + 0  # the header, not the graph
    pinned = hub_client.get(f"/models/org/tiny-gpt2.json?plan=false&revision={hub_client.hub.shas['v1']}")
    assert pinned.status_code == 200 and pinned.json()["model"]["revision"] == hub_client.hub.shas["v1"]
    # no weight bytes were downloaded: only the header ranges of the safetensors file
    gets = [q for q in hub_client.hub.requests if q.method == "GET" and q.path.endswith("model.safetensors")]
    assert gets and all(q.range for q in gets)


def test_unknown_repo_is_404_and_a_failing_hub_503(hub_client):
    r = hub_client.get("/models/org/nothing-here.json?plan=false")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = hub_client.get("/models/org/flaky.json?plan=false")
    assert r.status_code == 503 and r.json()["error"]["code"] == "hub_unreachable"
    r = hub_client.get("/models/org/remote.json?plan=false")
    assert r.status_code == 400 and r.json()["error"]["code"] == "remote_code_refused"
