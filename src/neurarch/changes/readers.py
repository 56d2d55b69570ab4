"""Where revisions come from: a local git clone (the ``git`` binary) or the Hugging Face Hub.

Both readers answer the same four questions, and only these:

* ``revisions()``: the commit list, newest first (and whether it was cut short);
* ``files(commit)``: the file ids at a commit (blob id, size, LFS sha256) - no content;
* ``read(commit, file)``: one small file's bytes;
* ``header(commit, file)``: a safetensors file's header (names, dtypes, shapes), never
  its tensor data; ``None`` when only an LFS pointer is available.

The tracker asks ``read``/``header`` only for files whose ids changed.  The hub
reader caches everything it reads by content id (blob id or LFS sha256) and each
commit's file listing by commit, so a second run asks the hub only for the commit
list and for revisions it has not read before.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from ..errors import ConfigError, NeurarchError
from ..sources import safetensors_header
from .errors import ChangesError, RevisionError
from .types import FileId, Revision, RevisionNote

LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/v1"
_LFS_OID = re.compile(rb"^oid sha256:([0-9a-f]{64})$", re.M)
_LFS_SIZE = re.compile(rb"^size (\d+)$", re.M)
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
COMMITS_PAGE_LIMIT = 100  # pages of the hub's commit list read at most (the hub sends 50 a page)

Tensors = dict[str, tuple[str, tuple[int, ...]]]


def utc(dt: datetime) -> datetime:
    """The same instant in UTC (a naive time is taken as UTC)."""
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def parse_lfs_pointer(raw: bytes) -> tuple[str, int] | None:
    """(sha256, size) of a git-lfs pointer file, or None when ``raw`` is not one."""
    if not raw.startswith(LFS_POINTER_PREFIX) or len(raw) > 1024:
        return None
    oid, size = _LFS_OID.search(raw), _LFS_SIZE.search(raw)
    if not oid or not size:
        return None
    return oid[1].decode(), int(size[1])


def header_from_bytes(raw: bytes, where: str) -> Tensors:
    """A safetensors header from the first bytes of a file (ConfigError if they are not one)."""
    if len(raw) < 8:
        raise ConfigError(f"{where}: not a safetensors file (shorter than 8 bytes)", path=where)
    (n,) = struct.unpack("<Q", raw[:8])
    if n > safetensors_header.MAX_HEADER_BYTES or len(raw) < 8 + n:
        raise ConfigError(f"{where}: truncated or oversized safetensors header", path=where)
    return safetensors_header.parse_header(raw[8 : 8 + n], where)


# --------------------------------------------------------------------------- local git clone


class GitReader:
    """A model repo cloned with git, read through the ``git`` binary (offline)."""

    source = "git"

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser().resolve()
        self.repo = str(self.path)  # one name for the clone however it was spelt (the store keys on it)
        if not self.path.is_dir():
            raise ChangesError(str(path), "not a folder")
        try:
            top = self._git("rev-parse", "--show-toplevel").strip()
        except ChangesError:
            raise ChangesError(str(path), "not a git clone (run `git clone` of the model repo, or name a hub id)") from None
        self.top = Path(top)
        self.repo = str(self.top)
        try:
            self.git_dir = Path(self._git("rev-parse", "--absolute-git-dir").strip())
        except ChangesError:
            self.git_dir = self.top / ".git"
        self.url = self._remote_url() or self.top.as_uri()

    def _git(self, *args: str) -> str:
        return self._git_bytes(*args).decode(errors="replace")

    def _git_bytes(self, *args: str) -> bytes:
        try:
            out = subprocess.run(["git", "-C", str(self.path), *args], capture_output=True, timeout=60, check=False)
        except FileNotFoundError:
            raise ChangesError(self.repo, "the git binary is not installed") from None
        except subprocess.TimeoutExpired:
            raise ChangesError(self.repo, f"git {args[0]} took over 60 s") from None
        if out.returncode != 0:
            msg = out.stderr.decode(errors="replace").strip().splitlines()
            raise ChangesError(self.repo, f"git {args[0]} failed: {msg[0] if msg else out.returncode}")
        return out.stdout

    def _remote_url(self) -> str | None:
        try:
            url = self._git("config", "--get", "remote.origin.url").strip()
        except ChangesError:
            return None
        if url.endswith(".git"):
            url = url[:-4]
        if url.startswith("git@"):  # git@host:org/name -> https://host/org/name
            host, _, rest = url[4:].partition(":")
            url = f"https://{host}/{rest}"
        return url if url.startswith(("https://", "http://")) else None

    def resolve(self, rev: str) -> str:
        try:
            return self._git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
        except ChangesError:
            raise RevisionError(self.repo, rev) from None

    def revisions(self) -> tuple[list[Revision], bool, list[RevisionNote]]:
        try:
            log = self._git("log", "--first-parent", "--format=%H%x1f%cI%x1f%an%x1f%s%x1e", "HEAD")
        except ChangesError as e:
            if any(m in str(e) for m in ("does not have any commits", "bad default revision", "unknown revision")):
                return [], False, [RevisionNote(message="the repo has no commits yet")]
            raise
        revs = []
        for rec in log.split("\x1e"):
            rec = rec.strip("\n")
            if not rec:
                continue
            sha, date, author, title = (rec.split("\x1f") + ["", "", ""])[:4]
            revs.append(Revision(commit=sha, date=utc(datetime.fromisoformat(date)), author=author, title=title))
        return revs, False, []

    def files(self, commit: str) -> dict[str, FileId]:
        out = self._git("ls-tree", "-r", "-l", "-z", commit)
        ids: dict[str, FileId] = {}
        for entry in out.split("\0"):
            if not entry:
                continue
            meta, _, path = entry.partition("\t")
            parts = meta.split()
            if len(parts) != 4 or parts[1] != "blob":
                continue
            size = int(parts[3]) if parts[3].isdigit() else 0
            fid = FileId(path=path, blob=parts[2], size=size)
            if size <= 1024 and path.endswith((".safetensors", ".bin", ".pt")):
                pointer = parse_lfs_pointer(self._git_bytes("cat-file", "blob", parts[2]))
                if pointer:
                    fid = FileId(path=path, blob=parts[2], size=pointer[1], lfs_sha256=pointer[0])
            ids[path] = fid
        return ids

    def read(self, commit: str, fid: FileId) -> bytes:
        return self._git_bytes("cat-file", "blob", fid.blob)

    def _lfs_object(self, sha256: str) -> Path | None:
        p = self.git_dir / "lfs" / "objects" / sha256[:2] / sha256[2:4] / sha256
        return p if p.is_file() else None

    def header(self, commit: str, fid: FileId) -> Tensors | None:
        where = f"{self.repo}@{commit[:12]}:{fid.path}"
        if fid.lfs_sha256:
            obj = self._lfs_object(fid.lfs_sha256)
            if obj is None:
                return None  # pointer only: the LFS object was never fetched
            return safetensors_header.read_header(obj)
        # A plain git blob: read the 8-byte length, then the header, and stop.
        try:
            proc = subprocess.Popen(["git", "-C", str(self.path), "cat-file", "blob", fid.blob], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        except FileNotFoundError:
            raise ChangesError(self.repo, "the git binary is not installed") from None
        out = proc.stdout
        assert out is not None  # stdout=PIPE
        try:
            head = out.read(8)
            if len(head) < 8:
                raise ConfigError(f"{where}: not a safetensors file", path=where)
            (n,) = struct.unpack("<Q", head)
            if n > safetensors_header.MAX_HEADER_BYTES:
                raise ConfigError(f"{where}: safetensors header of {n} bytes is not a real header", path=where)
            return header_from_bytes(head + out.read(n), where)
        finally:
            proc.kill()
            proc.wait(5)


# --------------------------------------------------------------------------- Hugging Face Hub


def _cache_root() -> Path:
    from ..sources import hub

    return hub._cache_dir().parent / "changes"


class HubReader:
    """A model repo on the Hub (or an HF_ENDPOINT mirror), read through huggingface_hub."""

    source = "hub"

    def __init__(self, repo_id: str, revision: str | None = None):
        from huggingface_hub import constants
        from huggingface_hub.utils import validate_repo_id

        from ..sources import hub

        self.repo = repo_id
        self.revision = revision or "main"
        try:
            validate_repo_id(repo_id)
        except Exception as e:  # HFValidationError
            raise ChangesError(repo_id, f"not a valid Hugging Face repo id ({str(e).splitlines()[0]})") from None
        self.endpoint = constants.ENDPOINT.rstrip("/")
        self.url = f"{self.endpoint}/{repo_id}"
        self.timeout = hub._timeout()
        self.cache = _cache_root()
        self.requests = 0  # requests this reader made (a test reads it)

    # -- cache
    def _cache_get(self, kind: str, key: str) -> bytes | None:
        try:
            return (self.cache / kind / key).read_bytes()
        except OSError:
            return None

    def _cache_put(self, kind: str, key: str, data: bytes) -> None:
        path = self.cache / kind / key
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            tmp.replace(path)
        except OSError:
            pass  # a read-only cache only costs requests

    def _errors(self, revision: str | None = None):
        from ..sources import hub

        return hub._hub_errors(self.repo, revision or self.revision)

    def _get(self, url: str):
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        self.requests += 1
        r = get_session().get(url, headers=build_hf_headers(), timeout=self.timeout, follow_redirects=True)
        hf_raise_for_status(r)
        return r

    # -- the four questions
    def revisions(self) -> tuple[list[Revision], bool, list[RevisionNote]]:
        """The commit list, newest first, following the hub's pages (each page once, no retries)."""
        from urllib.parse import quote

        from huggingface_hub import constants

        if constants.HF_HUB_OFFLINE:
            raise ChangesError(self.repo, "HF_HUB_OFFLINE is set, and a repo's history is read from the Hub (a local git clone of it works offline)")
        url = f"{self.endpoint}/api/models/{self.repo}/commits/{quote(self.revision, safe='')}"
        revs: list[Revision] = []
        notes: list[RevisionNote] = []
        truncated = False
        pages = 0
        while url:
            try:
                if pages == 0:
                    with self._errors():
                        r = self._get(url)
                else:
                    r = self._get(url)
            except NeurarchError:
                raise
            except Exception as e:
                # A later page failed: keep what we have, say that the list is cut short.
                truncated = True
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                notes.append(RevisionNote(message=f"the hub's commit list stopped after {len(revs)} commits ({reason}); older revisions were not read"))
                break
            pages += 1
            try:
                items = r.json()
                for item in items:
                    revs.append(
                        Revision(
                            commit=item["id"],
                            date=utc(datetime.fromisoformat(item["date"].replace("Z", "+00:00"))),
                            author=", ".join(a.get("user", "") for a in item.get("authors", []) if isinstance(a, dict)),
                            title=item.get("title", ""),
                        )
                    )
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                truncated = True
                notes.append(RevisionNote(message=f"the hub's commit list has an entry neurarch cannot read ({type(e).__name__}); older revisions were not read"))
                break
            url = r.links.get("next", {}).get("url")
            if url and pages >= COMMITS_PAGE_LIMIT:
                truncated = True
                notes.append(RevisionNote(message=f"read the first {pages} pages of the commit list ({len(revs)} commits); older revisions were not read"))
                break
        return revs, truncated, notes

    def resolve(self, rev: str) -> str:
        """A branch, tag or commit -> the full commit id (via the commit list at that revision)."""
        from urllib.parse import quote

        if _HEX40.match(rev):
            return rev
        url = f"{self.endpoint}/api/models/{self.repo}/commits/{quote(rev, safe='')}"
        with self._errors(rev):
            items = self._get(url).json()
        if not items:
            raise RevisionError(self.repo, rev)
        return items[0]["id"]

    def files(self, commit: str) -> dict[str, FileId]:
        cached = self._cache_get("trees", f"{self.repo.replace('/', '--')}--{commit}.json")
        if cached is not None:
            try:
                return {p: FileId(**v) for p, v in json.loads(cached).items()}
            except (ValueError, TypeError):
                pass
        from huggingface_hub import HfApi

        ids: dict[str, FileId] = {}
        with self._errors(commit):
            self.requests += 1
            for entry in HfApi(endpoint=self.endpoint).list_repo_tree(self.repo, revision=commit, recursive=True):
                blob = getattr(entry, "blob_id", None)
                if blob is None:  # a folder
                    continue
                lfs = getattr(entry, "lfs", None)
                ids[entry.path] = FileId(
                    path=entry.path,
                    blob=blob,
                    size=int(lfs.size if lfs else getattr(entry, "size", None) or 0),  # a RepoFile (folders have no blob)
                    lfs_sha256=lfs.sha256 if lfs else None,
                )
        self._cache_put("trees", f"{self.repo.replace('/', '--')}--{commit}.json", json.dumps({p: f.model_dump() for p, f in ids.items()}).encode())
        return ids

    def read(self, commit: str, fid: FileId) -> bytes:
        cached = self._cache_get("blobs", fid.key)
        if cached is not None:
            return cached
        from huggingface_hub import hf_hub_url

        with self._errors(commit):
            data = self._get(hf_hub_url(self.repo, fid.path, revision=commit)).content
        if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == fid.blob:
            self._cache_put("blobs", fid.key, data)  # cache only what matches its id
        return data

    def header(self, commit: str, fid: FileId) -> Tensors | None:
        cached = self._cache_get("headers", fid.key + ".json")
        if cached is not None:
            try:
                return {k: (d, tuple(s)) for k, (d, s) in json.loads(cached).items()}
            except (ValueError, TypeError):
                pass
        from huggingface_hub import HfApi
        from huggingface_hub import errors as hf

        with self._errors(commit):
            self.requests += 1
            try:
                meta = HfApi(endpoint=self.endpoint).parse_safetensors_file_metadata(self.repo, fid.path, revision=commit)
            except hf.SafetensorsParsingError as e:
                where = f"{self.repo}@{commit[:12]}:{fid.path}"
                raise ConfigError(f"{where}: bad safetensors header ({str(e).splitlines()[0]})", path=where) from None
        tensors = {name: (str(info.dtype), tuple(int(d) for d in info.shape)) for name, info in meta.tensors.items()}
        self._cache_put("headers", fid.key + ".json", json.dumps({k: [d, list(s)] for k, (d, s) in tensors.items()}).encode())
        return tensors


def open_source(spec: str):
    """A reader for ``spec``: an existing folder is a git clone; ``org/name`` is a hub repo."""
    spec = spec.strip()
    if not spec:
        raise ChangesError(repr(spec), "name a hub repo (org/name) or a local git clone")
    if os.path.exists(spec) or spec.startswith((".", "/", "~")):
        if not os.path.exists(os.path.expanduser(spec)):
            raise ChangesError(spec, "no such folder")
        return GitReader(spec)
    repo, _, rev = spec.partition("@")
    if "/" not in repo:
        raise ChangesError(spec, "not a folder, and not a hub repo id (org/name)")
    return HubReader(repo, rev or None)
