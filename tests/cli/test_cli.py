"""The command line: formats, stable JSON paths, and one-line errors for bad input."""

import json
import os
import subprocess
import sys

import pytest

from neurarch.cli import main

STABLE_PATHS = [
    "model.id",
    "model.source",
    "model.architecture",
    "input.shape",
    "forward_pass.ok",
    "forward_pass.error",
    "params.parameters",
    "params.buffers",
    "params.derived",
    "params.checkpoint",
    "params.checkpoint_source",
    "params.delta_pct",
    "structure.layers",
    "structure.nodes",
]


def _get(obj, path):
    for part in path.split("."):
        assert part in obj, f"missing {path}"
        obj = obj[part]
    return obj


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_has_the_stable_paths(capsys):
    rc, out, err = run_cli(capsys, "microsoft/resnet-50", "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["schema_version"] == "1.2"
    for path in STABLE_PATHS:
        _get(doc, path)
    assert doc["params"]["checkpoint"] == 25_610_152 and doc["params"]["delta_pct"] == 0
    node = doc["structure"]["nodes"][0]
    assert set(node) >= {"index", "name", "type", "output_shape"}
    assert doc["input"]["shape"] == [1, 3, 224, 224]


def test_text_markdown_html(capsys):
    rc, out, _ = run_cli(capsys, "facebook/dinov2-small")
    assert rc == 0 and "22,056,576" in out and "Patch Embed" in out and "[1369, 384]" in out
    rc, out, _ = run_cli(capsys, "facebook/dinov2-small", "--format", "markdown")
    assert rc == 0 and out.startswith("# facebook/dinov2-small") and "| **checkpoint** | **22,056,576** |" in out
    rc, out, _ = run_cli(capsys, "facebook/dinov2-small", "--format", "html")
    assert rc == 0 and out.startswith("<!doctype html>") and "<script" not in out and "http" not in out.split("<body>")[0]


def test_jsonl_several_models_one_line_each(capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 32}))
    rc, out, _ = run_cli(capsys, "gpt2", str(cfg), "--format", "jsonl")
    lines = out.strip().splitlines()
    assert rc == 0 and len(lines) == 2
    small = json.loads(lines[1])
    # wte 100x64 + wpe 32x64 + 2 x (ln 2*64, c_attn 64x192+192, c_proj 64x64+64, ln 2*64, fc 64x256+256, proj 256x64+64) + ln_f 2*64
    layer = 128 + (64 * 192 + 192) + (64 * 64 + 64) + 128 + (64 * 256 + 256) + (256 * 64 + 64)
    assert small["params"]["parameters"] == 100 * 64 + 32 * 64 + 2 * layer + 128
    assert small["input"]["shape"] == [1, 32]  # default seq capped by n_positions


def test_share_writes_a_page(capsys, tmp_path):
    page = tmp_path / "page.html"
    rc, out, err = run_cli(capsys, "microsoft/resnet-18", "--share", str(page))
    assert rc == 0 and page.read_text().startswith("<!doctype html>") and str(page) in err


def test_catalog_listing(capsys):
    rc, out, _ = run_cli(capsys, "catalog", "--format", "json")
    rows = json.loads(out)
    assert rc == 0 and len(rows) == 28
    by_id = {r["id"]: r for r in rows}
    assert by_id["microsoft/resnet-50"]["checkpoint"] == 25_610_152 and by_id["microsoft/resnet-50"]["tier"] == "C"


BAD = {
    "malformed.json": ("{not json", "malformed JSON"),
    "array.json": ("[1, 2]", "JSON object"),
    "no_type.json": ('{"hidden_size": 8}', "no model_type"),
    "unknown.json": ('{"model_type": "not-a-model"}', "unknown model_type"),
    "layers.json": ('{"model_type": "llama", "num_hidden_layers": 1000000000}', "num_hidden_layers"),
    "negative.json": ('{"model_type": "llama", "hidden_size": -8}', "hidden_size"),
    "huge.json": ('{"model_type": "bert", "vocab_size": 100000000000}', "vocab_size"),
    "remote.json": ('{"model_type": "llama", "auto_map": {"AutoModel": "modeling_x.X"}}', "--trust-remote-code"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_config_is_one_line_and_exit_2(capsys, tmp_path, name):
    text, needle = BAD[name]
    p = tmp_path / name
    p.write_text(text)
    rc, out, err = run_cli(capsys, str(p))
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["./missing/config.json"], "no such file"),
        (["microsoft/resnet-50", "--batch", "0"], "--batch"),
        (["microsoft/resnet-50", "--batch", "-3"], "--batch"),
        (["gpt2", "--seq-len", "100000000000"], "--seq-len"),
        (["microsoft/resnet-50", "--image-size", "0"], "--image-size"),
        (["microsoft/resnet-50", "--depth", "0"], "--depth"),
        (["microsoft/resnet-50", "--input-shape", "3,a"], "--input-shape"),
        (["not a model id!"], "not a path"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(capsys, argv, needle):
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_real_process_has_no_traceback(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{broken")
    proc = subprocess.run([sys.executable, "-m", "neurarch.cli", str(p)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "neurarch.cli", str(p), "--debug"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_time_limit_is_a_clear_error(capsys):
    # Llama-3.1-70B takes seconds to trace; a 10 ms budget cannot be met.
    rc, out, err = run_cli(capsys, "meta-llama/Llama-3.1-70B-Instruct", "--timeout", "0.01")
    assert rc == 2 and "took longer than" in err and len(err.strip().splitlines()) == 1
    # Wherever the alarm fired, torch's switches are as they were (tests after this one trace backward passes).
    import torch

    assert torch.is_grad_enabled() and torch.get_default_dtype() is torch.float32


def test_verifier_section_in_every_format(capsys):
    # dinov2-small is a backbone: no normalization-at-output warning (the seed's
    # false positive), but its mask_token (384 scalars) gets no gradient.
    rc, out, _ = run_cli(capsys, "facebook/dinov2-small", "--format", "json")
    doc = json.loads(out)
    rules = [f["rule"] for f in doc["findings"]]
    assert "norm-at-output" not in rules and "dead-parameters" in rules
    assert set(doc["findings"][0]) >= {"rule", "severity", "node", "message", "fix"}
    assert doc["verifier"]["counts"]["warn"] >= 1
    for fmt, needle in (("text", "What the verifier says"), ("markdown", "## What the verifier says"), ("html", "<h2>What the verifier says</h2>")):
        rc, out, _ = run_cli(capsys, "facebook/dinov2-small", "--format", fmt)
        assert rc == 0 and needle in out and "dead-parameters" in out
    rc, out, _ = run_cli(capsys, "facebook/dinov2-small", "--disable", "dead-parameters", "--format", "json")
    assert "dead-parameters" not in [f["rule"] for f in json.loads(out)["findings"]]


def test_checks_listing(capsys):
    rc, out, _ = run_cli(capsys, "checks", "--format", "json")
    rules = json.loads(out)
    assert rc == 0 and len(rules) >= 15 and set(rules[0]) == {"id", "severity", "summary"}


@pytest.mark.parametrize("command", [[], ["catalog"], ["checks"], ["measure"], ["sweep"], ["changes"], ["diff"], ["serve"]])
def test_every_help_page_prints(command):
    # argparse formats each option's help with %: a literal % in a help string (such as "90% of memory")
    # must be written %% or --help itself fails. A real process, as a user runs it.
    proc = subprocess.run([sys.executable, "-m", "neurarch.cli", *command, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:") and proc.stderr == ""


def test_help_names_every_optimizer():
    # The --optimizer help is written by hand; every optimizer the options accept must be in it.
    from neurarch.options import OPTIMIZERS

    proc = subprocess.run([sys.executable, "-m", "neurarch.cli", "--help"], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "400"})
    words = set(proc.stdout.replace("|", " ").replace("(", " ").split())
    assert set(OPTIMIZERS) <= words, set(OPTIMIZERS) - words
