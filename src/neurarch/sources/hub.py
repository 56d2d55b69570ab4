"""The Hugging Face Hub source: ``config.json`` plus safetensors headers, never weights.

``load("org/name", revision=..., offline=...)`` does three things, all through
the real ``huggingface_hub`` client so its cache, offline mode, auth and
endpoint settings (``HF_ENDPOINT``, ``HF_HOME``, ``HF_HUB_CACHE``,
``HF_HUB_OFFLINE``, ``HF_TOKEN``) behave exactly as they do for
``transformers``:

1. **Probe**: one HEAD request for ``config.json`` with a short timeout and no
   retries, so an unknown repo, a gated repo, a wrong revision or an
   unreachable hub is one clear error within seconds.  (``hf_hub_download``
   alone retries a refused connection with back-off for ~25 s.)
2. **Config**: ``hf_hub_download`` of ``config.json`` into the usual HF cache.
   The path it returns, ``.../snapshots/<commit sha>/config.json``, gives the
   resolved commit, which pins everything else.
3. **Checkpoint**: ``get_safetensors_metadata`` at that commit reads only the
   header byte ranges of ``model.safetensors`` (or of every shard named by
   ``model.safetensors.index.json``); tensor data is never requested.  The
   header summary is kept in neurarch's own small cache, keyed by commit, so an
   offline run of a model seen before still knows its checkpoint count.

Offline (``offline=True`` or ``HF_HUB_OFFLINE=1``) uses the cache only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

from ..errors import ConfigError, HubError, SourceNotFoundError
from . import safetensors_header
from .base import CheckpointInfo, ModelSource

CONFIG_NAME = "config.json"
# Seconds to wait for the hub to answer one request.  The hub answers a HEAD
# in well under a second; a user on a slow link can raise it with the
# standard HF_HUB_ETAG_TIMEOUT variable.
DEFAULT_TIMEOUT_S = 5.0
# Where the header summaries go: $NEURARCH_CACHE_DIR, else $XDG_CACHE_HOME/neurarch.
CACHE_ENV = "NEURARCH_CACHE_DIR"
_SHA = re.compile(r"^[0-9a-f]{40}$")
_TRUE = {"1", "on", "yes", "true"}

NO_SAFETENSORS_NOTE = "no safetensors checkpoint in the repo"


# --------------------------------------------------------------------------- settings


def _timeout() -> float:
    """The user's HF_HUB_ETAG_TIMEOUT if set, else a short default."""
    raw = os.environ.get("HF_HUB_ETAG_TIMEOUT")
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        return DEFAULT_TIMEOUT_S


def _is_offline(offline: bool | None) -> bool:
    """Explicit argument first, then huggingface_hub's own setting, then the env (read now)."""
    if offline is not None:
        return offline
    from huggingface_hub import constants

    return constants.is_offline_mode() or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _quiet():
    """Silence huggingface_hub progress bars (they would litter the CLI's stderr)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import disable_progress_bars

    if constants.HF_HUB_DISABLE_PROGRESS_BARS is False:  # the user explicitly asked for them
        return contextlib.nullcontext()
    return disable_progress_bars()


# --------------------------------------------------------------------------- errors


def _translate(repo_id: str, revision: str | None, err: Exception, offline: bool) -> Exception | None:
    """Map a huggingface_hub / httpx error to one NeurarchError, or None if it is not one we know."""
    import httpx2
    from huggingface_hub import errors as hf

    rev = revision or "main"
    if isinstance(err, hf.HFValidationError):  # raised before any request
        return SourceNotFoundError(repo_id, f"not a valid Hugging Face repo id ({str(err).splitlines()[0]})")
    if isinstance(err, hf.GatedRepoError):  # before RepositoryNotFoundError: it is a subclass
        return HubError(repo_id, "gated repo: accept its terms on the Hub, then log in (hf auth login or HF_TOKEN)")
    if isinstance(err, hf.RepositoryNotFoundError):
        return SourceNotFoundError(repo_id, "no such model repo on the Hugging Face Hub (or it is private and no token was given)")
    if isinstance(err, hf.RevisionNotFoundError):
        return SourceNotFoundError(repo_id, f"revision {rev!r} not found on the Hugging Face Hub")
    if isinstance(err, hf.RemoteEntryNotFoundError):
        return SourceNotFoundError(repo_id, f"the repo has no {CONFIG_NAME} at revision {rev!r} (not a transformers model?)")
    if isinstance(err, hf.DisabledRepoError):
        return HubError(repo_id, "access to this repo is disabled on the Hub")
    if isinstance(err, (hf.OfflineModeIsEnabled, hf.LocalEntryNotFoundError)):
        if offline:
            return HubError(repo_id, f"{CONFIG_NAME} at revision {rev!r} is not in the local cache and HF_HUB_OFFLINE is set")
        return HubError(repo_id, f"cannot reach {_endpoint()} and {CONFIG_NAME} at revision {rev!r} is not in the local cache")
    if isinstance(err, httpx2.TimeoutException):
        return HubError(repo_id, f"no answer from {_endpoint()} within {_timeout():g} s (raise HF_HUB_ETAG_TIMEOUT?)")
    if isinstance(err, httpx2.TransportError):  # connection refused, DNS failure, reset...
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        return HubError(repo_id, f"cannot reach {_endpoint()} ({reason})")
    if isinstance(err, hf.HfHubHTTPError):
        status = getattr(err.response, "status_code", "?")
        return HubError(repo_id, f"HTTP {status} from {_endpoint()}")
    if isinstance(err, hf.FileMetadataError):
        return HubError(repo_id, f"{_endpoint()} does not answer like a Hugging Face Hub (check HF_ENDPOINT)")
    return None


@contextlib.contextmanager
def _hub_errors(repo_id: str, revision: str | None, offline: bool = False):
    """Re-raise known client errors as one-line NeurarchErrors (unknown ones are bugs: shown in full)."""
    try:
        yield
    except Exception as err:
        mapped = _translate(repo_id, revision, err, offline)
        if mapped is None:
            raise
        raise mapped from None


# --------------------------------------------------------------------------- config


def _probe(repo_id: str, revision: str | None) -> None:
    """One fast HEAD for config.json: fails in seconds where hf_hub_download would retry."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo_id, CONFIG_NAME, revision=revision)
    get_hf_file_metadata(url, timeout=_timeout(), retry_on_errors=False)


def _reachable(repo_id: str, revision: str | None) -> bool:
    """Probe the hub; False only when it is unreachable (or failing, 5xx) but the config is cached.

    Any other failure (unknown repo, gated, bad revision, hub down with an
    empty cache) propagates from here as the client's own exception.
    """
    import httpx2
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HfHubHTTPError

    try:
        _probe(repo_id, revision)
        return True
    except (httpx2.TransportError, HfHubHTTPError) as err:
        down = isinstance(err, httpx2.TransportError) or getattr(err.response, "status_code", 0) >= 500
        if down and isinstance(try_to_load_from_cache(repo_id, CONFIG_NAME, revision=revision), str):
            return False
        raise


def _download_config(repo_id: str, revision: str | None, offline: bool) -> Path:
    """Path of config.json in the HF cache (downloaded unless offline)."""
    from huggingface_hub import hf_hub_download

    with _quiet():
        return Path(hf_hub_download(repo_id, CONFIG_NAME, revision=revision, local_files_only=offline, etag_timeout=_timeout()))


def _commit_of(path: Path, revision: str | None) -> str | None:
    """The commit a cached file belongs to: the cache stores it as snapshots/<sha>/<file>."""
    sha = path.parent.name
    if _SHA.match(sha):
        return sha
    return revision if revision and _SHA.match(revision) else None


# --------------------------------------------------------------------------- checkpoint


def _cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV) or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "neurarch")
    return Path(root) / "hub-safetensors-headers"


def _cache_file(repo_id: str, sha: str) -> Path:
    return _cache_dir() / repo_id.replace("/", "--") / f"{sha}.json"


def _read_cached_headers(repo_id: str, sha: str) -> dict | None:
    """The header summary saved by an earlier online run at this exact commit, if any."""
    try:
        data = json.loads(_cache_file(repo_id, sha).read_text())
        tensors = {k: (str(d), tuple(int(x) for x in s)) for k, (d, s) in data["tensors"].items()}
        return {"files": list(data["files"]), "tensors": tensors, "safetensors": bool(data["safetensors"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or unreadable: treat as not cached


def _write_cached_headers(repo_id: str, sha: str, entry: dict) -> None:
    """Best effort: a read-only home only costs the offline checkpoint count."""
    path = _cache_file(repo_id, sha)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tensors = {k: [d, list(s)] for k, (d, s) in entry["tensors"].items()}
        tmp.write_text(json.dumps({"files": entry["files"], "tensors": tensors, "safetensors": entry["safetensors"]}))
        tmp.replace(path)
    except OSError:
        pass


def _fetch_headers(repo_id: str, sha: str) -> dict:
    """Read the safetensors headers at a commit with huggingface_hub (byte ranges only)."""
    from huggingface_hub import HfApi
    from huggingface_hub import errors as hf

    try:
        with _quiet():
            meta = HfApi().get_safetensors_metadata(repo_id, revision=sha, timeout=_timeout())
    except hf.NotASafetensorsRepoError:
        return {"files": [], "tensors": {}, "safetensors": False}
    except hf.SafetensorsParsingError as e:
        raise ConfigError(f"hub: {repo_id}@{sha[:12]}: bad safetensors header ({str(e).splitlines()[0]})") from None
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    for file_meta in meta.files_metadata.values():
        for name, info in file_meta.tensors.items():
            tensors[name] = (str(info.dtype), tuple(int(d) for d in info.shape))
    return {"files": sorted(meta.files_metadata), "tensors": tensors, "safetensors": True}


def _checkpoint(repo_id: str, sha: str | None, offline: bool, notes: list[str]) -> CheckpointInfo | None:
    """CheckpointInfo from the headers (cache first), or None with a note saying why."""
    if sha is None:
        notes.append("offline: the checkpoint's safetensors headers are not in the cache")
        return None
    entry = _read_cached_headers(repo_id, sha)
    if entry is None:
        if offline:
            notes.append("offline: the checkpoint's safetensors headers are not in the cache")
            return None
        try:
            entry = _fetch_headers(repo_id, sha)
        except Exception as err:
            # The config is in hand: a hub hiccup now costs only the checkpoint count.
            mapped = _translate(repo_id, sha, err, offline=False)
            if mapped is None:
                raise
            notes.append(f"the safetensors headers could not be read: {mapped}")
            return None
        _write_cached_headers(repo_id, sha, entry)
    if not entry["safetensors"]:
        notes.append(NO_SAFETENSORS_NOTE)
        return None
    files = entry["files"]
    names = ", ".join(files[:3]) + (" ..." if len(files) > 3 else "")
    return safetensors_header.summarize(entry["tensors"], f"safetensors headers on the Hugging Face Hub, {repo_id}@{sha[:12]} ({names})")


# --------------------------------------------------------------------------- entry point


def load(spec: str, *, revision: str | None = None, offline: bool | None = None) -> ModelSource:
    """Resolve a hub model id to a ModelSource (config + checkpoint header count)."""
    from . import local

    repo_id = spec.strip()
    offline = _is_offline(offline)
    notes: list[str] = []
    with _hub_errors(repo_id, revision, offline):
        if not offline and not _reachable(repo_id, revision):
            offline = True  # hub down, config cached: carry on from the cache
            notes.append(f"{_endpoint()} could not be reached: used the cached config")
        cfg_path = _download_config(repo_id, revision, offline)
    sha = _commit_of(cfg_path, revision)
    config = local.read_config(cfg_path)
    where = f"{repo_id}@{sha}" if sha else f"{repo_id}@{revision or 'main'}"
    provenance = f"Hugging Face Hub {where}" + (" (from the local cache)" if offline else "")
    checkpoint = _checkpoint(repo_id, sha, offline, notes)
    name = config.get("_name_or_path")
    if isinstance(name, str) and name and name != repo_id and not name.startswith(("/", ".")):
        notes.append(f"config names itself {name!r}")
    return ModelSource(
        id=repo_id,
        kind="hub",
        provenance=provenance,
        config=config,
        revision=sha or revision,
        checkpoint=checkpoint,
        notes=notes,
    )
