"""Read the scalar count of a safetensors checkpoint from its headers only.

A ``.safetensors`` file starts with an 8-byte little-endian header length and
a JSON header mapping tensor names to ``{"dtype", "shape", "data_offsets"}``.
We read those bytes and nothing after them: no tensor data is touched.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from ..errors import ConfigError
from ..limits import show
from .base import CheckpointInfo

# A header over this size is not a real checkpoint header (the largest real
# ones are a few MB); refuse instead of reading a huge file into memory.
MAX_HEADER_BYTES = 100_000_000

COUNTER_SUFFIXES = ("num_batches_tracked",)


def parse_header(raw: bytes, where: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Parse a header JSON blob into name -> (dtype, shape)."""
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ConfigError(f"{where}: not a safetensors header ({type(e).__name__})", path=where) from None
    if not isinstance(header, dict):
        raise ConfigError(f"{where}: safetensors header is not a JSON object", path=where)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            shape = tuple(int(d) for d in info["shape"])
            if any(d < 0 for d in shape):
                raise ValueError("negative dimension")
            out[name] = (str(info["dtype"]), shape)
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{where}: bad entry {show(name)} in safetensors header", path=where) from None
    return out


def read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ConfigError(f"{path}: too short to be a safetensors file", path=str(path))
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES:
            raise ConfigError(f"{path}: safetensors header length {n} is implausible", path=str(path))
        raw = f.read(n)
    if len(raw) != n:
        raise ConfigError(f"{path}: truncated safetensors header", path=str(path))
    return parse_header(raw, str(path))


def summarize(tensors: dict[str, tuple[str, tuple[int, ...]]], source: str) -> CheckpointInfo:
    """Count scalars, keeping step counters apart (see CheckpointInfo)."""
    scalars = counters = 0
    dtypes: dict[str, int] = {}
    shapes = {}
    for name, (dtype, shape) in tensors.items():
        n = math.prod(shape)
        shapes[name] = shape
        if name.endswith(COUNTER_SUFFIXES):
            counters += n
            continue
        scalars += n
        dtypes[dtype] = dtypes.get(dtype, 0) + n
    return CheckpointInfo(scalars=scalars, counters=counters, source=source, tensors=shapes, dtypes=dtypes)


def read_folder(folder: Path) -> CheckpointInfo | None:
    """Scalar count of the safetensors checkpoint in a folder, or None if there is none.

    Uses ``model.safetensors.index.json`` to find the shards when present
    (and checks every shard it names exists); otherwise every ``*.safetensors``.
    """
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError, TypeError, RecursionError) as e:  # bad JSON, not UTF-8, no weight_map
            raise ConfigError(f"{index}: not a safetensors index ({type(e).__name__})", path=str(index)) from None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ConfigError(f"{index}: weight_map must map tensor names to shard file names", path=str(index))
        shards = sorted(set(weight_map.values()))
        outside = [s for s in shards if Path(s).name != s or s in ("", ".", "..")]
        if outside:  # a shard is a file in this folder, never a path elsewhere
            raise ConfigError(f"{index}: names a shard outside the folder: {outside[0][:80]!r}", path=str(index))
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            raise ConfigError(f"{index}: names shard(s) not in the folder: {', '.join(missing)}", path=str(index))
        files = [folder / s for s in shards]
    else:
        files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    for f in files:
        tensors.update(read_header(f))
    names = ", ".join(f.name for f in files[:3]) + (" ..." if len(files) > 3 else "")
    return summarize(tensors, f"safetensors headers in {folder} ({names})")
