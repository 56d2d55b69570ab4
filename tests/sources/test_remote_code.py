"""Nothing from a model repo ever executes, and remote code is refused only where it is the only way.

Each hostile file below writes a marker file when it runs (imported as a
module, or unpickled).  The tests drive the CLI entry the way a user does
(in-process, and once as a real process) and a local hub, and assert the
marker never appears, with and without ``--trust-remote-code``.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from neurarch import Options, analyze
from neurarch.cli import main
from neurarch.errors import ConfigError, RemoteCodeError
from neurarch.sources import native_build, resolve

TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": 64,
    "max_position_embeddings": 32,
}


class _WritesMarker:
    """Unpickling this calls exec(), which writes the marker."""

    def __init__(self, marker: Path):
        self.code = f"open({str(marker)!r}, 'w').write('pickle ran')"

    def __reduce__(self):
        return (exec, (self.code,))


def hostile_folder(root: Path, config: dict) -> tuple[Path, Path]:
    """A model folder whose every code-bearing file writes ``marker`` when run."""
    folder = root / "evil-model"
    folder.mkdir()
    marker = root / "MARKER"
    code = f"open({str(marker)!r}, 'w').write('module ran')\n"
    for name in ("modeling_evil.py", "configuration_evil.py", "__init__.py", "tokenization_evil.py"):
        (folder / name).write_text(code + "class EvilForCausalLM: pass\nclass EvilConfig: pass\n")
    blob = pickle.dumps(_WritesMarker(marker))
    for name in ("pytorch_model.bin", "training_args.bin", "model.pt", "optimizer.pt"):
        (folder / name).write_bytes(blob)
    (folder / "config.json").write_text(json.dumps(config))
    # The pickle itself really would run (the test's own control, outside neurarch):
    assert not marker.exists()
    return folder, marker


EVIL_AUTO_MAP = {
    "AutoConfig": "configuration_evil.EvilConfig",
    "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM",
    "AutoTokenizer": ["tokenization_evil.EvilTokenizer", None],
}


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_control_the_pickle_does_run_when_unpickled(tmp_path):
    # Proves the fixture is live: plain pickle.loads of the same bytes writes the marker.
    marker = tmp_path / "MARKER"
    pickle.loads(pickle.dumps(_WritesMarker(marker)))
    assert marker.read_text() == "pickle ran"


@pytest.mark.parametrize(
    "extra",
    [
        {"architectures": ["EvilForCausalLM"], "auto_map": EVIL_AUTO_MAP},
        {"architectures": ["EvilForCausalLM"], "auto_map": EVIL_AUTO_MAP, "trust_remote_code": True},
        {"architectures": ["LlamaForCausalLM"], "auto_map": {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}},
        {"architectures": ["LlamaForCausalLM"], "trust_remote_code": True},
        {"model_type": "evil", "architectures": ["EvilForCausalLM"], "auto_map": EVIL_AUTO_MAP},
    ],
    ids=["auto_map", "auto_map+trust_remote_code", "native-arch-custom-auto_map", "trust_remote_code-key", "unknown-type"],
)
def test_hostile_folder_is_refused_and_nothing_runs(capsys, tmp_path, extra):
    folder, marker = hostile_folder(tmp_path, {**TINY_LLAMA, **extra})
    rc, out, err = run_cli(capsys, str(folder), "--no-verify")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "--trust-remote-code" in err
    assert not marker.exists()


@pytest.mark.parametrize(
    "archs",
    [
        ["EvilForCausalLM"],
        ["os.system"],
        ["__import__('os').system('touch MARKER')"],
        ["modeling_evil.EvilForCausalLM"],
        ["../evil-model/modeling_evil"],
    ],
)
def test_trusted_or_not_the_repo_code_never_runs(capsys, tmp_path, archs):
    """With --trust-remote-code neurarch still never imports the repo's files or
    unpickles its weights: it builds transformers' own class for the model type
    (and says so) or fails with one line."""
    folder, marker = hostile_folder(tmp_path, {**TINY_LLAMA, "architectures": archs, "auto_map": EVIL_AUTO_MAP})
    rc, out, err = run_cli(capsys, str(folder), "--trust-remote-code", "--no-verify", "--format", "json")
    assert not marker.exists()
    assert rc == 0, err
    report = json.loads(out)
    built = report["model"]["model_class"]
    assert built in ("LlamaForCausalLM", "LlamaModel")  # the task's class, or the base class for a name with no task suffix
    assert any("has no class" in n and f"built {built}" in n or f"base class {built}" in n for n in report["model"]["notes"])


def test_unknown_model_type_stays_refused_even_when_trusted(capsys, tmp_path):
    folder, marker = hostile_folder(tmp_path, {**TINY_LLAMA, "model_type": "evil", "architectures": ["EvilForCausalLM"], "auto_map": EVIL_AUTO_MAP})
    rc, out, err = run_cli(capsys, str(folder), "--trust-remote-code")
    assert rc == 2 and "unknown model_type 'evil'" in err and len(err.strip().splitlines()) == 1
    assert not marker.exists()


def test_real_process_runs_nothing(tmp_path):
    folder, marker = hostile_folder(tmp_path, {**TINY_LLAMA, "architectures": ["EvilForCausalLM"], "auto_map": EVIL_AUTO_MAP})
    for flags in ([], ["--trust-remote-code"]):
        proc = subprocess.run(
            [sys.executable, "-m", "neurarch.cli", str(folder), "--no-verify", *flags],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=folder,  # cwd: a repo file would shadow a module name
        )
        assert "Traceback" not in proc.stderr
        assert proc.returncode == (2 if not flags else 0), proc.stderr
    assert not marker.exists()


# ---------------------------------------------------------------------------
# auto_map for a model transformers has natively (issue 10 item 3)
# ---------------------------------------------------------------------------

PHI3_AUTO_MAP = {"AutoConfig": "configuration_phi3.Phi3Config", "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"}


def test_native_build_rule():
    phi3 = {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "auto_map": PHI3_AUTO_MAP}
    assert native_build(phi3) == "Phi3ForCausalLM"
    # hub-style "repo--module.Class" references and tokenizer entries are fine
    assert native_build({**phi3, "auto_map": {"AutoConfig": "microsoft/Phi-3-mini-4k-instruct--configuration_phi3.Phi3Config", "AutoTokenizer": ["x.Tok", None]}}) == "Phi3ForCausalLM"
    assert native_build({**phi3, "model_type": "phi3-custom"}) is None  # unknown model type
    assert native_build({**phi3, "architectures": ["Phi3CustomForCausalLM"]}) is None  # class transformers lacks
    assert native_build({**phi3, "architectures": ["LlamaForCausalLM"]}) is None  # another model type's class
    assert native_build({**phi3, "auto_map": {**PHI3_AUTO_MAP, "AutoModel": "modeling_phi3.MyPhi3Model"}}) is None
    assert native_build({**phi3, "auto_map": {"AutoConfig": "configuration_phi3.LlamaConfig"}}) is None
    assert native_build({**phi3, "architectures": []}) is None
    assert native_build({**phi3, "auto_map": ["not", "a", "dict"]}) is None


def test_native_auto_map_builds_with_a_note(capsys, tmp_path):
    cfg = {**TINY_LLAMA, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "auto_map": PHI3_AUTO_MAP, "pad_token_id": 0}
    folder, marker = hostile_folder(tmp_path, cfg)
    rc, out, err = run_cli(capsys, str(folder), "--no-verify", "--format", "json")
    assert rc == 0, err
    report = json.loads(out)
    assert report["model"]["model_class"] == "Phi3ForCausalLM"
    assert "the repo's own code (auto_map) was not used: transformers' native phi3 implementation was built (Phi3ForCausalLM)" in report["model"]["notes"]
    assert report["forward_pass"]["ok"] and not marker.exists()


def test_catalog_phi3_is_no_longer_refused():
    r = analyze("microsoft/Phi-3-mini-4k-instruct", Options(verify=False, backward=False))
    assert r.model.model_class == "Phi3ForCausalLM"


def test_resolve_refuses_custom_auto_map_without_the_flag(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**TINY_LLAMA, "architectures": ["LlamaForCausalLM"], "auto_map": {"AutoModel": "modeling_x.X"}}))
    with pytest.raises(RemoteCodeError):
        resolve(str(p))
    assert resolve(str(p), trust_remote_code=True).config["auto_map"]
    p.write_text(json.dumps({**TINY_LLAMA, "model_type": "nope", "auto_map": {"AutoModel": "modeling_x.X"}}))
    with pytest.raises(RemoteCodeError):
        resolve(str(p))
    with pytest.raises(ConfigError, match="unknown model_type"):
        analyze(str(p), Options(trust_remote_code=True))
