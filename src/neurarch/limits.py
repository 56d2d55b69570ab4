"""Bounds on the work a config or an option may ask for, and the shape of a valid config.

A config is data from the internet; a typo (``"num_hidden_layers": 1e9``, ``0``,
``"12"``) must give one clear line naming the field, not a hang, an
out-of-memory kill, a traceback or a model with no layers reported as fine.
Each bound is far above any published model (the largest have ~130 layers,
~1M vocab, ~200k hidden) yet low enough that building the graph stays cheap.

:func:`check_config` runs on every config before anything is built (the
sources call it, and the build calls it again on the dict it builds from).
What it refuses, field by field, is listed in ``docs/reliability.md``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterator, NoReturn

from .errors import LimitError

MAX_LAYERS = 512  # per layer-count field: 4x the deepest published model (Llama-3.1-405B: 126); tracing ~2,000 layers takes minutes
MAX_EXPERTS = 1 << 16  # per expert-count field: 4x the most in a transformers default (Doge: 16,384 expert embeddings)
MAX_DIM = 1 << 21  # 2,097,152: any width, vocabulary or positional size
MAX_PARAMETERS = 10**13  # 10 T scalars after the meta build
MAX_BATCH = 1 << 20
MAX_SEQ_LEN = 1 << 22  # 4 M tokens
MAX_IMAGE = 1 << 14  # 16,384 px per side
MAX_INPUT_ELEMENTS = 1 << 34  # elements in one input tensor
# The activations the requested input asks for (checked before the trace, :func:`check_work`), in fp32:
MAX_ACTIVATION_BYTES = 1 << 50  # 1 PiB in one activation tensor: ~4,000x the largest card (288 GB); 2^13 below int64 bytes
MAX_STEP_ACTIVATION_BYTES = 1 << 56  # 64 PiB: every layer's hidden states of one step
MAX_POSITIONS = 1 << 40  # advertised context (10M-token configs exist); learned position tables still meet MAX_PARAMETERS
MAX_NESTING = 32  # dicts/lists inside each other; real configs nest 3-4 deep
MAX_NAME = 256  # characters in a model_type or an architecture name

# Structural sizes: when present and not null they must be positive integers
# (a list of them for per-stage sizes such as Swin's depths).  Every one of
# these is > 0 in all of transformers' default configs and in the catalog.
# Deliberately absent, because 0 means "off" or "none" in real configs:
# sliding_window, num_experts / n_routed_experts / num_experts_per_tok (dense
# configs), first_k_dense_replace, num_nextn_predict_layers, num_kv_shared_layers,
# projection_dim (DPR: no projection), type_vocab_size (DeBERTa: no token types),
# window_size (ViTDet: no windowing), shared_intermediate_size, num_register_tokens.
STRUCTURAL = frozenset(
    {
        # layers
        "num_hidden_layers",
        "num_layers",
        "n_layer",
        "n_layers",
        "encoder_layers",
        "decoder_layers",
        "num_encoder_layers",
        "num_decoder_layers",
        "depth",
        "depths",
        # attention heads
        "num_attention_heads",
        "n_head",
        "n_heads",
        "num_heads",
        "encoder_attention_heads",
        "decoder_attention_heads",
        "num_key_value_heads",
        "num_kv_heads",
        # widths
        "hidden_size",
        "d_model",
        "n_embd",
        "embed_dim",
        "dim",
        "hidden_dim",
        "intermediate_size",
        "d_ff",
        "d_kv",
        "n_inner",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "ffn_dim",
        "head_dim",
        "moe_intermediate_size",
        "hidden_sizes",
        "embedding_size",
        # vocabulary and positions
        "vocab_size",
        "max_position_embeddings",
        "n_positions",
        "n_ctx",
        # images
        "image_size",
        "patch_size",
        "num_channels",
        # experts where 0 is not "off": Mixtral-style blocks always route over them
        "num_local_experts",
    }
)
_LAYER_FIELDS = {"num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers", "num_encoder_layers", "num_decoder_layers", "depth", "depths"}
_POSITION_FIELDS = {"max_position_embeddings", "n_positions", "n_ctx"}  # advertised context: not work by itself
_ZERO_MEANS_DERIVE = {"head_dim"}  # head_dim 0 (GLM-5 defaults): "hidden_size / heads"
_FLOAT_OK = {"max_position_embeddings"}  # 1200.0 in a transformers default (MusicFlamingo)
_SKIP = {"id2label", "label2id", "task_specific_params"}  # user labels and pipeline settings, not sizes

_LAYERS = re.compile(r"(^|_)(layers?|n_layer|num_hidden_layers|depths?|num_blocks|blocks)$|^n_layer$|_layers$")
# num_labels too: transformers builds an id2label dict of that many entries (10**30 never returns).
_BOUNDED = re.compile(r"(size|dim|_ff|heads|layers?|embd|positions|channels|experts|length|tokens|labels)s?$")
_LAYER_INDEX = re.compile(r"(^|_)layers?$")
_NOT_SIZES = re.compile(r"(token_id|_id|_ids|rope_theta|epsilon|eps|_std|range|rate|scale|factor|dropout|prob)$")


def show(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to one short line (a fuzzed string can be megabytes)."""
    text = repr(value)
    if isinstance(value, float) and math.isnan(value):
        text = "NaN"
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _walk(cfg: Any, where: str, prefix: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(dotted path, value) for every leaf, lists' items as ``name[i]`` (the first 64)."""
    if depth > MAX_NESTING:
        raise LimitError(
            f"{where}: field {prefix[:-1] or '(top)'} nests deeper than {MAX_NESTING} levels; no model config does",
            path=where,
            field=prefix[:-1] or None,
        )
    if isinstance(cfg, dict):
        for k, v in cfg.items():
            if isinstance(k, str) and not k.startswith("_") and k not in _SKIP:
                yield from _walk(v, where, f"{prefix}{k}.", depth + 1)
    elif isinstance(cfg, list):
        yield prefix[:-1], cfg  # the list itself (a structural field must not be an empty list)
        for i, v in enumerate(cfg[:64]):
            yield from _walk(v, where, f"{prefix[:-1]}[{i}].", depth + 1)
    else:
        yield prefix[:-1], cfg


def _field(path: str) -> str:
    return path.rsplit(".", 1)[-1].split("[")[0]


def _check_structural(path: str, value: Any, where: str) -> None:
    field = _field(path)

    def bad(why: str) -> NoReturn:
        raise LimitError(f"{where}: field {path} = {show(value)} {why}", path=where, field=path)

    if value is None:
        return
    if isinstance(value, list):
        if not value and "[" not in path:
            bad("must be a positive size or a list of them, not an empty list")
        return  # the items are checked one by one
    if isinstance(value, dict):
        return  # {"height": .., "width": ..}: its keys are checked as fields of their own
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        bad(f"must be a positive integer, not {'a boolean' if isinstance(value, bool) else type(value).__name__}")
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            bad("must be a positive integer")
        if not value.is_integer() or field not in _FLOAT_OK:
            bad("must be an integer, not a float")
    if value < 0 or (value == 0 and field not in _ZERO_MEANS_DERIVE):
        bad("must be a positive size" if value < 0 else "must be a positive size (0 would build a model without it)")
    upper = MAX_LAYERS if field in _LAYER_FIELDS else MAX_POSITIONS if field in _POSITION_FIELDS else MAX_DIM
    if value > upper:
        bad(f"is beyond neurarch's {'layer' if upper == MAX_LAYERS else 'size'} limit of {upper:,}")


def check_names(cfg: dict[str, Any], where: str) -> None:
    """``model_type`` a short string, ``architectures`` a list of short strings (or absent/null)."""
    mt = cfg.get("model_type")
    if mt is not None and (not isinstance(mt, str) or len(mt) > MAX_NAME):
        why = f"a string of at most {MAX_NAME} characters" if isinstance(mt, str) else f"a string, not {type(mt).__name__}"
        raise LimitError(f"{where}: field model_type = {show(mt)} must be {why}", path=where, field="model_type")
    archs = cfg.get("architectures")
    if archs is None:
        return
    if not isinstance(archs, list):
        raise LimitError(
            f"{where}: field architectures = {show(archs)} must be a list of class names, not {type(archs).__name__}",
            path=where,
            field="architectures",
        )
    for i, a in enumerate(archs):
        if not isinstance(a, str) or not a or len(a) > MAX_NAME:
            raise LimitError(
                f"{where}: field architectures[{i}] = {show(a)} must be a class name (a non-empty string of at most {MAX_NAME} characters)",
                path=where,
                field=f"architectures[{i}]",
            )


def check_config(cfg: dict[str, Any], where: str) -> None:
    """Raise LimitError naming the first field that is malformed or asks for absurd work."""
    if not isinstance(cfg, dict):
        raise LimitError(f"{where}: a config must be a JSON object, not {type(cfg).__name__}", path=where)
    check_names(cfg, where)
    for path, value in _walk(cfg, where):
        if not path:
            continue
        field = _field(path)
        if field in STRUCTURAL:
            _check_structural(path, value, where)
        if isinstance(value, float) and math.isnan(value):
            raise LimitError(f"{where}: field {path} is NaN, which is not a valid value for any config field", path=where, field=path)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or isinstance(value, float) and math.isinf(value) and not _BOUNDED.search(field):
            continue  # Infinity is a real value in some fields (Mamba-2's time_step_limit = [0.0, inf])
        if _NOT_SIZES.search(field):
            continue
        if _LAYERS.search(field) and "[" not in path and value > MAX_LAYERS:
            raise LimitError(
                f"{where}: field {path} = {show(value)} layers is beyond neurarch's limit of {MAX_LAYERS}",
                path=where,
                field=path,
            )
        if field.endswith("experts") and value > MAX_EXPERTS:
            raise LimitError(
                f"{where}: field {path} = {show(value)} experts is beyond neurarch's limit of {MAX_EXPERTS:,}",
                path=where,
                field=path,
            )
        if _BOUNDED.search(field) and value > MAX_DIM and "position" not in field and "length" not in field and "tokens" not in field:
            raise LimitError(f"{where}: field {path} = {show(value)} is beyond neurarch's size limit of {MAX_DIM:,}", path=where, field=path)
        # Negative layer numbers are Python indices (vision_feature_layer = -2), and -1 is a
        # common "unset" sentinel (max_relative_positions = -1): neither asks for work.
        if _BOUNDED.search(field) and value < 0 and value != -1 and not _LAYER_INDEX.search(field):
            raise LimitError(f"{where}: field {path} = {show(value)} is negative", path=where, field=path)
    check_parameters(cfg, where)


def _int(d: dict[str, Any], *names: str) -> tuple[str | None, int]:
    for n in names:
        v = d.get(n)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return n, v
    return None, 0


def estimate_parameters(cfg: dict[str, Any]) -> tuple[int, list[str]]:
    """A rough upper estimate of a transformer config's parameters, before anything is built.

    Per (sub-)config: ``layers x (4 h^2 + 3 h i x experts) + 2 vocab x h``
    (attention as if unshared, a gated MLP per expert, untied embeddings), so
    it overcounts (GQA, dense layers in MoE stacks, tied embeddings) and never
    refuses a real model when compared with a bound 4x above ``MAX_PARAMETERS``.
    Returns the estimate and the fields it was made from.
    """
    total, used = 0, []
    for d in [cfg, *(v for v in cfg.values() if isinstance(v, dict))]:
        hn, h = _int(d, "hidden_size", "n_embd", "d_model", "dim")
        if not h:
            continue
        ln, layers = _int(d, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
        en, experts = _int(d, "num_local_experts", "n_routed_experts", "num_experts")
        iname, inter = _int(d, "moe_intermediate_size") if experts else (None, 0)
        if not inter:
            iname, inter = _int(d, "intermediate_size", "n_inner", "d_ff", "ffn_dim")
        vn, vocab = _int(d, "vocab_size")
        total += (layers or 1) * (4 * h * h + 3 * h * (inter or 4 * h) * max(experts, 1)) + 2 * vocab * h
        used += [n for n in (hn, ln, en, iname, vn) if n]
    return total, used


def _sci(n: int) -> str:
    """``n`` as ``4.4e+16``, for any size of int (float() overflows past 1e308)."""
    digits = len(str(n)) - 1
    return f"{n / 10**digits:.1f}e+{digits:02d}" if digits < 300 else f"1e+{digits}"


def check_parameters(cfg: dict[str, Any], where: str) -> None:
    n, fields = estimate_parameters(cfg)
    if n > 4 * MAX_PARAMETERS:
        raise LimitError(
            f"{where}: fields {', '.join(dict.fromkeys(fields))} ask for about {_sci(n)} parameters, beyond neurarch's limit of {MAX_PARAMETERS:.0e}",
            path=where,
            field=fields[0] if fields else None,
        )


def check_option(name: str, value: int | None, upper: int) -> None:
    if value is None:
        return
    if value <= 0:
        raise LimitError(f"--{name.replace('_', '-')} must be positive, got {value}", field=name)
    if value > upper:
        raise LimitError(f"--{name.replace('_', '-')} = {value:,} is beyond neurarch's limit of {upper:,}", field=name)


# --------------------------------------------------------------------------
# The work the requested input asks for (before the trace)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Stream:
    """One input stream of the plan: ``batch`` samples of ``positions`` each (tokens, patches, pixels, frames)."""

    name: str
    batch: int
    positions: int  # per sample
    unit: str = "positions"  # what a position is, for the message: "tokens", "patches", "pixels" ...


@dataclass(frozen=True)
class Work:
    """What one step's activations are made of, read from the input plan and the config.

    ``width`` is the widest layer output the config names (hidden, intermediate or
    vocabulary: the logits), ``hidden`` the residual width, ``layers`` the deepest
    layer count, ``heads`` the attention heads when attention materialises its
    scores (eager), else None; the scores are counted over tokens, patches and
    frames, not over a stream counted in raw pixels or samples (a convolutional
    stem shrinks those before any attention).  ``*_field`` names the config field each came from.
    ``asked`` names the options that set the input (``--batch 8``), empty for the
    model's default input.
    """

    streams: tuple[Stream, ...]
    asked: tuple[str, ...] = ()
    width: int = 0
    width_field: str = ""
    hidden: int = 0
    hidden_field: str = ""
    layers: int = 0
    layers_field: str = ""
    heads: int | None = None
    heads_field: str = ""

    @property
    def what(self) -> str:
        """The input in a user's words: the options that set it, or "the model's default input"."""
        if self.asked:
            return " and ".join(self.asked)
        s = ", ".join(f"{st.batch:,} x {st.positions:,} {st.unit}" for st in self.streams)
        return f"the model's default input ({s})"

    @property
    def verb(self) -> str:
        return "ask" if len(self.asked) > 1 else "asks"

    def largest(self) -> tuple[int, str, str]:
        """(bytes, what it is, the field to blame) of the largest single activation, in fp32."""
        best = (0, "", "")
        for st in self.streams:
            n = st.batch * st.positions
            if self.width:
                cand = (4 * n * self.width, f"{st.name}: {st.batch:,} x {st.positions:,} {st.unit} x {self.width:,} ({self.width_field})", self.width_field)
                best = max(best, cand)
            if self.heads and st.unit not in ("pixels", "samples"):  # attention runs over tokens, patches, frames; never raw pixels
                cand = (
                    4 * st.batch * self.heads * st.positions**2,
                    f"{st.name}'s attention scores: {st.batch:,} x {self.heads:,} heads ({self.heads_field}) x {st.positions:,}^2 {st.unit} (eager attention)",
                    self.heads_field,
                )
                best = max(best, cand)
        return best

    def step_bytes(self) -> int:
        """Every layer's hidden states, in fp32: positions x hidden x layers x 4 bytes."""
        return 4 * sum(st.batch * st.positions for st in self.streams) * self.hidden * max(self.layers, 1)


def _pib(n: int) -> str:
    return f"{n / (1 << 50):,.0f} PiB" if n >= 1 << 50 else f"{n / (1 << 40):,.0f} TiB"


def check_work(work: Work) -> None:
    """Refuse an input whose activations are absurd: one tensor past :data:`MAX_ACTIVATION_BYTES`,
    or a step's hidden states past :data:`MAX_STEP_ACTIVATION_BYTES` (both counted in fp32).

    Only the work asked for counts: a model that advertises 10M positions is fine
    at the default input; the same model asked for ``--seq-len 4194304 --batch 4096``
    is not.  The message names the options (or, for a default input, the fields)
    and the bound.
    """
    blame = work.asked[0].split()[0].lstrip("-").replace("-", "_") if work.asked else None
    n, what, field = work.largest()
    if n > MAX_ACTIVATION_BYTES:
        raise LimitError(
            f"{work.what} {work.verb} for an activation of {_sci(n)} bytes ({what}, fp32), beyond neurarch's limit of {_pib(MAX_ACTIVATION_BYTES)} for one tensor; ask for a smaller input",
            field=blame or field or None,
        )
    total = work.step_bytes()
    if total > MAX_STEP_ACTIVATION_BYTES:
        positions = sum(st.batch * st.positions for st in work.streams)
        raise LimitError(
            f"{work.what} {work.verb} for {_sci(total)} bytes of hidden states per step ({positions:,} positions x "
            f"{work.hidden:,} ({work.hidden_field}) x {work.layers:,} layers ({work.layers_field}), fp32), beyond neurarch's "
            f"limit of {_pib(MAX_STEP_ACTIVATION_BYTES)}; ask for a smaller input",
            field=blame or work.hidden_field or None,
        )
