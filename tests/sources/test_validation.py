"""Bad structural sizes in a config are bad input: one line naming the field, exit 2.

The independent figures here are transformers' own default configs (every
model type it knows, ``CONFIG_MAPPING``) and the bundled catalog's published
configs: none of them may be refused, while a zero, negative, fractional or
wrongly typed size must be.
"""

import json
import math
import warnings

import pytest

from neurarch import limits
from neurarch.cli import main
from neurarch.errors import ConfigError, LimitError
from neurarch.sources.catalog import entries
from neurarch.sources.local import parse_config

TINY_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 128,
    "max_position_embeddings": 64,
}


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("num_hidden_layers", 0, "num_hidden_layers = 0 must be a positive size"),
        ("num_hidden_layers", -3, "num_hidden_layers = -3 must be a positive size"),
        ("num_attention_heads", 0, "num_attention_heads = 0"),
        ("num_key_value_heads", 0, "num_key_value_heads = 0"),
        ("hidden_size", 0, "hidden_size = 0"),
        ("intermediate_size", -1, "intermediate_size = -1"),
        ("vocab_size", 0, "vocab_size = 0"),
        ("max_position_embeddings", 0, "max_position_embeddings = 0"),
        ("num_hidden_layers", 2.5, "must be an integer, not a float"),
        ("num_hidden_layers", 2.0, "must be an integer, not a float"),
        ("num_hidden_layers", "2", "must be a positive integer, not str"),
        ("num_hidden_layers", True, "not a boolean"),
        ("hidden_size", [], "not an empty list"),
        ("hidden_size", {"a": 1}, None),  # a dict is walked; its keys are not sizes: accepted here
    ],
)
def test_bad_structural_size_is_one_line_exit_2(capsys, tmp_path, field, value, needle):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**TINY_LLAMA, field: value}))
    if needle is None:
        limits.check_config({**TINY_LLAMA, field: value}, "x")
        return
    rc, out, err = run_cli(capsys, str(p), "--no-verify")
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and needle in err and field in err, err
    assert "Traceback" not in err and out == ""


def test_zero_layers_is_no_longer_a_working_model(capsys, tmp_path):
    # Issue 10 item 4: a 0-layer llama used to be reported "forward pass ok" with exit 0.
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**TINY_LLAMA, "num_hidden_layers": 0}))
    rc, out, err = run_cli(capsys, str(p))
    assert rc == 2 and "forward pass ok" not in out


@pytest.mark.parametrize(
    "sub,field",
    [({"text_config": {"num_hidden_layers": 0}}, "text_config.num_hidden_layers"), ({"vision_config": {"patch_size": -16}}, "vision_config.patch_size")],
)
def test_nested_sub_config_sizes_are_checked(sub, field):
    with pytest.raises(LimitError) as e:
        limits.check_config({"model_type": "llava", **sub}, "cfg")
    assert e.value.field == field and field in str(e.value)


@pytest.mark.parametrize(
    "cfg",
    [
        {"sliding_window": 0},  # Qwen2-MoE's default: no sliding window
        {"num_experts": 0, "n_routed_experts": 0, "num_experts_per_tok": 0},  # dense
        {"num_key_value_heads": None, "head_dim": None, "intermediate_size": None},  # "derive it"
        {"head_dim": 0},  # GLM-5's default: derived from hidden_size / heads
        {"first_k_dense_replace": 0, "num_nextn_predict_layers": 0},
        {"vision_feature_layer": -2, "max_relative_positions": -1},
        {"max_position_embeddings": 1200.0},  # MusicFlamingo's default is a float
        {"time_step_limit": [0.0, math.inf]},  # Mamba-2's default holds Infinity
        {"depths": [2, 2, 6, 2], "num_heads": [3, 6, 12, 24]},
        {"id2label": {"0": "hidden_size"}, "label2id": {"hidden_size": 0}},
    ],
)
def test_fields_where_zero_or_odd_values_are_real_are_accepted(cfg):
    limits.check_config({**TINY_LLAMA, **cfg}, "cfg")


def test_nan_is_refused_anywhere_and_infinity_in_sizes():
    with pytest.raises(LimitError, match="rope_theta is NaN"):
        limits.check_config({**TINY_LLAMA, "rope_theta": math.nan}, "cfg")
    with pytest.raises(LimitError, match="hidden_size"):
        limits.check_config({**TINY_LLAMA, "hidden_size": math.inf}, "cfg")
    # json.loads accepts the NaN literal; the config check then refuses it.
    cfg = parse_config('{"model_type": "llama", "rms_norm_eps": NaN}', "cfg")
    assert math.isnan(cfg["rms_norm_eps"])
    with pytest.raises(LimitError, match="rms_norm_eps is NaN"):
        limits.check_config(cfg, "cfg")


def test_duplicate_keys_are_refused_at_any_depth():
    # Python's json alone would keep the last value silently.
    assert json.loads('{"a": 1, "a": 2}') == {"a": 2}
    with pytest.raises(ConfigError, match="'num_hidden_layers' appears twice"):
        parse_config('{"model_type": "llama", "num_hidden_layers": 2, "num_hidden_layers": 80}', "cfg")
    with pytest.raises(ConfigError, match="'hidden_size' appears twice"):
        parse_config('{"text_config": {"hidden_size": 2, "hidden_size": 3}}', "cfg")


def test_deep_nesting_is_one_line():
    with pytest.raises(ConfigError) as e:
        parse_config("[" * 200_000 + "]" * 200_000, "cfg")
    assert "nests too deeply" in str(e.value)
    deep: dict = {}
    node = deep
    for _ in range(100):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(LimitError, match="nests deeper than 32"):
        limits.check_config({"model_type": "llama", "extra": deep}, "cfg")


@pytest.mark.parametrize(
    "cfg,field",
    [
        ({"model_type": 7}, "model_type"),
        ({"model_type": "x" * 10_000}, "model_type"),
        ({"model_type": "llama", "architectures": "LlamaForCausalLM"}, "architectures"),
        ({"model_type": "llama", "architectures": [None]}, "architectures[0]"),
        ({"model_type": "llama", "architectures": [""]}, "architectures[0]"),
    ],
)
def test_names_have_the_right_type_and_messages_stay_short(cfg, field):
    with pytest.raises(LimitError) as e:
        limits.check_config(cfg, "cfg")
    assert e.value.field == field and len(str(e.value)) < 300


def test_every_catalog_config_passes():
    es = entries()
    assert len(es) == 28
    for model_id, e in es.items():
        limits.check_config(e.config(), model_id)


def test_no_transformers_default_config_is_refused():
    """Every default config transformers can make, through JSON as a config.json
    would be, passes the validator alone (no tracing)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    checked, refused = 0, []
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raw = CONFIG_MAPPING[model_type]().to_dict()
        except Exception:  # noqa: BLE001 - a default transformers itself cannot build (2 of 820 in 5.24)
            continue
        cfg = parse_config(json.dumps(raw, default=str), model_type)
        try:
            limits.check_config(cfg, model_type)
        except LimitError as e:
            refused.append(str(e))
        checked += 1
    assert refused == []
    assert checked > 500  # 818 in transformers 5.24
