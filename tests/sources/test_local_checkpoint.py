"""Local model folders: config.json + real safetensors files.

The checkpoint count must come from the safetensors headers alone; the
independent figure is the number of scalars we wrote into the files,
computed from the tensors themselves (not from neurarch's graph).
"""

import json

import pytest
import torch
from safetensors.torch import save_file

from neurarch import analyze
from neurarch.errors import ConfigError, SourceNotFoundError

TINY_BERT = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "vocab_size": 100,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
}


def _real_state_dict():
    """A real BertModel's weights as transformers saves them (built on CPU, random)."""
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(**{k: v for k, v in TINY_BERT.items() if k not in ("architectures", "model_type")}))
    return {k: v.contiguous() for k, v in model.state_dict().items()}


def _folder(tmp_path, state, shards=1):
    (tmp_path / "config.json").write_text(json.dumps(TINY_BERT))
    names = sorted(state)
    if shards == 1:
        save_file(state, str(tmp_path / "model.safetensors"))
    else:
        weight_map = {}
        for i in range(shards):
            part = names[i::shards]
            fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            save_file({k: state[k] for k in part}, str(tmp_path / fname))
            weight_map.update({k: fname for k in part})
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return tmp_path


def test_folder_checkpoint_count_from_headers(tmp_path):
    state = _real_state_dict()
    written = sum(t.numel() for t in state.values())
    r = analyze(str(_folder(tmp_path, state)))
    assert r.model.source == "local"
    assert r.params.checkpoint == written
    assert "safetensors headers" in r.params.checkpoint_source
    # The saved state dict holds exactly parameters + persistent buffers of the graph.
    assert r.params.delta == 0


def test_sharded_checkpoint_via_index(tmp_path):
    state = _real_state_dict()
    written = sum(t.numel() for t in state.values())
    r = analyze(str(_folder(tmp_path, state, shards=3)))
    assert r.params.checkpoint == written and r.params.delta == 0


def test_difference_is_explained_tensor_by_tensor(tmp_path):
    state = _real_state_dict()
    dropped = "encoder.layer.1.output.dense.weight"  # 32 x 64 = 2,048 scalars
    extra = torch.zeros(3, 7)  # 21 scalars the graph does not have
    state = {k: v for k, v in state.items() if k != dropped}
    state["legacy.extra_buffer"] = extra
    r = analyze(str(_folder(tmp_path, state)))
    p = r.params
    assert p.delta == 2048 - 21
    assert p.explained
    causes = {tuple(d.tensors): d.scalars for d in p.differences}
    assert causes[(dropped,)] == 2048
    assert causes[("legacy.extra_buffer",)] == -21


def test_header_only_is_read(tmp_path):
    # A file whose header is valid but whose data section is truncated: only a
    # reader that stays out of the data can count it.
    state = {"embeddings.word_embeddings.weight": torch.zeros(100, 32)}
    _folder(tmp_path, state)
    f = tmp_path / "model.safetensors"
    raw = f.read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    f.write_bytes(raw[: 8 + header_len])  # drop every tensor byte
    r = analyze(str(tmp_path))
    assert r.params.checkpoint == 100 * 32


def test_corrupt_header_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_BERT))
    (tmp_path / "model.safetensors").write_bytes((10**12).to_bytes(8, "little") + b"{}")
    with pytest.raises(ConfigError, match="implausible"):
        analyze(str(tmp_path))


def test_index_naming_a_missing_shard(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_BERT))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(ConfigError, match="model-00001-of-00002"):
        analyze(str(tmp_path))


def test_folder_without_config(tmp_path):
    with pytest.raises(SourceNotFoundError, match="no config.json"):
        analyze(str(tmp_path))


def test_config_file_directly(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(TINY_BERT))
    r = analyze(str(p))
    assert r.params.checkpoint is None
    # word 100x32 + position 64x32 + type 2x32 + LN 2x32, per layer: 4 linear 32x32+32,
    # LN 64, FFN 32x64+64 + 64x32+32, LN 64; pooler 32x32+32.
    emb = 100 * 32 + 64 * 32 + 2 * 32 + 2 * 32
    layer = 4 * (32 * 32 + 32) + 64 + (32 * 64 + 64) + (64 * 32 + 32) + 64
    pooler = 32 * 32 + 32
    assert r.params.parameters == emb + 2 * layer + pooler
