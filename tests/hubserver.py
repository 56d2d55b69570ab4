"""A tiny Hugging Face Hub on 127.0.0.1 for tests (stdlib http.server, one thread).

It answers the requests ``huggingface_hub`` really makes (read from its
source: ``file_download.get_hf_file_metadata``, ``hf_hub_download`` and
``HfApi.get_safetensors_metadata`` / ``parse_safetensors_file_metadata``):

* ``HEAD /{repo_id}/resolve/{revision}/{filename}``: 200 with ``X-Repo-Commit``,
  ``ETag`` (git blob sha1, or sha256 for LFS files as the real hub does) and
  ``Content-Length``;
* ``GET`` of the same URL, whole or with ``Range: bytes=a-b`` (206 +
  ``Content-Range``);
* ``GET /api/models/{repo_id}/commits/{revision}`` (``HfApi.list_repo_commits``): the
  commits reachable from the revision, newest first, ``commits_page_size`` a page with a
  ``Link: <...?p=N>; rel="next"`` header like the real hub's; ``fail_commits_page`` makes
  one page answer 500 (a list the server cuts short);
* ``GET /api/models/{repo_id}/tree/{revision}`` (``HfApi.list_repo_tree``): every file
  with its git blob id (of the LFS pointer for LFS files), size and ``lfs`` sha256;
* the real hub's error answers: unknown repo -> 401 ``X-Error-Code: RepoNotFound``,
  gated repo -> 401 ``GatedRepo``, unknown revision -> 404 ``RevisionNotFound``,
  missing file -> 404 ``EntryNotFound`` (with ``X-Repo-Commit``).

Every request is logged (method, path, Range header, bytes of body sent) so a
test can prove that no weight bytes were downloaded.  Anything else (say
``/api/models/...``) is logged and answered 404, so an unexpected call shows up.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

RESOLVE = re.compile(r"^/(?P<repo>[^/]+(?:/[^/]+)?)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<op>commits|tree)/(?P<rev>[^/]+)(?P<rest>/.*)?$")
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".h5", ".msgpack")


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    body_bytes: int  # bytes of file content sent back


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> filename -> content
    refs: dict[str, str] = field(default_factory=dict)  # branch/tag -> sha
    gated: bool = False
    dates: dict[str, str] = field(default_factory=dict)  # sha -> commit time (RFC 3339)
    titles: dict[str, str] = field(default_factory=dict)  # sha -> commit title


def fake_sha(*parts: str) -> str:
    """A deterministic 40-hex commit id."""
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()


def lfs_pointer(content: bytes) -> bytes:
    """The git-lfs pointer file the hub's git stores for an LFS file."""
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (hashlib.sha256(content).hexdigest().encode(), len(content))


def git_blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def etag_of(filename: str, content: bytes) -> str:
    """What the hub uses: sha256 for LFS files, the git blob sha1 otherwise."""
    if filename.endswith(LFS_SUFFIXES):
        return hashlib.sha256(content).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class FakeHub:
    """Holds repos and serves them; ``with FakeHub() as hub:`` starts and stops it."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[Request] = []
        self.fail_get: dict[tuple[str, str], int] = {}  # (repo_id, filename) -> status for GETs (a hub hiccup)
        self.commits_page_size = 50  # the real hub's page of commits
        self.fail_commits_page: dict[str, int] = {}  # repo_id -> 1-based page of the commit list that answers 500
        self._lock = threading.Lock()
        self._connections: set = set()  # open client sockets, closed on stop()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- building repos
    def add_commit(self, repo_id: str, files: dict[str, bytes], refs: tuple[str, ...] = ("main",), gated=False, date: str | None = None, title: str = "", salt: str = "") -> str:
        """Add a commit holding ``files``; point ``refs`` at it; return its sha."""
        repo = self.repos.setdefault(repo_id, Repo())
        repo.gated = repo.gated or gated
        sha = fake_sha(repo_id, str(len(repo.commits)), *([salt] if salt else []))
        repo.commits[sha] = dict(files)
        repo.dates[sha] = date or "2026-01-01T00:00:00.000Z"
        repo.titles[sha] = title or f"commit {len(repo.commits)}"
        for ref in refs:
            repo.refs[ref] = sha
        return sha

    def drop_commits(self, repo_id: str, n: int) -> None:
        """Forget the newest ``n`` commits and point main at the one before (a force-push)."""
        repo = self.repos[repo_id]
        for sha in list(repo.commits)[-n:]:
            del repo.commits[sha]
        repo.refs["main"] = list(repo.commits)[-1]

    def history(self, repo_id: str, rev: str) -> list[str] | None:
        """Commits reachable from ``rev``, newest first (commits are linear, in the order added)."""
        repo = self.repos[repo_id]
        sha = repo.refs.get(rev, rev if rev in repo.commits else None)
        if sha is None:
            return None
        order = list(repo.commits)
        return list(reversed(order[: order.index(sha) + 1]))

    # -- serving
    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeHub":
        hub = self

        class Handler(_Handler):
            fake_hub = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening AND drop kept-alive connections, so a stopped hub really is gone."""
        import socket

        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            with self._lock:
                conns, self._connections = list(self._connections), set()
            for conn in conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._thread.join(5)
            self._server = None

    def __enter__(self) -> "FakeHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def log(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    def clear_log(self) -> None:
        with self._lock:
            self.requests.clear()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the real hub
    fake_hub: FakeHub

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def setup(self) -> None:
        super().setup()
        with self.fake_hub._lock:
            self.fake_hub._connections.add(self.connection)

    def finish(self) -> None:
        with self.fake_hub._lock:
            self.fake_hub._connections.discard(self.connection)
        super().finish()

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def _api(self, m: re.Match, send_body: bool) -> None:
        _api_reply(self, m, send_body)

    def do_GET(self) -> None:
        self._serve(send_body=True)

    # -- helpers
    def _reply(self, status: int, headers: dict[str, str], body: bytes = b"", send_body: bool = True) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body and body:
            self.wfile.write(body)

    def _error(self, status: int, code: str | None, message: str, send_body: bool, extra: dict | None = None) -> None:
        self._reply(status, *self._error_parts(code, message, extra), send_body)

    def _serve(self, send_body: bool) -> None:
        """Log the request, then answer it: a test that has its answer has its log line too."""
        path = urlsplit(self.path).path
        rng = self.headers.get("Range")
        m = RESOLVE.match(path)
        if not m and API.match(path):
            return self._api(API.match(path), send_body)
        status, headers, body, sent = self._answer(m, rng) if m else (404, *self._error_parts(None, "Not Found"), 0)
        if not send_body:
            sent = 0
        self.fake_hub.log(Request(self.command, path, rng, sent))
        self._reply(status, headers, body, send_body)

    def _error_parts(self, code: str | None, message: str, extra: dict | None = None) -> tuple[dict[str, str], bytes]:
        headers = {"Content-Type": "application/json", **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        headers["X-Error-Message"] = message
        return headers, ('{"error": "%s"}' % message).encode()

    def _answer(self, m: re.Match, rng: str | None) -> tuple[int, dict[str, str], bytes, int]:
        """(status, headers, body, file bytes sent) for a resolve URL."""
        repo_id, rev, filename = m["repo"], unquote(m["rev"]), unquote(m["file"])
        repo = self.fake_hub.repos.get(repo_id)

        def error(status: int, code: str | None, message: str, extra: dict | None = None):
            return (status, *self._error_parts(code, message, extra), 0)

        if repo is None:
            # The real hub answers 401 for unknown repos (it cannot tell them from private ones).
            return error(401, "RepoNotFound", "Repository not found")
        if repo.gated and not self.headers.get("authorization"):
            return error(401, "GatedRepo", "Access to this repo is restricted")
        sha = repo.refs.get(rev, rev if rev in repo.commits else None)
        if sha is None:
            return error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        files = repo.commits[sha]
        if filename not in files:
            return error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": sha})
        content = files[filename]
        if self.command == "GET" and (repo_id, filename) in self.fake_hub.fail_get:
            return error(self.fake_hub.fail_get[repo_id, filename], None, "Internal Error")
        headers = {
            "X-Repo-Commit": sha,
            "ETag": '"%s"' % etag_of(filename, content),
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if rng is None or self.command == "HEAD":
            return 200, headers, content, len(content)
        r = RANGE.match(rng.strip())
        if not r or int(r[1]) >= len(content):
            headers["Content-Range"] = f"bytes */{len(content)}"
            return error(416, None, "Range Not Satisfiable", headers)
        start = int(r[1])
        end = min(int(r[2]) if r[2] else len(content) - 1, len(content) - 1)
        headers["Content-Range"] = f"bytes {start}-{end}/{len(content)}"
        return 206, headers, content[start : end + 1], end + 1 - start


def _api_reply(handler: "_Handler", m: re.Match, send_body: bool) -> None:
    """The commit list and tree listing endpoints (see the module docstring)."""
    import json
    from urllib.parse import parse_qs

    hub = handler.fake_hub
    hub.log(Request(handler.command, urlsplit(handler.path).path, None, 0))
    repo_id, op, rev = m["repo"], m["op"], unquote(m["rev"])
    repo = hub.repos.get(repo_id)
    if repo is None:
        return handler._error(401, "RepoNotFound", "Repository not found", send_body)
    if repo.gated and not handler.headers.get("authorization"):
        return handler._error(401, "GatedRepo", "Access to this repo is restricted", send_body)
    shas = hub.history(repo_id, rev)
    if shas is None:
        return handler._error(404, "RevisionNotFound", "Invalid rev id: " + rev, send_body)
    headers = {"Content-Type": "application/json"}
    if op == "commits":
        page = int((parse_qs(urlsplit(handler.path).query).get("p") or ["0"])[0])
        if hub.fail_commits_page.get(repo_id) == page + 1:
            return handler._error(500, None, "Internal Error", send_body)
        size = hub.commits_page_size
        chunk = shas[page * size : (page + 1) * size]
        items = [{"id": s, "title": repo.titles[s], "message": "", "date": repo.dates[s],
                  "authors": [{"user": "tester", "avatar": ""}]} for s in chunk]  # fmt: skip
        if (page + 1) * size < len(shas):
            headers["Link"] = f'<{hub.endpoint}/api/models/{repo_id}/commits/{m["rev"]}?p={page + 1}>; rel="next"'
        body = json.dumps(items).encode()
    else:
        entries = []
        for name, content in sorted(repo.commits[shas[0]].items()):
            if name.endswith(LFS_SUFFIXES):
                ptr = lfs_pointer(content)
                entries.append(
                    {"type": "file", "oid": git_blob_id(ptr), "size": len(content), "path": name, "lfs": {"oid": hashlib.sha256(content).hexdigest(), "size": len(content), "pointerSize": len(ptr)}}
                )
            else:
                entries.append({"type": "file", "oid": git_blob_id(content), "size": len(content), "path": name})
        body = json.dumps(entries).encode()
    handler._reply(200, headers, body, send_body)


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
