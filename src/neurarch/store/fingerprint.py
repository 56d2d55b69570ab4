"""What a cached report depends on besides its input: neurarch's own code and
the libraries that build and run the model.

The package version does not change between commits, so the fingerprint
hashes the installed package's files themselves (sources, the bundled catalog
and card tables, templates); a cached report made by other code is never
served.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata
from pathlib import Path

_LIBRARIES = ("torch", "transformers", "peft")
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


@functools.lru_cache(maxsize=1)
def library_versions() -> str:
    """``"torch 2.13.0; transformers 5.24.0; peft 0.18.0"``: the libraries a report depends on."""
    return "; ".join(f"{name} {_version(name)}" for name in _LIBRARIES)


def _package_files(root: Path):
    for path in sorted(root.rglob("*")):
        if path.is_dir() or path.suffix in _SKIP_SUFFIXES or _SKIP_DIRS.intersection(path.relative_to(root).parts):
            continue
        yield path


def tree_hash(root: Path, extra: str = "") -> str:
    """SHA-256 (hex) over every file under ``root`` (relative path and bytes), then ``extra``."""
    h = hashlib.sha256()
    for path in _package_files(root):
        rel = path.relative_to(root).as_posix().encode()
        data = path.read_bytes()
        h.update(len(rel).to_bytes(4, "big") + rel + len(data).to_bytes(8, "big") + data)
    h.update(extra.encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """:func:`tree_hash` of the installed ``neurarch`` package and
    :func:`library_versions`; computed once per process."""
    import neurarch

    return tree_hash(Path(neurarch.__file__).resolve().parent, library_versions())
