"""Every route of the web app in-process (FastAPI's test client over the real
app: routes, worker pool, store), asserting real content against independent
figures: the published checkpoint count of microsoft/resnet-50, the CLI's own
output for the same options, and a hand count of a tiny BERT."""

from __future__ import annotations

import dataclasses
import html
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from web_fixtures import TINY_BERT, no_seconds

RESNET = "microsoft/resnet-50"
RESNET_PUBLISHED = 25_610_152  # Hub safetensors.total (shared/catalog/CHECKPOINT_COUNTS.tsv)
REPO = Path(__file__).resolve().parents[2]

# Hand count of TINY_BERT as BertForMaskedLM (h=32, L=2, i=64, vocab=100, positions=64, 2 token types):
#   embeddings: 100*32 + 64*32 + 2*32 + LayerNorm 2*32            = 3200 + 2048 + 64 + 64 = 5,376
#   per layer:  q,k,v,o 4*(32*32+32) = 4,224; LayerNorm 64;
#               intermediate 32*64+64 = 2,112; output 64*32+32 = 2,080; LayerNorm 64  -> 8,544; x2 = 17,088
#   MLM head:   transform 32*32+32 = 1,056; LayerNorm 64; decoder bias 100 (weight tied to the embeddings) = 1,220
#   total 5,376 + 17,088 + 1,220 = 23,684 (position_ids / token_type_ids are non-persistent buffers)
TINY_BERT_COUNT = 23_684

# The shields.io endpoint schema (https://shields.io/badges/endpoint-badge): unknown keys are rejected.
SHIELDS_SCHEMA = {
    "type": "object",
    "required": ["schemaVersion", "label", "message"],
    "additionalProperties": False,
    "properties": {
        "schemaVersion": {"const": 1},
        "label": {"type": "string"},
        "message": {"type": "string", "minLength": 1},
        "color": {"type": "string"},
        "labelColor": {"type": "string"},
        "isError": {"type": "boolean"},
        "cacheSeconds": {"type": "integer", "minimum": 0},
        "style": {"enum": ["plastic", "flat", "flat-square", "for-the-badge", "social"]},
    },
}

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "additionalProperties": False,
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "field"],
            "additionalProperties": False,
            "properties": {"code": {"type": "string"}, "message": {"type": "string", "minLength": 1}, "field": {"type": ["string", "null"]}},
        }
    },
}


def error_of(resp, status: int) -> dict:
    assert resp.status_code == status, resp.text[:500]
    body = resp.json()
    jsonschema.validate(body, ERROR_SCHEMA)
    return body["error"]


def cli_error(argv: list[str], capsys) -> str:
    """The message the CLI prints for the same input (after 'neurarch-trace: error: ')."""
    from neurarch.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("neurarch-trace: error: "), err
    return err[len("neurarch-trace: error: ") :]


@pytest.fixture(scope="module")
def resnet(web_client, tmp_path_factory):
    """The resnet-50 page (full fine-tuning) from the server, and the CLI's JSON
    for the same options, computed side by side (two processes)."""
    out = tmp_path_factory.mktemp("cli") / "resnet.json"
    env = dict(os.environ, NO_COLOR="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "neurarch.cli", RESNET, "--plan", "--modes", "full", "--format", "json", "-o", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        page = web_client.get(f"/models/{RESNET}?modes=full", headers={"accept": "text/html"})
        twin = web_client.get(f"/models/{RESNET}.json?modes=full")
        _, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    return {"page": page, "twin": twin, "cli": json.loads(out.read_text())}


def _counts(page_html: str) -> tuple[str, str]:
    derived = re.search(r'<b id="derived">([^<]+)</b>', page_html).group(1)
    checkpoint = re.search(r'<b id="checkpoint">([^<]+)</b>', page_html).group(1)
    return derived, checkpoint


def test_resnet_page_shows_the_published_count_on_both_sides(resnet):
    page = resnet["page"]
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert _counts(page.text) == (f"{RESNET_PUBLISHED:,}", f"{RESNET_PUBLISHED:,}")
    assert '<b id="delta">+0 (0 %)</b>' in page.text


def test_resnet_page_shows_the_cli_largest_batches(resnet):
    table = re.search(r'<table id="fit-table">(.*?)</table>', resnet["page"].text, re.S).group(1)
    rows = re.findall(r"<tr><td>([^<]+)</td><td class=\"num\">[^<]*</td><td class=\"num\">([\d,]+)</td></tr>", table)
    page = {name: int(b.replace(",", "")) for name, b in rows}
    cli = {c["name"]: c["max_batch"]["full"] for c in resnet["cli"]["cards"]}
    assert page == cli and len(cli) >= 5
    # The batch chart draws the same numbers, one bar per card that fits.
    chart = re.search(r'<figure id="chart-batch">(.*?)</figure>', resnet["page"].text, re.S).group(1)
    labels = [int(x.replace(",", "")) for x in re.findall(r'class="batch batch-full"[^>]*>([\d,]+)<', chart)]
    assert sorted(labels) == sorted(b for b in cli.values() if b > 0)
    assert chart.count('class="bar bar-full"') == sum(1 for b in cli.values() if b > 0)


def test_resnet_page_summary_and_memory_chart(resnet):
    text = resnet["page"].text
    cli = resnet["cli"]
    smallest = min((c for c in cli["cards"] if c["max_batch"]["full"] >= 1), key=lambda c: c["memory_bytes"])
    summary = html.unescape(re.search(r'<p class="summary" id="summary">([^<]+)</p>', text).group(1))
    peak = cli["memory"]["full"]["peak_bytes"] / 2**30
    assert summary.startswith(f"Fine-tuning resnet-50 at batch 1 takes about {peak:,.2f} GiB for a full fine-tune (fits one {smallest['name']}")
    chart = re.search(r'<figure id="chart-full">(.*?)</figure>', text, re.S).group(1)
    assert chart.startswith("<svg") and 'role="img"' in chart
    bd = cli["memory"]["full"]["breakdown"]
    for role in ("weights", "gradients", "optimizer", "activations", "temporary", "overhead"):
        assert f"{role} {bd[role] / 2**30:,.2f} GiB" in chart  # the figures as text, from the CLI's numbers
    assert "neurarch-trace microsoft/resnet-50 --plan --modes full" in text  # "do this to your own model"


def test_json_twin_equals_the_cli_json(resnet, web_client):
    twin = resnet["twin"]
    assert twin.status_code == 200 and twin.headers["content-type"].startswith("application/json")
    assert twin.headers["x-neurarch-cache"] == "hit"  # the page computed it
    assert no_seconds(twin.json()) == no_seconds(resnet["cli"])
    same = web_client.get(f"/models/{RESNET}?modes=full&format=json")
    assert same.json() == twin.json()


def test_markdown_twin(resnet, web_client):
    md = web_client.get(f"/models/{RESNET}.md?modes=full")
    assert md.status_code == 200 and md.headers["content-type"].startswith("text/markdown")
    assert md.text.startswith(f"# {RESNET}") and f"{RESNET_PUBLISHED:,}" in md.text
    assert web_client.get(f"/models/{RESNET}?modes=full&format=md").text == md.text


def test_a_cached_page_recomputes_nothing(resnet, web_client, caplog):
    service = web_client.app_state["service"]
    before = service.computed
    with caplog.at_level(logging.INFO, logger="neurarch.web.access"):
        again = web_client.get(f"/models/{RESNET}?modes=full", headers={"accept": "text/html"})
    assert again.status_code == 200 and again.headers["x-neurarch-cache"] == "hit"
    assert service.computed == before
    # one structured line per request: route, status, ms, cache
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "neurarch.web.access"]
    assert len(lines) == 1
    assert lines[0]["route"] == "/models/{model_id:path}" and lines[0]["status"] == 200 and lines[0]["cache"] == "hit"
    assert isinstance(lines[0]["ms"], float)


def test_badges_validate_against_the_shields_schema(resnet, web_client):
    cli = resnet["cli"]
    seen = {}
    for kind in ("params", "fits", "verifier"):
        r = web_client.get(f"/badge/{RESNET}/{kind}.json?modes=full")
        assert r.status_code == 200
        jsonschema.validate(r.json(), SHIELDS_SCHEMA)
        seen[kind] = r.json()
    assert seen["params"]["message"] == f"{RESNET_PUBLISHED:,} (= checkpoint)"
    smallest = min((c for c in cli["cards"] if c["max_batch"]["full"] >= 1), key=lambda c: c["memory_bytes"])
    assert seen["fits"]["message"] == f"{smallest['name']} (batch {smallest['max_batch']['full']:,})"
    counts = cli["verifier"]["counts"]
    assert seen["verifier"]["message"] == f"{counts['error']} error, {counts['warn']} warn"
    # A model the server cannot find is still a valid badge (isError), not a broken image.
    r = web_client.get("/badge/nobody/nothing-here/params.json")
    jsonschema.validate(r.json(), SHIELDS_SCHEMA)
    assert r.json()["isError"] is True
    error_of(web_client.get(f"/badge/{RESNET}/nope.json"), 400)


def test_every_plan_option_is_a_query_parameter(web_client):
    """The query parameters come from the options dataclasses: a field added there appears here."""
    from neurarch.inputs import InputOptions
    from neurarch.pipeline import CostOptions, Options, PlanOptions

    expected = {f.name for cls in (InputOptions, PlanOptions, CostOptions) for f in dataclasses.fields(cls)}
    expected |= {f.name for f in dataclasses.fields(Options)} - {"inputs", "cost", "plan", "revision", "trust_remote_code", "offline", "timeout_s", "cache"}
    expected |= {"plan", "cost", "revision", "format"}
    spec = web_client.get("/openapi.json").json()
    params = {p["name"] for p in spec["paths"]["/models/{model_id}"]["get"]["parameters"] if p["in"] == "query"}
    assert params == expected
    body = spec["components"]["schemas"]["PlanOptions"]
    assert set(body["properties"]) == expected - {"revision", "format"}
    assert body.get("additionalProperties") is False


def test_bad_options_get_the_cli_message(web_client, capsys):
    for query, argv, field in (
        ("optimizer=nope", ["--plan", "--optimizer", "nope"], "optimizer"),
        ("modes=full,warp", ["--plan", "--modes", "full,warp"], "modes"),
        ("lora_rank=0", ["--plan", "--lora-rank", "0"], "lora_rank"),
        ("precision=fp8", ["--plan", "--precision", "fp8"], "precision"),
        ("disable=no-such-rule", ["--disable", "no-such-rule"], "disable"),
    ):
        e = error_of(web_client.get(f"/models/{RESNET}?{query}"), 400)
        assert e["message"] == cli_error([RESNET, *argv], capsys), query
        assert e["field"] == field, query
    e = error_of(web_client.get(f"/models/{RESNET}?modez=full"), 400)
    assert "unknown option 'modez'" in e["message"]
    e = error_of(web_client.get(f"/models/{RESNET}?batch=many"), 422)
    assert e["field"] == "batch"


def test_bad_ids_are_refused_and_never_paths(web_client):
    for raw in ("..%2F..%2Fetc%2Fpasswd", "%2e%2e/secrets", "a/%2e%2e", "%2Fetc%2Fpasswd", "~root", "a%00b", "a%5Cb", "python:tests%2Fmodels%2Ftied_mlp.py:Factory", "x/y/z", "a%252e%252e"):
        for url in (f"/models/{raw}", f"/models/{raw}.json", f"/badge/{raw}/params.json"):
            e = error_of(web_client.get(url), 400)
            assert e["code"] == "bad_id", (url, e)
    e = error_of(web_client.post("/api/v1/plan", json={"model": "../../etc/passwd"}), 400)
    assert e["code"] == "bad_id" and e["field"] == "id"
    # "tests/models" is a folder beside the server; the server looks it up as a Hub id (offline here), never as a path.
    assert (REPO / "tests" / "models").is_dir()
    e = error_of(web_client.get("/models/tests/models.json?plan=false"), 503)
    assert "tests/models" in e["message"] and "hub" in e["message"] and "local file" not in e["message"]


def test_body_over_the_limit_is_413(web_client):
    e = error_of(web_client.post("/api/v1/plan", content=b"{" + b" " * 10_000_000 + b"}", headers={"content-type": "application/json"}), 413)
    assert "1,000,000" in e["message"]


def test_api_plan_of_a_config(web_client):
    r = web_client.post("/api/v1/plan", json={"config": TINY_BERT, "options": {"modes": ["full"], "batch": 2}})
    assert r.status_code == 200, r.text
    rep = r.json()
    assert rep["params"]["derived"] == TINY_BERT_COUNT
    assert rep["input"]["batch"] == 2 and rep["memory"]["full"]["batch"] == 2
    assert rep["model"]["id"].startswith("paste:")
    pid = re.search(r"</p/([0-9a-f]{64})>", r.headers["link"]).group(1)
    assert web_client.get(f"/p/{pid}.json").json() == rep


def test_api_plan_refuses_bad_bodies(web_client):
    e = error_of(web_client.post("/api/v1/plan", json={"model": RESNET, "config": TINY_BERT}), 422)
    assert e["field"] == "model"
    e = error_of(web_client.post("/api/v1/plan", json={"model": RESNET, "colour": "red"}), 422)
    assert e["field"] == "colour"
    e = error_of(web_client.post("/api/v1/plan", json={"model": RESNET, "options": {"batch": "2"}}), 422)  # strict: no coercion
    assert e["field"] == "options.batch"
    # Remote code: the request cannot ask for it, and a config that needs it is refused.
    e = error_of(web_client.post("/api/v1/plan", json={"model": RESNET, "options": {"trust_remote_code": True}}), 422)
    assert e["field"] == "options.trust_remote_code"
    foreign = {**TINY_BERT, "model_type": "my-own-bert", "auto_map": {"AutoModel": "modeling_x.MyBert"}}
    e = error_of(web_client.post("/api/v1/plan", json={"config": foreign}), 400)
    assert e["code"] == "remote_code_refused" and e["field"] == "config.auto_map"
    e = error_of(web_client.post("/api/v1/plan", content=b"{not json", headers={"content-type": "application/json"}), 422)


def test_native_config_with_leftover_auto_map_builds_natively(web_client):
    cfg = {**TINY_BERT, "auto_map": {"AutoModelForMaskedLM": "modeling_bert.BertForMaskedLM"}}
    r = web_client.post("/api/v1/plan", json={"config": cfg, "options": {"plan": False}})
    assert r.status_code == 200, r.text
    assert r.json()["params"]["derived"] == TINY_BERT_COUNT
    assert any("auto_map" in n for n in r.json()["model"]["notes"])


def test_paste_form_and_permalink(web_client):
    form = {"config": json.dumps(TINY_BERT), "modes": "full", "batch": "1"}
    r = web_client.post("/paste", data=form, follow_redirects=False)
    assert r.status_code == 303
    url = r.headers["location"]
    pid = re.fullmatch(r"/p/([0-9a-f]{64})", url).group(1)
    page = web_client.get(url, headers={"accept": "text/html"})
    assert page.status_code == 200
    assert _counts(page.text)[0] == f"{TINY_BERT_COUNT:,}"
    assert '<figure id="chart-full">' in page.text
    # A content hash: the same config with its keys in another order is the same link; other options are another.
    reordered = json.dumps(dict(reversed(list(TINY_BERT.items()))))
    assert web_client.post("/paste", data={**form, "config": reordered}, follow_redirects=False).headers["location"] == url
    assert web_client.post("/paste", data={**form, "batch": "2"}, follow_redirects=False).headers["location"] != url
    # Upload instead of paste
    up = web_client.post("/paste", data={"modes": "full", "batch": "1"}, files={"file": ("config.json", json.dumps(TINY_BERT), "application/json")}, follow_redirects=False)
    assert up.headers["location"] == url
    # Bad pastes stay on the form with the message
    bad = web_client.post("/paste", data={"config": "[1, 2]"})
    assert bad.status_code == 400 and "must hold a JSON object" in bad.text
    bad = web_client.post("/paste", data={"config": '{"model_type": "bert",'})
    assert bad.status_code == 400 and "malformed JSON" in bad.text
    assert web_client.get("/p/" + "0" * 64).status_code == 404
    assert pid != "0" * 64


def test_script_in_a_config_renders_escaped_everywhere(web_client):
    evil = "<script>alert(1)</script>"
    cfg = {**TINY_BERT, "_name_or_path": evil, "id2label": {"0": evil, "1": "ok"}, "label2id": {evil: 0, "ok": 1}}
    r = web_client.post("/paste", data={"config": json.dumps(cfg), "plan": "false"}, follow_redirects=False)
    url = r.headers["location"]
    page = web_client.get(url, headers={"accept": "text/html"}).text
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the name is shown, as text
    md = web_client.get(url + ".md").text
    assert "<script" not in md.replace("`<script>alert(1)</script>`", "")  # only inside a code span, where it is text
    rep = web_client.get(url + ".json").json()
    assert any(evil in n for n in rep["model"]["notes"])  # the JSON keeps the value itself
    # a badge never carries it: the id is refused before anything is looked up
    e = error_of(web_client.get("/badge/%3Cscript%3E/params.json"), 400)
    assert e["code"] == "bad_id"


def test_checks_pages_list_every_rule_with_its_docs(web_client, capsys):
    from neurarch.cli.checks import run as checks_main

    checks_main(["--format", "json"])
    rules = json.loads(capsys.readouterr().out)
    page = web_client.get("/checks").text
    for rule in rules:
        assert f'href="/checks/{rule["id"]}"' in page
    for rule in rules[:3] + rules[-2:]:
        doc = (REPO / "docs" / "checks" / f"{rule['id']}.md").read_text()
        first_line = next(line for line in doc.splitlines() if line.strip() and not line.startswith("#"))
        words = re.sub(r"[`*_\[\]]", "", first_line).split()[:4]
        r = web_client.get(f"/checks/{rule['id']}")
        assert r.status_code == 200
        text = re.sub(r"<[^>]+>", "", r.text)
        assert " ".join(words) in html.unescape(" ".join(text.split())), rule["id"]
    error_of(web_client.get("/checks/no-such-rule"), 404)


def test_openapi_documents_one_error_shape_and_docs_are_local(web_client):
    spec = web_client.get("/openapi.json").json()
    plan = spec["paths"]["/api/v1/plan"]["post"]
    for code in ("400", "404", "413", "422", "429", "503", "504"):
        assert plan["responses"][code]["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/ErrorResponse"
    jsonschema.validate({"error": {"code": "x", "message": "y", "field": None}}, ERROR_SCHEMA)
    body = spec["components"]["schemas"]["PlanRequest"]
    assert body["additionalProperties"] is False
    docs = web_client.get("/docs")
    assert docs.status_code == 200
    assert not re.search(r'(src|href)="(https?:)?//', docs.text), "the docs page loads nothing from elsewhere"
    for path in spec["paths"]:
        assert html.escape(path) in docs.text


def test_index_lists_the_catalog(web_client):
    from neurarch.sources.catalog import entries

    page = web_client.get("/").text
    for model_id in entries():
        assert f'href="/models/{model_id}"' in page
    r = web_client.get("/models", params={"id": " gpt2 "}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/models/gpt2"


def test_unknown_route_and_html_errors(web_client):
    error_of(web_client.get("/nothing/here"), 404)
    page = web_client.get("/models/..%2Fx", headers={"accept": "text/html"})
    assert page.status_code == 400 and page.headers["content-type"].startswith("text/html")
    assert "Traceback" not in page.text and "never holds" in page.text


def test_the_options_form_round_trips():
    """Submitting a page's options form unchanged asks for the same report (same cache key)."""
    from neurarch.web import options as O
    from neurarch.web.pages import form_fields

    values = O.normalize({"modes": ["full", "lora"], "batch": 4, "disable": ["eager-attention"]})
    items = [(f["name"], f["value"]) for f in form_fields(values)]
    assert O.normalize(O.from_query(items)) == values
    assert O.normalize(O.from_query([(f["name"], f["value"]) for f in form_fields({})])) == O.normalize({})
