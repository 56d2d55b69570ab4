"""Nothing from a model repo executes through the web app: ``POST /api/v1/plan``,
``POST /api/v1/paste`` (and its permalink page) and the ``/paste`` form.

The hostile code is put where an import would find it: ``modeling_evil.py``,
``configuration_evil.py`` and ``evil.py`` sit in a folder on the workers'
``PYTHONPATH``, each writing a marker file when imported (a control below
shows that importing one really writes it).  Configs name that code every way
a config can: ``auto_map``, ``trust_remote_code: true``, and ``architectures``
entries that are module paths or Python expressions.  Whatever each request
answers (a report, or a 4xx), the marker never appears and nothing is a 5xx.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from neurarch.web.app import Settings, create_app

TINY_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": 64,
    "max_position_embeddings": 32,
}
EVIL_AUTO_MAP = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    code_dir, marker = root / "code", root / "MARKER"
    code_dir.mkdir()
    for name in ("modeling_evil.py", "configuration_evil.py", "evil.py"):
        (code_dir / name).write_text(f"open({str(marker)!r}, 'a').write({name!r})\nclass EvilForCausalLM: pass\nclass EvilConfig: pass\n")
    # Control: the code is live where the workers look (an import writes the marker).
    subprocess.run([sys.executable, "-c", "import modeling_evil"], env=dict(os.environ, PYTHONPATH=str(code_dir)), check=True, timeout=60)
    assert marker.read_text() == "modeling_evil.py"
    marker.unlink()
    return code_dir, marker


@pytest.fixture(scope="module")
def client(hostile, tmp_path_factory):
    code_dir, _ = hostile
    db = tmp_path_factory.mktemp("rc-store") / "n.db"
    app = create_app(Settings(db_url=f"sqlite:///{db}", workers=1, time_limit_s=120, offline=True, worker_env={"PYTHONPATH": str(code_dir)}))
    with TestClient(app) as c:
        yield c


def hostile_configs(marker: Path) -> dict[str, dict]:
    return {
        "auto_map": {**TINY_LLAMA, "architectures": ["EvilForCausalLM"], "auto_map": EVIL_AUTO_MAP},
        "trust_remote_code": {**TINY_LLAMA, "trust_remote_code": True, "auto_map": EVIL_AUTO_MAP},
        "trust_remote_code_only": {**TINY_LLAMA, "trust_remote_code": True},
        "module_path_arch": {**TINY_LLAMA, "architectures": ["modeling_evil.EvilForCausalLM"]},
        "import_expression_arch": {**TINY_LLAMA, "architectures": [f"__import__('evil') or open({str(marker)!r}, 'w')"]},
        "os_system_arch": {**TINY_LLAMA, "architectures": ["os.system"]},
        "unknown_type": {**TINY_LLAMA, "model_type": "evil", "architectures": ["EvilForCausalLM"], "auto_map": EVIL_AUTO_MAP},
        "native_with_leftover_auto_map": {**TINY_LLAMA, "auto_map": {"AutoModelForCausalLM": "modeling_llama.LlamaForCausalLM"}},
    }


REFUSED = {"auto_map", "trust_remote_code", "trust_remote_code_only", "unknown_type"}  # refused before any build


def test_api_plan_runs_no_repo_code(client, hostile):
    _, marker = hostile
    for name, config in hostile_configs(marker).items():
        r = client.post("/api/v1/plan", json={"config": config, "options": {"plan": False}})
        assert r.status_code < 500, (name, r.text[:300])
        if name in REFUSED:
            assert r.status_code == 400, (name, r.text[:300])
            assert r.json()["error"]["field"].startswith("config."), name
        if name == "native_with_leftover_auto_map":
            assert r.status_code == 200 and r.json()["model"]["model_class"] == "LlamaForCausalLM"
        assert not marker.exists(), name
    # trust_remote_code is not an option the API takes
    r = client.post("/api/v1/plan", json={"config": TINY_LLAMA, "options": {"trust_remote_code": True}})
    assert r.status_code == 422 and not marker.exists()


def test_api_paste_and_permalink_run_no_repo_code(client, hostile):
    _, marker = hostile
    for name, config in hostile_configs(marker).items():
        r = client.post("/api/v1/paste", json={"config": config, "options": {"plan": False}})
        if name in REFUSED:
            assert r.status_code == 400, (name, r.text[:300])
            continue
        assert r.status_code == 201, (name, r.text[:300])
        page = client.get(r.json()["json_url"])  # computes (or waits for the background computation)
        assert page.status_code < 500, (name, page.text[:300])
        assert not marker.exists(), name
    time.sleep(0.5)
    assert not marker.exists()


def test_paste_form_runs_no_repo_code(client, hostile):
    import json

    _, marker = hostile
    for name, config in hostile_configs(marker).items():
        r = client.post("/paste", data={"config": json.dumps(config), "plan": "false"}, headers={"accept": "text/html"}, follow_redirects=True)
        assert r.status_code < 500, (name, r.text[:300])
        if name in REFUSED:
            assert r.status_code == 400 and ("remote code" in r.text or "unknown model_type" in r.text), (name, r.text[:300])
        assert not marker.exists(), name
