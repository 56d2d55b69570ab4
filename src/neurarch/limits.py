"""Bounds on the work a config or an option may ask for.

A config is data from the internet; a typo (``"num_hidden_layers": 1e9``) must
give one clear line, not a hang or an out-of-memory kill.  Each bound is far
above any published model (the largest have ~130 layers, ~1M vocab, ~200k
hidden) yet low enough that building the graph stays cheap.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import LimitError

MAX_LAYERS = 2048  # per layer-count field; Llama-3.1-405B has 126
MAX_DIM = 1 << 21  # 2,097,152: any width, vocabulary or positional size
MAX_PARAMETERS = 10**13  # 10 T scalars after the meta build
MAX_BATCH = 1 << 20
MAX_SEQ_LEN = 1 << 22  # 4 M tokens
MAX_IMAGE = 1 << 14  # 16,384 px per side
MAX_INPUT_ELEMENTS = 1 << 34  # elements in one input tensor

# Integer fields that are sizes: must be > 0.  (Counts of optional things such
# as num_experts or num_labels may legitimately be 0 and are only bounded.)
_POSITIVE = re.compile(
    r"^(hidden_size|intermediate_size|num_attention_heads|vocab_size|d_model|d_ff|d_kv|n_embd|n_head|n_inner|"
    r"image_size|patch_size|num_channels|embed_dim|dim|hidden_dim|num_heads|encoder_attention_heads|"
    r"decoder_attention_heads|encoder_ffn_dim|decoder_ffn_dim|head_dim|num_key_value_heads)$"
)
_LAYERS = re.compile(r"(^|_)(layers?|n_layer|num_hidden_layers|depths?|num_blocks|blocks)$|^n_layer$|_layers$")
_BOUNDED = re.compile(r"(size|dim|_ff|heads|layers?|embd|positions|channels|experts|length|tokens)s?$")
_LAYER_INDEX = re.compile(r"(^|_)layers?$")
_NOT_SIZES = re.compile(r"(token_id|_id|_ids|rope_theta|epsilon|eps|_std|range|rate|scale|factor|dropout|prob)$")


def _walk(cfg: Any, prefix: str = ""):
    if isinstance(cfg, dict):
        for k, v in cfg.items():
            if isinstance(k, str) and not k.startswith("_"):
                yield from _walk(v, f"{prefix}{k}.")
    elif isinstance(cfg, list) and cfg and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in cfg):
        for i, v in enumerate(cfg[:64]):
            yield f"{prefix[:-1]}[{i}]", v
    else:
        yield prefix[:-1], cfg


def check_config(cfg: dict, where: str) -> None:
    """Raise LimitError naming the first field that asks for absurd work."""
    for path, value in _walk(cfg):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        field = path.rsplit(".", 1)[-1].split("[")[0]
        if _NOT_SIZES.search(field):
            continue
        if _POSITIVE.match(field) and value <= 0 and not (field == "head_dim" and value == 0):  # head_dim 0: "derive it"
            raise LimitError(f"{where}: field {path} = {value!r} must be a positive size", path=where, field=path)
        if _LAYERS.search(field) and "[" not in path and isinstance(value, (int, float)) and value > MAX_LAYERS:
            raise LimitError(
                f"{where}: field {path} = {value!r} layers is beyond neurarch's limit of {MAX_LAYERS}",
                path=where,
                field=path,
            )
        if _BOUNDED.search(field) and value > MAX_DIM and "position" not in field and "length" not in field and "tokens" not in field:
            raise LimitError(
                f"{where}: field {path} = {value!r} is beyond neurarch's size limit of {MAX_DIM:,}", path=where, field=path
            )
        # Negative layer numbers are Python indices (vision_feature_layer = -2), and -1 is a
        # common "unset" sentinel (max_relative_positions = -1): neither asks for work.
        if _BOUNDED.search(field) and value < 0 and value != -1 and not _LAYER_INDEX.search(field):
            raise LimitError(f"{where}: field {path} = {value!r} is negative", path=where, field=path)


def check_option(name: str, value: int | None, upper: int) -> None:
    if value is None:
        return
    if value <= 0:
        raise LimitError(f"--{name.replace('_', '-')} must be positive, got {value}", field=name)
    if value > upper:
        raise LimitError(f"--{name.replace('_', '-')} = {value:,} is beyond neurarch's limit of {upper:,}", field=name)
