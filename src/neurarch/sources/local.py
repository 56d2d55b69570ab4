"""Local sources: a config.json file, or a model folder holding one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError, SourceNotFoundError
from ..limits import show
from . import safetensors_header, tokenizer
from .base import ModelSource

MAX_CONFIG_BYTES = 20_000_000  # the largest real config.json files are ~100 kB


def _no_duplicates(where: str):
    def pairs(items: list) -> dict:
        out: dict = {}
        for key, value in items:
            if key in out:
                # Python's json keeps the last, other parsers the first: the file is ambiguous.
                raise ConfigError(
                    f"{where}: key {show(key)} appears twice in one object; JSON readers disagree on which one wins",
                    path=where,
                    field=key,
                )
            out[key] = value
        return out

    return pairs


def parse_config(text: str, where: str) -> Any:
    """``json.loads`` that refuses duplicate keys and overly deep nesting with one line.

    NaN and Infinity parse (Python's json accepts them, and Mamba-2 configs hold
    ``Infinity``); :func:`neurarch.limits.check_config` then refuses NaN in any
    field and non-finite values in size fields.
    """
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates(where))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}", path=where) from None
    except RecursionError:
        raise ConfigError(f"{where}: the JSON nests too deeply to be a config.json", path=where) from None


def read_config(path: Path) -> dict:
    """Parse a config.json with one clear error per way it can be wrong."""
    if not path.is_file():
        raise SourceNotFoundError(str(path), "no such file")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: {path.stat().st_size} bytes is too large for a config.json", path=str(path))
    try:
        cfg = parse_config(path.read_text(encoding="utf-8"), str(path))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text, not a config.json", path=str(path)) from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: a config.json must hold a JSON object, not {type(cfg).__name__}", path=str(path))
    return cfg


def load(path: Path) -> ModelSource:
    path = path.expanduser()
    if path.is_dir():
        folder = path
        cfg_path = path / "config.json"
        if not cfg_path.is_file():
            raise SourceNotFoundError(str(path), "the folder holds no config.json")
    else:
        folder = path.parent
        cfg_path = path
    cfg = read_config(cfg_path)
    src = ModelSource(id=str(path), kind="local", provenance=f"local file {cfg_path}", config=cfg)
    if path.is_dir():
        src.checkpoint = safetensors_header.read_folder(folder)
        src.tokenizer = tokenizer.read_folder(folder)
    name = cfg.get("_name_or_path")
    if isinstance(name, str) and name and not name.startswith(("/", ".")):
        src.notes.append(f"config names itself {name!r}")
    return src
