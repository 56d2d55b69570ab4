"""Local sources: a config.json file, or a model folder holding one."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError, SourceNotFoundError
from . import safetensors_header
from .base import ModelSource

MAX_CONFIG_BYTES = 20_000_000  # the largest real config.json files are ~100 kB


def read_config(path: Path) -> dict:
    """Parse a config.json with one clear error per way it can be wrong."""
    if not path.is_file():
        raise SourceNotFoundError(str(path), "no such file")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: {path.stat().st_size} bytes is too large for a config.json", path=str(path))
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text, not a config.json", path=str(path)) from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}", path=str(path)) from None
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
    name = cfg.get("_name_or_path")
    if isinstance(name, str) and name and not name.startswith(("/", ".")):
        src.notes.append(f"config names itself {name!r}")
    return src
