"""The simulation cache on disk: a second plan of the same model simulates nothing.

A memory simulation (one mode at one batch) and the cost's op count depend
only on the model's structure and config, the inputs, the options that reach
the simulation (precision, optimizer, LoRA rank ...) and the code that runs
it.  Each result is stored as a small JSON file under

    $NEURARCH_CACHE_DIR/sims/   (default ~/.cache/neurarch/sims)

named by the SHA-256 of all of that:

* the model's fingerprint (:func:`model_fingerprint`): its class, its config
  (every field, and the attention implementation it was built with), every
  module's class, every parameter's and buffer's name, shape, dtype and
  ``requires_grad``, which parameters are tied, the values of the small real
  tensors the builder keeps, and the source of any module class that does not
  come from a versioned library (a ``python:FILE.py`` model, remote code);
* the inputs (every tensor's shape, dtype, token runs and values) and every
  keyword that changes the simulation;
* the code fingerprint (:func:`code_fingerprint`): the hash of every source
  file of the neurarch package (not its version number), and the versions of
  torch, transformers, peft, bitsandbytes, timm and torchvision.

Options that only read the simulations (cards, headroom, prices, epochs, the
headline card) are not in the key, so changing them re-simulates nothing.

A file that cannot be read, does not parse or does not carry its own key is
ignored and recomputed, never an error.  The directory is kept under a size
cap (``NEURARCH_CACHE_MAX_MB``, default 512): the least recently used files
go first.  ``NEURARCH_NO_CACHE=1`` (or ``--no-cache``) turns it off.

The same files hold the report cache (:mod:`neurarch.warm`, folder
``reports``): everything here but :func:`model_fingerprint` and :func:`key`
runs without torch, which those two import when they are called.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import weakref
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # torch is imported where a model is fingerprinted: the rest of this module runs without it
    import torch
    from torch import nn

KEY_VERSION = 1
DEFAULT_MAX_MB = 512
LIBRARIES = ("torch", "transformers", "peft", "bitsandbytes", "timm", "torchvision")

# What this process read and wrote (tests and benchmarks read it).
STATS = {"hits": 0, "misses": 0, "stores": 0, "ignored": 0}
REPORT_STATS = {"hits": 0, "misses": 0, "stores": 0, "ignored": 0}  # the report cache's (neurarch.warm)


def _stats(kind: str) -> dict:
    return STATS if kind == "sims" else REPORT_STATS


def enabled() -> bool:
    """Whether results may be read and written (``NEURARCH_NO_CACHE=1`` turns it off)."""
    return os.environ.get("NEURARCH_NO_CACHE", "").strip().lower() not in ("1", "true", "yes", "on")


def directory(kind: str = "sims") -> Path:
    """``$NEURARCH_CACHE_DIR/<kind>`` (default ``~/.cache/neurarch/<kind>``): ``sims`` for the
    simulations, ``reports`` for the report cache (:mod:`neurarch.warm`)."""
    root = os.environ.get("NEURARCH_CACHE_DIR", "").strip()
    return Path(root).expanduser() / kind if root else Path.home() / ".cache" / "neurarch" / kind


def max_bytes() -> int:
    raw = os.environ.get("NEURARCH_CACHE_MAX_MB", "").strip()
    try:
        mb = float(raw) if raw else DEFAULT_MAX_MB
    except ValueError:
        mb = DEFAULT_MAX_MB
    return int(max(mb, 0) * 2**20)


# --------------------------------------------------------------------------
# Fingerprints
# --------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _package_hash() -> str:
    root = Path(__file__).resolve().parents[1]  # the neurarch package
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


@lru_cache(maxsize=1)
def library_versions() -> tuple[tuple[str, str], ...]:
    from importlib import metadata

    out = []
    for name in LIBRARIES:
        try:
            out.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            out.append((name, "absent"))
    return tuple(out)


def code_fingerprint() -> str:
    """The neurarch source files' hash and the libraries' versions: what the simulator runs."""
    return hashlib.sha256(json.dumps([_package_hash(), library_versions()]).encode()).hexdigest()


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    import importlib.util

    roots: list[str] = []
    for name in LIBRARIES:
        spec = importlib.util.find_spec(name) if name not in ("peft", "bitsandbytes") else None  # never import those here
        if spec is not None and spec.submodule_search_locations:
            roots.extend(str(Path(p).resolve()) for p in spec.submodule_search_locations)
    return tuple(roots)


def _class_source(cls: type) -> str | None:
    """The hash of the file a module class is defined in, unless a versioned library holds it."""
    import inspect
    import sys

    mod = sys.modules.get(cls.__module__)
    path = getattr(mod, "__file__", None) if mod is not None else None
    if not path:
        try:
            path = inspect.getsourcefile(cls)
        except (TypeError, OSError):
            path = None
    if not path:
        return f"{cls.__module__}.{cls.__qualname__}:no-source"
    real = str(Path(path).resolve())
    if real.startswith(_library_roots()):
        return None
    try:
        return hashlib.sha256(Path(real).read_bytes()).hexdigest()
    except OSError:
        return f"{real}:unreadable"


def _tensor_entry(name: str, t: torch.Tensor) -> list:
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    entry = [name, list(t.shape), str(t.dtype), bool(getattr(t, "requires_grad", False))]
    # Meta and fake tensors have no values (the same model before and after the trace moves it to fake ones).
    if t.device.type == "cpu" and not isinstance(t, FakeTensor) and t.numel() <= 1 << 20:
        try:  # a small real tensor the model code may read (the builder keeps some real)
            entry.append(hashlib.sha256(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest())
        except Exception:  # noqa: BLE001 - an exotic dtype: its shape and dtype still key it
            entry.append("unhashable")
    return entry


def _config_text(config: Any) -> str:
    if config is None:
        return "null"
    try:
        text = config.to_json_string(use_diff=False)
    except Exception:  # noqa: BLE001 - not a transformers config: its repr
        text = repr(config)
    return text + "|attn=" + repr(getattr(config, "_attn_implementation", None))


_MODEL_PRINTS: "weakref.WeakKeyDictionary[nn.Module, str]" = weakref.WeakKeyDictionary()


def model_fingerprint(model: nn.Module, config: Any = None) -> str:
    """What identifies a built model for the simulator (see the module docstring); once per model object."""
    import torch
    from torch import nn

    cached = _MODEL_PRINTS.get(model)
    if cached is not None:
        return cached
    h = hashlib.sha256()

    def add(x) -> None:
        h.update(json.dumps(x, default=str).encode())
        h.update(b"\n")

    add([type(model).__module__, type(model).__qualname__, _config_text(config)])
    sources: dict[str, str | None] = {}
    for name, mod in model.named_modules():
        cls = type(mod)
        qual = f"{cls.__module__}.{cls.__qualname__}"
        if qual not in sources:
            sources[qual] = _class_source(cls)
        add(["module", name, qual, bool(mod.training)])
    add(["sources", sorted((k, v) for k, v in sources.items() if v is not None)])
    seen: dict[int, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        add(["param", *_tensor_entry(name, p), seen.setdefault(id(p), name)])
    for name, b in model.named_buffers(remove_duplicate=False):
        add(["buffer", *_tensor_entry(name, b), seen.setdefault(id(b), name)])
    for mname, mod in model.named_modules():  # plain tensor attributes (the builder's small real tensors)
        for k, v in sorted(vars(mod).items()):
            if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter):
                add(["attr", *_tensor_entry(f"{mname}.{k}", v)])
    out = h.hexdigest()
    _MODEL_PRINTS[model] = out
    return out


def key(kind: str, model: nn.Module, config: Any, *parts: Any) -> str:
    """The file name of one result: its kind, the model, the code, and ``parts`` (inputs, options)."""
    text = json.dumps([KEY_VERSION, kind, code_fingerprint(), model_fingerprint(model, config), [repr(p) for p in parts]])
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------


def load(k: str, kind: str = "sims") -> Any | None:
    """The stored value under key ``k`` in the ``kind`` folder, or None (absent, unreadable, corrupt, or off)."""
    if not enabled():
        return None
    stats = _stats(kind)
    path = directory(kind) / k[:2] / f"{k}.json"
    try:
        entry = json.loads(path.read_text())
        if not isinstance(entry, dict) or entry.get("key") != k or "value" not in entry:
            raise ValueError("not this key's entry")
    except FileNotFoundError:
        stats["misses"] += 1
        return None
    except Exception:  # noqa: BLE001 - a corrupt file is recomputed, never an error
        stats["ignored"] += 1
        stats["misses"] += 1
        with _quiet():
            path.unlink()
        return None
    with _quiet():
        os.utime(path)  # least recently used goes first
    stats["hits"] += 1
    return entry["value"]


def store(k: str, value: Any, kind: str = "sims") -> None:
    """Write ``value`` (JSON) under key ``k`` in the ``kind`` folder, atomically; then keep that folder under the cap."""
    if not enabled():
        return
    stats = _stats(kind)
    folder = directory(kind) / k[:2]
    with _quiet():
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps({"key": k, "value": value}, separators=(",", ":")))  # dumps: the C encoder (dump's is Python's, about 4x slower)
            os.replace(tmp, folder / f"{k}.json")
            stats["stores"] += 1
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        evict(max_bytes(), kind)


def evict(cap: int, kind: str = "sims") -> int:
    """Remove the least recently used files until the ``kind`` folder holds at most ``cap`` bytes; returns how many went."""
    files = []
    total = 0
    for path in directory(kind).glob("*/*.json"):
        with _quiet():
            st = path.stat()
            files.append((st.st_mtime, st.st_size, path))
            total += st.st_size
    gone = 0
    for _, size, path in sorted(files, key=lambda x: x[0]):
        if total <= cap:
            break
        with _quiet():
            path.unlink()
            gone += 1
        total -= size
    return gone


def cached(k: str | None, compute: Callable[[], Any], encode: Callable[[Any], Any], decode: Callable[[Any], Any]) -> Any:
    """``compute()``, or the stored result under ``k`` (None: no cache)."""
    if k is not None:
        raw = load(k)
        if raw is not None:
            try:
                return decode(raw)
            except Exception:  # noqa: BLE001 - a file of another shape: recompute
                STATS["ignored"] += 1
    value = compute()
    if k is not None:
        try:
            store(k, encode(value))
        except Exception:  # noqa: BLE001 - a value that does not encode is just not cached
            pass
    return value


class _quiet:
    """Ignore OS errors (a read-only or full disk turns the cache off, not the plan)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is not None and issubclass(kind, OSError)
