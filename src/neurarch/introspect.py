"""Reading a built model and its config: the one place every stage asks.

* the config: :func:`config_get` (the first of several names that is set),
  :func:`sub_config`, :func:`config_find` (the config, then its sub-configs:
  :data:`SUBCONFIGS` first, then any other), :func:`sub_configs` (the config
  and each of :data:`SUBCONFIGS`, labelled);
* what the config says about text: :func:`max_positions`, :func:`special_ids`,
  :func:`vocab_size`;
* the module: :func:`forward_params` (its ``forward`` signature),
  :func:`required_params`, :func:`parameters` of any callable.

It reads attributes only: nothing here builds, traces or plans, and it imports
no stage of the pipeline (only :mod:`neurarch.limits`, for the sequence bound).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from torch import nn
else:  # annotations only; listing the rules must not import torch
    from ._lazy import nn

from . import limits

# Sub-configs of composite models, in the order they are searched: the text model
# first (most fields asked for are the language model's), then the towers.
SUBCONFIGS = ("text_config", "vision_config", "audio_config", "encoder_config", "decoder_config", "encoder", "decoder", "backbone_config")


def config_get(cfg: Any, *names: str, default: Any = None) -> Any:
    """The first of ``names`` set (not None) on ``cfg`` itself, else ``default``."""
    for n in names:
        v = getattr(cfg, n, None)
        if v is not None:
            return v
    return default


def sub_config(cfg: Any, *names: str) -> Any:
    """The first of ``names`` that is a nested config (has ``to_dict``), else None."""
    for n in names:
        v = getattr(cfg, n, None)
        if v is not None and hasattr(v, "to_dict"):
            return v
    return None


def config_find(cfg: Any, *names: str, subs: tuple[str, ...] = SUBCONFIGS, default: Any = None) -> Any:
    """The first of ``names`` set on the config, else on its sub-configs (``subs`` first, then any other)."""
    v = config_get(cfg, *names)
    if v is not None:
        return v
    for s in subs:
        sc = sub_config(cfg, s)
        if sc is not None:
            v = config_get(sc, *names)
            if v is not None:
                return v
    for sc in vars(cfg).values():  # then any other sub-config (asr_config, speech_config, ...)
        if hasattr(sc, "to_dict") and sc is not cfg:
            v = config_get(sc, *names)
            if v is not None:
                return v
    return default


def sub_configs(cfg: Any) -> Iterator[tuple[str, Any]]:
    """The config and each of its :data:`SUBCONFIGS`, with a label (``""``, ``"text_config."``, ...)."""
    if cfg is None:
        return
    yield "", cfg
    for key in SUBCONFIGS:
        sub = getattr(cfg, key, None)
        if sub is not None and hasattr(sub, "to_dict") and sub is not cfg:
            yield f"{key}.", sub


def nested_configs(cfg: Any) -> Iterator[tuple[str, Any]]:
    """The config and every config nested in it one level down (:data:`SUBCONFIGS` first, then any
    other: ``asr_config``, ``qformer_config`` ...), labelled like :func:`sub_configs`."""
    seen = set()
    for label, c in sub_configs(cfg):
        seen.add(id(c))
        yield label, c
    if cfg is None:
        return
    for key, c in vars(cfg).items():
        if hasattr(c, "to_dict") and id(c) not in seen:
            seen.add(id(c))
            yield f"{key}.", c


def _size(v: Any, combine: Callable[[list[int]], int]) -> int | None:
    """A positive int, or ``combine`` of a list of them (per-stage sizes); else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v > 0 else None
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        return combine(list(v))
    return None


def config_max(cfg: Any, *names: str, combine: Callable[[list[int]], int] = max) -> tuple[int, str]:
    """The largest of ``names`` over the config and its nested configs, and where it was found
    (``"text_config.vocab_size"``); ``(0, "")`` when none is set.  A list (per-stage sizes) counts
    as ``combine`` of its items: ``max`` for widths, ``sum`` for per-stage layer counts."""
    best = (0, "")
    for label, c in nested_configs(cfg):
        for n in names:
            v = _size(getattr(c, n, None), combine)
            if v is not None and v > best[0]:
                best = (v, f"{label}{n}")
    return best


def as_int(v: Any, default: int | None = None) -> int | None:
    """``v`` as an int (the first item of a list), else ``default``."""
    if isinstance(v, (list, tuple)) and v:
        v = v[0]
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def max_positions(cfg: Any) -> int | None:
    """The positions a text model can take (``max_position_embeddings`` and kin), or None if it names none."""
    v = config_get(cfg, "max_position_embeddings", "n_positions", "max_positions", "n_ctx", "max_seq_len", "seq_length", "max_sequence_length")
    try:
        v = int(v)
    except (TypeError, ValueError):
        return None
    # Some configs use a sentinel (1e30 ...) for "no limit".
    if not 0 < v < limits.MAX_SEQ_LEN:
        return None
    # Models that also predict the next n tokens (ProphetNet's ngram streams) use positions past the text.
    ngram = as_int(config_get(cfg, "ngram"), 0) or 0
    return v - ngram if 0 < ngram < v else v


def special_ids(cfg: Any) -> tuple[int, ...]:
    """Every token id the config (and its sub-configs) names: pad, bos, eos, image, ..."""
    found: set[int] = set()

    def walk(c: Any, depth: int) -> None:
        if depth > 3 or c is None:
            return
        d = c.to_dict() if hasattr(c, "to_dict") else c
        if not isinstance(d, dict):
            return
        for k, v in d.items():
            if not isinstance(k, str):
                continue
            if isinstance(v, dict):
                walk(v, depth + 1)
            elif k.endswith(("_token_id", "_token_index", "_token_ids", "_id", "_index")) and "layer" not in k:
                vals = v if isinstance(v, (list, tuple)) else [v]
                found.update(x for x in vals if isinstance(x, int) and not isinstance(x, bool) and x >= 0)

    walk(cfg, 0)
    return tuple(sorted(found))


def vocab_size(cfg: Any, default: int = 1000) -> int:
    """The config's vocabulary (``vocab_size``, ``n_vocab``, ``num_tokens``), else ``default``."""
    return as_int(config_get(cfg, "vocab_size", "n_vocab", "num_tokens"), default) or default


def parameters(fn: Callable) -> dict[str, inspect.Parameter]:
    """A callable's parameters by name, in order; empty when Python cannot tell (builtins, C functions)."""
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def forward_params(model: nn.Module) -> dict[str, inspect.Parameter]:
    """The parameters of ``model.forward`` by name, in order (``self`` is not among them)."""
    return parameters(model.forward)


def required_params(params: dict[str, inspect.Parameter]) -> list[str]:
    """The names in ``params`` a call must pass: no default, not ``*args``/``**kwargs``."""
    return [n for n, p in params.items() if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != "self"]
