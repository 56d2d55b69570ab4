"""The Hugging Face Hub source against a fake hub on 127.0.0.1 (tests/hubserver.py).

The real ``huggingface_hub`` client does every request; only its endpoint
and cache folders are pointed elsewhere.  huggingface_hub reads HF_ENDPOINT
and friends into ``huggingface_hub.constants`` at import time, so in-process
tests patch those constants (what the env would have set) and the CLI tests
run a subprocess with the real environment variables.

Fake repos are made from published configs in the bundled catalog, shrunk to
tiny widths, with REAL safetensors files written by the ``safetensors``
library.  Expected counts are hand figures written out beside each value.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from hubserver import FakeHub, closed_port
from neurarch.errors import ConfigError, HubError, RemoteCodeError, SourceNotFoundError
from neurarch.sources import hub, resolve

CONFIGS = Path(__file__).resolve().parents[2] / "src" / "neurarch" / "catalog" / "configs"
REPO_ROOT = Path(__file__).resolve().parents[2]

GPT2 = "neurarch-test/tiny-gpt2"
RESNET = "neurarch-test/tiny-resnet-sharded"
REMOTE = "neurarch-test/remote-code"
NO_WEIGHTS = "neurarch-test/bin-only"
BAD_CONFIG = "neurarch-test/bad-config"
FLAKY = "neurarch-test/flaky-weights"
GATED = "neurarch-test/gated"
MISSING = "neurarch-test/does-not-exist"

# Tiny GPT-2 (d=64, vocab V=1000, positions P=128), tensors named as in the published gpt2 checkpoint.
#   wte V*d = 64,000; wpe P*d = 8,192; ln_f 2d = 128
#   per layer 12d^2 + 13d = 49,152 + 832 = 49,984
#     (ln_1 128 + c_attn 64*192+192 = 12,480 + attn c_proj 4,096+64 = 4,160 + ln_2 128
#      + c_fc 64*256+256 = 16,640 + mlp c_proj 256*64+64 = 16,448)
GPT2_2_LAYERS = 64_000 + 8_192 + 2 * 49_984 + 128  # = 172,288 (revision main)
GPT2_1_LAYER = 64_000 + 8_192 + 1 * 49_984 + 128  # = 122,304 (revision v1)

# Tiny ResNet-18 (basic blocks, depths 2,2,2,2, widths 8,16,32,64, stem 8, 1000 classes).
# Conv weights c_in*c_out*k*k, no bias; each BatchNorm(c) stores 4c (weight, bias, running mean/var).
#   stem   conv 3*8*49 = 1,176 + BN 32                                           =   1,208
#   stage1 2 blocks x (2 x conv 8*8*9 = 576 + 2 x BN 32)                          =   2,432
#   stage2 1st 1,152+64 + 2,304+64 + shortcut 8*16+64 = 3,776; 2nd 2*(2,304+64) = 4,736 ->   8,512
#   stage3 1st 4,608+128 + 9,216+128 + 512+128 = 14,720; 2nd 2*(9,216+128) = 18,688     ->  33,408
#   stage4 1st 18,432+256 + 36,864+256 + 2,048+256 = 58,112; 2nd 2*(36,864+256) = 74,240 -> 132,352
#   classifier 64*1000 + 1000                                                    =  65,000
RESNET_SCALARS = 1_208 + 2_432 + 8_512 + 33_408 + 132_352 + 65_000  # = 242,912
# One num_batches_tracked per BatchNorm: stem 1 + 8 blocks x 2 + 3 shortcut BNs = 20.
RESNET_COUNTERS = 20
BIG_METADATA = 150_000  # bytes of __metadata__ padding: the shard header outgrows the client's first 100 kB read


# --------------------------------------------------------------------------- fake repos


def gpt2_config(layers: int) -> dict:
    cfg = json.loads((CONFIGS / "gpt2.json").read_text())
    cfg.update(n_layer=layers, n_embd=64, n_head=2, vocab_size=1000, n_positions=128, n_ctx=128)
    cfg.update(bos_token_id=999, eos_token_id=999)  # keep the special tokens inside the shrunk vocabulary
    return cfg


def gpt2_tensors(layers: int, d: int = 64, vocab: int = 1000, positions: int = 128) -> dict[str, torch.Tensor]:
    """Zeros shaped like the published gpt2 checkpoint's tensors (Conv1D weights are [in, out])."""
    t = {"wte.weight": (vocab, d), "wpe.weight": (positions, d), "ln_f.weight": (d,), "ln_f.bias": (d,)}
    for i in range(layers):
        p = f"h.{i}."
        t |= {
            p + "ln_1.weight": (d,), p + "ln_1.bias": (d,),
            p + "attn.c_attn.weight": (d, 3 * d), p + "attn.c_attn.bias": (3 * d,),
            p + "attn.c_proj.weight": (d, d), p + "attn.c_proj.bias": (d,),
            p + "ln_2.weight": (d,), p + "ln_2.bias": (d,),
            p + "mlp.c_fc.weight": (d, 4 * d), p + "mlp.c_fc.bias": (4 * d,),
            p + "mlp.c_proj.weight": (4 * d, d), p + "mlp.c_proj.bias": (d,),
        }  # fmt: skip
    return {k: torch.zeros(s) for k, s in t.items()}


def resnet_config() -> dict:
    cfg = json.loads((CONFIGS / "microsoft--resnet-18.json").read_text())
    cfg.update(embedding_size=8, hidden_sizes=[8, 16, 32, 64])
    return cfg


def resnet_tensors(cfg: dict) -> dict[str, torch.Tensor]:
    """Zeros with the names and shapes of the state dict transformers saves for this config."""
    from transformers import ResNetConfig, ResNetForImageClassification

    with torch.device("meta"):
        model = ResNetForImageClassification(ResNetConfig.from_dict(cfg))
    return {k: torch.zeros(v.shape, dtype=v.dtype) for k, v in model.state_dict().items()}


def json_bytes(obj) -> bytes:
    return json.dumps(obj, indent=2).encode()


def numel(tensors: dict[str, torch.Tensor]) -> int:
    return sum(math.prod(t.shape) for t in tensors.values())


def header_len(blob: bytes) -> int:
    return int.from_bytes(blob[:8], "little")


@pytest.fixture(scope="module")
def fake_hub():
    h = FakeHub()
    # gpt2: main = 2 layers, tag v1 = an older 1-layer commit.
    h.shas = {}
    h.shas["v1"] = h.add_commit(
        GPT2,
        {"config.json": json_bytes(gpt2_config(1)), "model.safetensors": save(gpt2_tensors(1))},
        refs=("v1",),
    )
    h.shas["main"] = h.add_commit(GPT2, {"config.json": json_bytes(gpt2_config(2)), "model.safetensors": save(gpt2_tensors(2))})
    # resnet: two shards + index; shard 2 carries a >100 kB header.
    cfg = resnet_config()
    tensors = resnet_tensors(cfg)
    names = list(tensors)
    sizes = [tensors[k].numel() * tensors[k].element_size() for k in names]
    half = next(i for i in range(len(names)) if sum(sizes[: i + 1]) * 2 >= sum(sizes))  # ~equal bytes
    shard_names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    parts = [{k: tensors[k] for k in names[:half]}, {k: tensors[k] for k in names[half:]}]
    shards = {
        shard_names[0]: save(parts[0], metadata={"format": "pt"}),
        shard_names[1]: save(parts[1], metadata={"format": "pt", "padding": "x" * BIG_METADATA}),
    }
    index = {
        "metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
        "weight_map": {k: shard_names[0] if i < half else shard_names[1] for i, k in enumerate(names)},
    }
    h.resnet_written = tensors
    h.add_commit(RESNET, {"config.json": json_bytes(cfg), "model.safetensors.index.json": json_bytes(index), **shards})
    # edge cases
    h.add_commit(REMOTE, {"config.json": json_bytes({**gpt2_config(1), "auto_map": {"AutoConfig": "configuration_x.XConfig"}})})
    h.add_commit(NO_WEIGHTS, {"config.json": json_bytes(gpt2_config(1)), "pytorch_model.bin": b"\0" * 4096})
    h.add_commit(FLAKY, {"config.json": json_bytes(gpt2_config(1)), "model.safetensors": save(gpt2_tensors(1))})
    h.fail_get[FLAKY, "model.safetensors"] = 500
    h.add_commit(BAD_CONFIG, {"config.json": b'{"model_type": "gpt2", "n_layer": 2,'})
    h.add_commit(GATED, {"config.json": json_bytes(gpt2_config(1))}, gated=True)
    with h:
        yield h


def point_client_at(monkeypatch, endpoint: str, tmp: Path, offline: bool = False) -> None:
    """What HF_ENDPOINT / HF_HUB_CACHE / HF_HUB_OFFLINE would have set at import time."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp / "hf-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)  # no /api/agent-harnesses fetch
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", True)  # never send the user's token
    monkeypatch.setenv(hub.CACHE_ENV, str(tmp / "neurarch-cache"))
    for var in ("HF_HUB_OFFLINE", "HF_HUB_ETAG_TIMEOUT", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def online(fake_hub, tmp_path, monkeypatch):
    point_client_at(monkeypatch, fake_hub.endpoint, tmp_path)
    fake_hub.clear_log()
    return fake_hub


def assert_no_weight_bytes(fake_hub, files: dict[str, bytes]) -> None:
    """Every .safetensors request was a HEAD or a ranged GET inside the header (plus the client's 100 kB read-ahead)."""
    seen = [r for r in fake_hub.requests if r.path.endswith(".safetensors")]
    assert seen, "no safetensors request at all"
    for r in seen:
        name = r.path.rsplit("/", 1)[1]
        if r.method == "HEAD":  # existence checks (model.safetensors may 404 in a sharded repo)
            assert r.body_bytes == 0
            continue
        blob = files[name]
        assert r.method == "GET" and r.range is not None, f"unranged GET of {name}"
        start, end = (int(x) for x in r.range.removeprefix("bytes=").split("-"))
        # huggingface_hub asks bytes=0-100000 first, then bytes=8-(8+header-1) if the header is longer.
        assert start in (0, 8) and end <= max(100_000, 8 + header_len(blob) - 1), r
        assert r.body_bytes < len(blob), f"whole of {name} sent"
    assert not any(r.path.endswith((".bin", ".pt")) for r in fake_hub.requests)


# --------------------------------------------------------------------------- happy paths


def test_end_to_end_single_file(online):
    from neurarch import analyze

    report = analyze(GPT2)
    sha = online.shas["main"]
    assert report.model.source == "hub"
    assert report.model.revision == sha
    assert report.model.provenance == f"Hugging Face Hub {GPT2}@{sha}"
    assert report.params.checkpoint == GPT2_2_LAYERS == numel(gpt2_tensors(2))
    assert report.params.derived == GPT2_2_LAYERS  # lm_head tied to wte: counted once
    assert report.forward_pass.ok and report.backward_pass.ok
    files = online.repos[GPT2].commits[sha]
    assert len(files["model.safetensors"]) > 4 * GPT2_2_LAYERS  # the file really holds the weights...
    assert_no_weight_bytes(online, files)  # ...and they were not fetched
    # Only hub file URLs were asked for: no API calls our server does not implement.
    assert all("/resolve/" in r.path for r in online.requests), [r.path for r in online.requests]


def test_sharded_index(online):
    src = resolve(RESNET)
    ck = src.checkpoint
    assert ck.scalars == RESNET_SCALARS == numel({k: v for k, v in online.resnet_written.items() if not k.endswith("num_batches_tracked")})
    assert ck.counters == RESNET_COUNTERS
    assert "model-00001-of-00002.safetensors" in ck.source and "model-00002-of-00002.safetensors" in ck.source
    assert len(ck.tensors) == len(online.resnet_written)
    files = online.repos[RESNET].commits[src.revision]
    assert header_len(files["model-00002-of-00002.safetensors"]) > 100_000
    assert min(len(files[f"model-0000{i}-of-00002.safetensors"]) for i in (1, 2)) > 200_000  # weights beyond any read
    ranges = {(r.path.rsplit("/", 1)[1], r.range) for r in online.requests if r.range}
    # the big header needed the client's second read, bytes 8..8+n-1
    n = header_len(files["model-00002-of-00002.safetensors"])
    assert ("model-00002-of-00002.safetensors", f"bytes=8-{n + 7}") in ranges
    assert_no_weight_bytes(online, files)


def test_sharded_end_to_end_counts(online):
    from neurarch import analyze

    report = analyze(RESNET)
    assert report.params.checkpoint == RESNET_SCALARS
    assert report.params.checkpoint_counters == RESNET_COUNTERS
    assert report.params.derived == RESNET_SCALARS


def test_revision_pinning(online):
    old = resolve(GPT2, revision="v1")
    new = resolve(GPT2, revision="main")
    assert (old.config["n_layer"], new.config["n_layer"]) == (1, 2)
    assert old.checkpoint.scalars == GPT2_1_LAYER
    assert new.checkpoint.scalars == GPT2_2_LAYERS
    assert old.revision == online.shas["v1"] and new.revision == online.shas["main"]
    # a full commit sha pins too
    by_sha = resolve(GPT2, revision=online.shas["v1"])
    assert by_sha.config["n_layer"] == 1 and by_sha.checkpoint.scalars == GPT2_1_LAYER
    # every config/header request went to the right revision
    assert any(f"/resolve/{online.shas['v1']}/model.safetensors" in r.path for r in online.requests)


def test_no_safetensors_in_repo(online):
    src = resolve(NO_WEIGHTS)
    assert src.checkpoint is None
    assert hub.NO_SAFETENSORS_NOTE in src.notes
    assert not any(r.path.endswith(".bin") for r in online.requests)


def test_header_read_failure_costs_only_the_count(online):
    src = resolve(FLAKY)  # config fine, the header GET answers 500
    assert src.config["n_layer"] == 1 and src.checkpoint is None
    assert any("safetensors headers could not be read" in n and "HTTP 500" in n for n in src.notes), src.notes


# --------------------------------------------------------------------------- cache and offline


def test_cache_then_offline_with_server_stopped(tmp_path, monkeypatch):
    sha = None
    with FakeHub() as h:
        sha = h.add_commit(GPT2, {"config.json": json_bytes(gpt2_config(2)), "model.safetensors": save(gpt2_tensors(2))})
        point_client_at(monkeypatch, h.endpoint, tmp_path)
        first = hub.load(GPT2, revision=None, offline=None)
        assert first.checkpoint.scalars == GPT2_2_LAYERS
        endpoint = h.endpoint
    # Server gone.  Explicit offline: config from the HF cache, headers from neurarch's cache.
    again = hub.load(GPT2, revision=None, offline=True)
    assert again.revision == sha and again.config == first.config
    assert again.checkpoint.scalars == GPT2_2_LAYERS
    # Not offline but the hub is down: falls back to the cache with a note.
    down = hub.load(GPT2, revision=None, offline=None)
    assert down.revision == sha and any("could not be reached" in n for n in down.notes)
    # Offline and never fetched: one clear line.
    with pytest.raises(HubError, match="not in the local cache and HF_HUB_OFFLINE is set"):
        hub.load("neurarch-test/never-fetched", revision=None, offline=True)

    # The real CLI in a fresh process, configured only by environment variables.
    env = {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
        "HF_HOME": str(tmp_path / "hf-home"),
        hub.CACHE_ENV: str(tmp_path / "neurarch-cache"),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    out = subprocess.run(
        [sys.executable, "-m", "neurarch.cli", GPT2, "--format", "json", "--no-backward"],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["model"]["revision"] == sha
    assert report["params"]["checkpoint"] == GPT2_2_LAYERS


# --------------------------------------------------------------------------- errors


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and text, repr(text)
    return text


def test_unknown_repo(online):
    with pytest.raises(SourceNotFoundError) as e:
        resolve(MISSING)
    assert MISSING in one_line(e.value) and "no such model repo" in str(e.value)


def test_invalid_repo_id_asks_nothing(online):
    with pytest.raises(SourceNotFoundError) as e:
        resolve("neurarch-test/double--dash")
    assert "not a valid Hugging Face repo id" in one_line(e.value)
    assert online.requests == []


def test_gated_repo(online):
    with pytest.raises(HubError) as e:
        resolve(GATED)
    assert "gated" in one_line(e.value)


def test_revision_not_found(online):
    with pytest.raises(SourceNotFoundError) as e:
        resolve(GPT2, revision="no-such-branch")
    assert "revision 'no-such-branch' not found" in one_line(e.value)


def test_malformed_config(online):
    with pytest.raises(ConfigError) as e:
        resolve(BAD_CONFIG)
    assert "malformed JSON" in one_line(e.value)


def test_auto_map_needs_remote_code(online):
    with pytest.raises(RemoteCodeError):
        resolve(REMOTE)
    assert resolve(REMOTE, trust_remote_code=True).config["auto_map"]


def test_unreachable_endpoint_is_quick(tmp_path, monkeypatch):
    point_client_at(monkeypatch, f"http://127.0.0.1:{closed_port()}", tmp_path)
    t0 = time.monotonic()
    with pytest.raises(HubError) as e:
        hub.load(GPT2, revision=None, offline=None)
    assert time.monotonic() - t0 < 3.0  # hf_hub_download alone would retry with back-off for ~25 s
    assert "cannot reach http://127.0.0.1:" in one_line(e.value)


def test_silent_server_times_out(tmp_path, monkeypatch):
    """A server that accepts connections and never answers: HF_HUB_ETAG_TIMEOUT bounds the wait."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes handshakes; nobody ever reads or replies
        point_client_at(monkeypatch, f"http://127.0.0.1:{silent.getsockname()[1]}", tmp_path)
        monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "1")
        t0 = time.monotonic()
        with pytest.raises(HubError) as e:
            hub.load(GPT2, revision=None, offline=None)
        assert time.monotonic() - t0 < 4.0
    assert "no answer from" in one_line(e.value)


def test_cli_unknown_repo_is_one_line_exit_2(fake_hub, tmp_path):
    env = {
        **os.environ,
        "HF_ENDPOINT": fake_hub.endpoint,
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        hub.CACHE_ENV: str(tmp_path / "neurarch-cache"),
    }
    env.pop("HF_HUB_OFFLINE", None)
    out = subprocess.run([sys.executable, "-m", "neurarch.cli", MISSING], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and MISSING in out.stderr and "no such model repo" in out.stderr, out.stderr
