"""The FastAPI app: server-rendered pages, their Markdown/JSON twins, badges,
paste-a-config with permalinks, the verifier's checks, and ``POST /api/v1/plan``.

    from neurarch.web.app import Settings, create_app
    app = create_app(Settings(db_url="sqlite:////tmp/n.db", workers=2))

Every page is one :class:`neurarch.report.Report` (computed by the worker
pool, cached in the store) and the renderers; nothing here computes a figure.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..errors import NeurarchError
from ..report import Report
from ..store import reports as store
from ..store.db import connect
from . import options as O
from . import pages
from .errors import ApiError, from_exception, openapi_responses
from .ids import check_model_id
from .pool import Pool, worker_env

log = logging.getLogger("neurarch.web")
access_log = logging.getLogger("neurarch.web.access")

MAX_CONFIG_BYTES = 1_000_000


@dataclass
class Settings:
    """How the server runs (``neurarch-trace serve`` flags)."""

    db_url: Optional[str] = None  # None: SQLite in $NEURARCH_CACHE_DIR or ~/.cache/neurarch
    workers: int = 1  # worker processes of the pool
    time_limit_s: float = 300.0  # per request
    memory_limit_gib: float = 8.0  # resident memory per worker (with its forked children)
    queue_size: int = 16  # plans waiting for a worker before 429
    body_limit: int = 1_000_000  # bytes of a request body before 413
    warm: Optional[list] = None  # None: no warm-up; []: the catalog; ids: the catalog and these
    warm_catalog: bool = True  # False: warm only the ids in ``warm`` (tests)
    offline: Optional[bool] = None  # None: follow HF_HUB_OFFLINE
    engine: Any = None  # an engine to use instead of db_url (tests)
    worker_env: dict = field(default_factory=dict)  # environment of the workers on top of the server's (HF_ENDPOINT ...)


# ---------------------------------------------------------------- API models


class PlanRequest(BaseModel):
    """A model id (catalog or Hub) or a config object, with plan options."""

    model_config = ConfigDict(extra="forbid", strict=True)
    model: Optional[str] = Field(None, max_length=200, description="Catalog or Hugging Face id (org/name), or a timm:/torchvision: name.")
    config: Optional[dict[str, Any]] = Field(None, description="A config.json object (instead of model). JSON only; auto_map is refused.")
    revision: Optional[str] = Field(None, max_length=255, description="Hub revision (branch, tag or commit); with model only.")
    options: O.model() = Field(default_factory=O.model(), description="Plan options (the CLI's flags).")  # type: ignore[valid-type]


class PasteRequest(BaseModel):
    """A config object and plan options, stored under a permalink."""

    model_config = ConfigDict(extra="forbid", strict=True)
    config: dict[str, Any] = Field(description="A config.json object.")
    options: O.model() = Field(default_factory=O.model())  # type: ignore[valid-type]


class PasteResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(description="Content hash of the canonical JSON of config + options.")
    url: str = Field(description="The permalink page (relative to the server).")
    json_url: str = Field(description="The permalink's Index JSON.")


class Badge(BaseModel):
    """A shields.io endpoint badge (https://shields.io/badges/endpoint-badge)."""

    model_config = ConfigDict(extra="forbid")
    schemaVersion: Literal[1] = 1
    label: str
    message: str = Field(min_length=1)
    color: str
    isError: Optional[bool] = None
    cacheSeconds: Optional[int] = None


class Status(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str
    workers: int
    busy: int
    queued: int
    queue_size: int
    killed: dict[str, int]
    worker_rss_bytes: dict[str, int]
    computed: int
    reports_stored: int
    warm: Optional[dict[str, int | bool]] = None  # --warm: pages computed, already stored, failed; finished


BADGE_KINDS = ("params", "fits", "verifier", "changes")  # changes: from the revision tracker's store


# ---------------------------------------------------------------- middleware


class _TooLarge(StarletteHTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"the request body is over the server's limit of {limit:,} bytes")


class BodyLimit:
    """413 for a body over ``limit`` bytes: at once from Content-Length, else as
    soon as the streamed chunks pass it (the rest is never read)."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    too_big = int(v) > self.limit
                except ValueError:
                    too_big = False
                if too_big:
                    return await _send_error(send, ApiError(413, "too_large", _TooLarge(self.limit).detail))
        seen = 0

        async def limited():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge(self.limit)
            return msg

        await self.app(scope, limited, send)


async def _send_error(send, err: ApiError) -> None:
    body = json.dumps(err.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class AccessLog:
    """One JSON line per request: route, path, status, ms, cache (hit/miss/coalesced/-)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = {"code": 500}
        scope.setdefault("state", {})

        async def watch(msg):
            if msg["type"] == "http.response.start":
                status["code"] = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, watch)
        finally:
            route = scope.get("route")
            access_log.info(
                json.dumps(
                    {
                        "route": getattr(route, "path", None) or scope.get("path"),
                        "method": scope.get("method"),
                        "path": scope.get("path"),
                        "status": status["code"],
                        "ms": round((time.perf_counter() - started) * 1000, 2),
                        "cache": scope["state"].get("cache", "-"),
                    }
                )
            )


class RenderedPages:
    """Rendered pages of computed reports, by their exact URL (path and raw query string).

    A page (HTML, Markdown twin, Index JSON) is kept once it was answered with
    200; :class:`PageCache` answers a later GET of the same URL from these
    bytes.  Bounded in entries and bytes (least recently used out first).  The
    bytes do not go stale within a process: a report's key includes the code
    fingerprint and library versions, which cannot change while it runs.
    """

    def __init__(self, max_items: int = 512, max_bytes: int = 64 << 20):
        self.max_items, self.max_bytes = max_items, max_bytes
        self.pages: collections.OrderedDict[tuple[str, bytes], tuple[bytes, list, str]] = collections.OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.pages)

    def keep(self, path: str, query: bytes, body: bytes, media_type: str, route: str) -> None:
        key = (path, query)
        old = self.pages.pop(key, None)
        if old is not None:
            self.bytes -= len(old[0])
        headers = [(b"content-type", media_type.encode("latin-1")), (b"content-length", str(len(body)).encode()), (b"x-neurarch-cache", b"hit")]
        self.pages[key] = (body, headers, route)
        self.bytes += len(body)
        while self.pages and (len(self.pages) > self.max_items or self.bytes > self.max_bytes):
            _, (dropped, _, _) = self.pages.popitem(last=False)
            self.bytes -= len(dropped)

    def get(self, path: str, query: bytes):
        hit = self.pages.get((path, query))
        if hit is not None:
            self.pages.move_to_end((path, query))
        return hit


class PageCache:
    """The outermost layer: a GET of a rendered page is answered from
    :class:`RenderedPages` before anything else runs (no routing, no option
    parsing, no database read, no rendering); its access-log line is written here."""

    def __init__(self, app, pages: RenderedPages):
        self.app, self.pages = app, pages

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET":
            started = time.perf_counter()
            hit = self.pages.get(scope["path"], scope["query_string"])
            if hit is not None:
                body, headers, route = hit
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                if access_log.isEnabledFor(logging.INFO):
                    access_log.info(json.dumps({"route": route, "method": "GET", "path": scope["path"], "status": 200, "ms": round((time.perf_counter() - started) * 1000, 2), "cache": "hit"}))
                return
        await self.app(scope, receive, send)


# ---------------------------------------------------------------- the app


def _wants_json(request: Request) -> bool:
    """Errors are JSON, except on a page a browser asked for (``Accept: text/html``)."""
    path = request.url.path
    if path.startswith(("/api/", "/badge/", "/openapi")) or path.endswith((".json", ".md")):
        return True
    if request.query_params.get("format") in ("json", "md"):
        return True
    return "text/html" not in request.headers.get("accept", "")


def _query_params_doc():
    """A dependency whose signature lists every option as a query parameter (for
    OpenAPI and validation of types); the values are read from the query string."""
    types_ = {
        "int": Optional[int],
        "float": Optional[float],
        "bool": Optional[bool],
        "str": Optional[str],
        "list[str]": Optional[list[str]],
        "list[int]": Optional[list[str]],
        "dict": Optional[list[str]],
    }
    params = [
        inspect.Parameter(
            "revision", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str], default=Query(None, max_length=255, description="Hub revision (branch, tag or commit); skips the bundled catalog")
        ),
        inspect.Parameter(
            "format",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Optional[Literal["html", "md", "json"]],
            default=Query(None, description="html (default), md or json; for ids that end in a dot-suffix"),
        ),
    ]
    for f in O.fields():
        desc = f.help
        if f.kind.startswith("list"):
            desc += " (comma-separated or repeated)"
        elif f.kind == "dict":
            desc += " (NAME=VALUE, comma-separated or repeated)"
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=types_[f.kind], default=Query(None, description=desc or None)))

    def dep(**_kw):
        return None

    dep.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return dep


def _split_format(raw: str, fmt: str | None) -> tuple[str, str]:
    if fmt:
        return raw, fmt
    for suffix, name in ((".json", "json"), (".md", "md")):
        if raw.endswith(suffix):
            return raw[: -len(suffix)], name
    return raw, "html"


def create_app(settings: Settings | None = None) -> FastAPI:
    s = settings or Settings()
    state: dict = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        engine = s.engine if s.engine is not None else await run_in_threadpool(connect, s.db_url)
        pool = Pool(s.workers, time_limit_s=s.time_limit_s, memory_limit_bytes=int(s.memory_limit_gib * (1 << 30)), queue_size=s.queue_size, env={**worker_env(), **s.worker_env})
        await pool.start()
        from .service import Service

        state["engine"], state["pool"] = engine, pool
        state["service"] = Service(engine, pool, time_limit_s=s.time_limit_s, offline=s.offline)
        warm_task = None
        if s.warm is not None:
            state["warm"] = {"done": 0, "failed": 0, "skipped": 0, "finished": False}
            warm_task = asyncio.create_task(_warm(state, s, {**worker_env(), **s.worker_env}))
        try:
            yield
        finally:
            if warm_task is not None:
                state["warm"]["stop"] = True  # the sweep stops after the item it is running
                warm_task.cancel()
            await pool.close()
            if s.engine is None:
                engine.dispose()

    app = FastAPI(
        title="neurarch",
        version=__version__,
        description="Rebuild a model from its config on fake tensors (no weights read): layers, exact parameter counts, "
        'GPU memory per training mode, what fits on which card, cost. Every error: {"error": {"code", "message", "field"}}.',
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.neurarch = state
    app.state.settings = s

    def service():
        if "service" not in state:
            raise ApiError(503, "not_ready", "the server is starting")
        return state["service"]

    # ------------------------------------------------------------ errors
    def error_response(request: Request, err: ApiError) -> Response:
        if err.status >= 500 and err.code == "internal":
            log.error("internal error on %s: %s", request.url.path, err.message)
        if _wants_json(request):
            return JSONResponse(err.body(), status_code=err.status, headers=err.headers)
        titles = {
            400: "That input is not something neurarch can use",
            404: "No such model",
            413: "Too large",
            422: "That input does not validate",
            429: "Busy",
            503: "The Hub is unreachable",
            504: "Took too long",
        }
        html = pages.env().get_template("error.html").render(base="", status=err.status, title=titles.get(err.status, "Something went wrong"), message=err.message, field=err.field)
        return HTMLResponse(html, status_code=err.status, headers=err.headers)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return error_response(request, exc)

    @app.exception_handler(NeurarchError)
    async def _neurarch_error(request: Request, exc: NeurarchError):
        return error_response(request, from_exception(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = [str(x) for x in first.get("loc", ()) if x not in ("body", "query", "path")]
        fieldname = ".".join(loc) or None
        msg = first.get("msg", "invalid input")
        return error_response(request, ApiError(422, "invalid", f"{fieldname}: {msg}" if fieldname else msg, fieldname))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = {404: "no_route", 405: "method_not_allowed", 413: "too_large"}.get(exc.status_code, "http")
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404:
            message = f"no page at {request.url.path}"
        return error_response(request, ApiError(exc.status_code, code, message, headers=dict(exc.headers or {})))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):
        return error_response(request, from_exception(exc))

    # ------------------------------------------------------------ helpers
    def note_cache(request: Request, cache: str) -> None:
        request.scope.setdefault("state", {})["cache"] = cache

    async def model_result(request: Request, model_id: str, revision: str | None, values: dict):
        check_model_id(model_id)
        res = await service().model_report(model_id, revision, values)
        note_cache(request, res.cache)
        return res

    def render(request: Request, res, fmt: str, *, values: dict, revision: str | None, twin_base: str, query: str, permalink: str | None = None) -> Response:
        headers = {"X-Neurarch-Cache": res.cache}
        if fmt == "json":
            return Response(res.json if res.json.endswith("\n") else res.json + "\n", media_type="application/json", headers=headers)
        if fmt == "md":
            from ..render import render as render_report

            return PlainTextResponse(pages.markdown_safe(render_report(res.report, "markdown")), media_type="text/markdown; charset=utf-8", headers=headers)
        ctx = pages.context(res.report, values=values, revision=revision, base="", cache=res.cache, permalink=permalink)
        q = f"?{query}" if query else ""
        ctx["twin_md"], ctx["twin_json"] = f"{twin_base}.md{q}", f"{twin_base}.json{q}"
        ctx["action"] = twin_base
        ctx["badges"] = [] if permalink else [(k, f"/badge/{res.report.model.id if not res.report.model.id.startswith('paste:') else ''}/{k}.json{q}") for k in BADGE_KINDS]
        return HTMLResponse(pages.env().get_template("model.html").render(**ctx), headers=headers)

    # Rendered pages of computed reports, by URL (PageCache, the outermost layer, answers them).
    rendered = RenderedPages()
    state["rendered"] = rendered

    def keep_page(request: Request, response: Response) -> Response:
        if response.status_code == 200 and request.method == "GET":
            route = getattr(request.scope.get("route"), "path", None) or request.url.path
            media_type = response.headers.get("content-type", response.media_type)
            if media_type is not None:  # a page with no content type is not kept (never the case for ours)
                rendered.keep(request.scope["path"], request.scope.get("query_string", b""), bytes(response.body), media_type, route)
        return response

    stored_permalinks: set[str] = set()  # ids this process has stored (or found stored): no database write again

    async def keep_permalink(config: dict, values: dict) -> str:
        pid = store.permalink_id(config, values)
        if pid not in stored_permalinks:
            await run_in_threadpool(store.put_permalink, state["engine"], config, values)
            if len(stored_permalinks) > 100_000:  # bounded: forgetting only costs one idempotent write
                stored_permalinks.clear()
            stored_permalinks.add(pid)
        return pid

    def options_from_query(request: Request) -> dict:
        return O.normalize(O.from_query(list(request.query_params.multi_items())))

    # ------------------------------------------------------------ pages
    @app.get("/", response_class=HTMLResponse, summary="Start page: enter a model id, the catalog, paste")
    async def index():
        from ..sources.catalog import entries

        es = list(entries().values())
        return HTMLResponse(pages.env().get_template("index.html").render(base="", entries=es))

    @app.get("/models", summary="Form target: redirects to /models/{id}", responses=openapi_responses(400, html=True), status_code=303, response_class=RedirectResponse)
    async def models_form(id: str = Query(..., max_length=200)):
        model_id = check_model_id(id.strip())
        return RedirectResponse(f"/models/{model_id}", status_code=303)

    query_doc = _query_params_doc()
    from fastapi import Depends

    @app.get(
        "/models/{model_id:path}",
        summary="One model: the plan page, or its Markdown (.md) / Index JSON (.json) twin",
        description="Every plan option is a query parameter (the CLI's flags). The .json twin equals `neurarch-trace ID --plan --format json` with the same options, apart from the `seconds` fields.",
        responses={
            200: {"content": {"text/html": {}, "text/markdown": {}, "application/json": {"schema": {"$ref": "#/components/schemas/Report"}}}, "description": "The page, or its twin"},
            **openapi_responses(400, 404, 422, 429, 503, 504, html=True),
        },
        response_class=HTMLResponse,
    )
    async def model_page(request: Request, model_id: str, _doc=Depends(query_doc)):
        raw, fmt = _split_format(model_id, request.query_params.get("format"))
        if fmt not in ("html", "md", "json"):
            raise ApiError(400, "bad_option", f"format must be html, md or json, got {fmt!r}", "format")
        revision = request.query_params.get("revision") or None
        values = options_from_query(request)
        res = await model_result(request, raw, revision, values)
        query = str(request.url.query)
        query = "&".join(p for p in query.split("&") if p and not p.startswith("format="))
        return keep_page(request, render(request, res, fmt, values=values, revision=revision, twin_base=f"/models/{raw}", query=query))

    @app.get(
        "/badge/{model_id:path}/{kind}.json",
        response_model=Badge,
        response_model_exclude_none=True,
        summary="A shields.io endpoint badge: params, fits, verifier or changes (what changed upstream)",
        description="Errors about the model itself (not found, unreachable Hub, time limit) are a badge with isError.",
        responses=openapi_responses(400, 404, 422, 429),
    )
    async def badge(request: Request, model_id: str, kind: str, _doc=Depends(query_doc)):
        if kind not in BADGE_KINDS:
            raise ApiError(400, "bad_option", f"unknown badge {kind!r}; choose one of {', '.join(BADGE_KINDS)}", "kind")
        check_model_id(model_id)
        if kind == "changes":  # read from the tracker's store: no plan is computed
            from .changes_routes import changes_badge

            return JSONResponse(Badge(**await run_in_threadpool(changes_badge, request, model_id)).model_dump(exclude_none=True))
        values = options_from_query(request)
        try:
            res = await model_result(request, model_id, request.query_params.get("revision") or None, values)
        except ApiError as e:
            if e.status in (400, 422, 429):
                raise
            return JSONResponse(Badge(label="neurarch", message=e.code.replace("_", " "), color="lightgrey", isError=True).model_dump(exclude_none=True))
        return JSONResponse(make_badge(res.report, kind).model_dump(exclude_none=True), headers={"X-Neurarch-Cache": res.cache})

    @app.get("/paste", response_class=HTMLResponse, summary="Paste or upload a config.json")
    async def paste_form():
        return HTMLResponse(pages.env().get_template("paste.html").render(base="", fields=pages.form_fields({}), config_text="", error=None))

    _paste_form: dict[str, Any] = {
        "type": "object",
        "required": ["config"],
        "properties": {"config": {"type": "string", "description": "The config.json text"}},
        "additionalProperties": {"type": "string", "description": "A plan option (the /models query parameters)"},
    }

    @app.post(
        "/paste",
        summary="Store a pasted config with its options; redirects to its permalink",
        responses={303: {"description": "Stored: redirects to the permalink /p/{hash}"}, **openapi_responses(400, 413, 422, html=True)},
        response_class=HTMLResponse,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/x-www-form-urlencoded": {"schema": _paste_form},
                    "multipart/form-data": {"schema": {**_paste_form, "required": [], "properties": {**_paste_form["properties"], "file": {"type": "string", "format": "binary"}}}},
                },
            }
        },
    )
    async def paste_submit(request: Request):
        form = await request.form()
        text = ""
        upload = form.get("file")
        if upload is not None and hasattr(upload, "read"):
            data = await upload.read()
            if data:
                text = data.decode("utf-8", "replace")
        if not text:
            text = str(form.get("config") or "")
        items = [(k, v) for k, v in form.multi_items() if k not in ("config", "file") and isinstance(v, str)]
        try:
            config = parse_config_text(text)
            values = O.normalize(O.from_query(items))
            check_config(config)
        except (ApiError, NeurarchError) as e:
            err = from_exception(e)
            html = pages.env().get_template("paste.html").render(base="", fields=pages.form_fields({}), config_text=text, error=err.message)
            return HTMLResponse(html, status_code=err.status)
        pid = await keep_permalink(config, values)
        return RedirectResponse(f"/p/{pid}", status_code=303)

    @app.get(
        "/p/{pid}",
        response_class=HTMLResponse,
        summary="A pasted config's permalink page (.md / .json twins)",
        responses={
            200: {"content": {"text/html": {}, "text/markdown": {}, "application/json": {"schema": {"$ref": "#/components/schemas/Report"}}}, "description": "The page, or its twin"},
            **openapi_responses(400, 404, 422, 429, 503, 504, html=True),
        },
    )
    async def permalink(request: Request, pid: str):
        raw, fmt = _split_format(pid, request.query_params.get("format"))
        if not (len(raw) == 64 and all(c in "0123456789abcdef" for c in raw)):
            raise ApiError(404, "not_found", f"no permalink {raw[:80]!r}")
        found = await run_in_threadpool(store.get_permalink, state["engine"], raw)
        if found is None:
            raise ApiError(404, "not_found", f"no permalink {raw!r}")
        config, values = found
        res = await service().paste_report(raw, config, values)
        note_cache(request, res.cache)
        return keep_page(request, render(request, res, fmt, values=values, revision=None, twin_base=f"/p/{raw}", query="", permalink=f"/p/{raw}"))

    @app.get("/checks", response_class=HTMLResponse, summary="Every verifier rule")
    async def checks():
        from ..verify.engine import list_rules

        return HTMLResponse(pages.env().get_template("checks.html").render(base="", rules=list_rules()))

    @app.get("/checks/{rule}", response_class=HTMLResponse, summary="One verifier rule with its docs page", responses=openapi_responses(404, html=True))
    async def check(rule: str):
        from ..verify.engine import list_rules

        found = [r for r in list_rules() if r.id == rule]
        if not found:
            raise ApiError(404, "not_found", f"no rule {rule[:80]!r}; /checks lists them")
        return HTMLResponse(pages.env().get_template("check.html").render(base="", rule=found[0], doc=pages.rule_doc_html(rule)))

    @app.get("/docs", response_class=HTMLResponse, summary="This API, generated from /openapi.json")
    async def docs():
        return HTMLResponse(pages.env().get_template("docs.html").render(base="", **_docs_context(app.openapi())))

    # ------------------------------------------------------------ API
    @app.post(
        "/api/v1/plan",
        summary="The Report JSON of a model id or a config object",
        responses={200: {"model": Report, "description": "The Index JSON (docs/json.md)"}, **openapi_responses(400, 404, 413, 422, 429, 503, 504)},
    )
    async def api_plan(request: Request, body: PlanRequest = Body(...)) -> Report:
        if (body.model is None) == (body.config is None):
            raise ApiError(422, "invalid", "give exactly one of model (an id) or config (a config.json object)", "model")
        values = O.normalize(body.options.model_dump())
        if body.model is not None:
            res = await model_result(request, body.model, body.revision, values)
            headers = {"X-Neurarch-Cache": res.cache}
        else:
            if body.revision is not None:
                raise ApiError(422, "invalid", "revision applies to a model id, not to a config", "revision")
            config = body.config
            assert config is not None  # exactly one of model and config, checked above
            check_config(config)
            pid = await keep_permalink(config, values)
            res = await service().paste_report(pid, config, values)
            note_cache(request, res.cache)
            headers = {"X-Neurarch-Cache": res.cache, "Link": f'</p/{pid}>; rel="permalink"'}
        return Response(res.json, media_type="application/json", headers=headers)  # type: ignore[return-value]

    @app.post(
        "/api/v1/paste",
        status_code=201,
        response_model=PasteResponse,
        summary="Store a config and options under a permalink",
        description="Returns at once; the server computes the report in the background, so the permalink is ready soon after.",
        responses=openapi_responses(400, 413, 422),
    )
    async def api_paste(body: PasteRequest):
        values = O.normalize(body.options.model_dump())
        check_config(body.config)
        pid = await keep_permalink(body.config, values)

        async def compute():
            with contextlib.suppress(Exception):
                await service().paste_report(pid, body.config, values)

        task = asyncio.create_task(compute())
        state.setdefault("background", set()).add(task)
        task.add_done_callback(state["background"].discard)
        return PasteResponse(id=pid, url=f"/p/{pid}", json_url=f"/p/{pid}.json")

    @app.get("/api/v1/status", response_model=Status, summary="Workers, queue and cache figures")
    async def status():
        st = state["pool"].stats()
        stored = await run_in_threadpool(store.count_reports, state["engine"])
        return Status(
            version=__version__, computed=state["service"].computed, reports_stored=stored, warm=state.get("warm"), **{**st, "worker_rss_bytes": {str(k): v for k, v in st["worker_rss_bytes"].items()}}
        )

    # Revision tracker routes (neurarch.web.changes_routes) are included here:
    from .changes_routes import router as changes_router

    app.include_router(changes_router)

    app.add_middleware(BodyLimit, limit=s.body_limit)
    app.add_middleware(AccessLog)
    app.add_middleware(PageCache, pages=rendered)  # outermost: a cached page is answered before anything else runs
    return app


def parse_config_text(text: str) -> dict:
    if not text.strip():
        raise ApiError(400, "bad_config", "paste a config.json (a JSON object) or upload one", "config")
    if len(text.encode("utf-8")) > MAX_CONFIG_BYTES:
        raise ApiError(413, "too_large", f"a config.json over {MAX_CONFIG_BYTES:,} bytes is not one", "config")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ApiError(400, "bad_config", f"config: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}", "config") from None
    if not isinstance(config, dict):
        raise ApiError(400, "bad_config", f"config: a config.json must hold a JSON object, not {type(config).__name__}", "config")
    return config


def check_config(config: dict) -> None:
    """Refuse what the server never builds: remote code (the CLI's message), non-config JSON."""
    from ..sources import check_remote_code

    if not isinstance(config.get("model_type"), str) or not config.get("model_type"):
        raise ApiError(400, "bad_config", "config: a config.json names its model_type (a string); this one does not", "config.model_type")
    try:
        check_remote_code(config, "the pasted config", False)
    except NeurarchError as e:
        err = from_exception(e)
        err.message += " (and the server never runs remote code)"
        err.field = "config.auto_map" if config.get("auto_map") else "config.trust_remote_code"
        raise err from None


def make_badge(report: Report, kind: str) -> Badge:
    if kind == "params":
        p = report.params
        msg = f"{p.derived:,}"
        if p.checkpoint is None:
            return Badge(label="params", message=msg, color="blue")
        if p.delta == 0:
            return Badge(label="params", message=f"{msg} (= checkpoint)", color="brightgreen")
        return Badge(label="params", message=f"{msg} ({p.delta:+,} vs checkpoint)", color="green" if p.explained else "yellow")
    if kind == "fits":
        mode = next((m for m in ("full", "lora", "qlora", "inference") if report.cards and m in report.cards[0].max_batch), None)
        if mode is None:
            return Badge(label="fits", message="not planned", color="lightgrey")
        label = {"full": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA", "inference": "inference"}[mode]
        fit = pages.smallest_fit(report, mode)
        if fit is None:
            return Badge(label=label, message="no single card", color="red")
        card, batch = fit
        return Badge(label=label, message=f"{card.name} (batch {batch:,})", color="brightgreen")
    v = report.verifier
    if v is None:
        return Badge(label="verifier", message="not run", color="lightgrey")
    c = v.counts
    msg = f"{c.get('error', 0)} error, {c.get('warn', 0)} warn"
    color = "red" if c.get("error") else ("yellow" if c.get("warn") else "brightgreen")
    return Badge(label="verifier", message=msg, color=color)


async def _warm(state: dict, s: Settings, env: dict) -> None:
    """Pre-compute the catalog pages (and ``s.warm``'s ids) with the default
    options through the sweep runner the benchmarks use (:mod:`neurarch.sweep`:
    each item in a supervised process of its own, under the server's time and
    memory limits), storing each report under the key a visit looks up.  Ids
    already in the store are skipped.  Runs beside the server's own workers."""
    from ..sources.catalog import entries

    values = O.normalize({})
    ids = list(entries()) if s.warm_catalog else []
    ids += [i for i in s.warm or [] if i not in ids]
    engine, counts = state["engine"], state["warm"]
    todo = []
    for model_id in ids:
        try:
            check_model_id(model_id)
        except NeurarchError as e:
            counts["failed"] += 1
            log.warning("warm: %s: %s", model_id, e)
            continue
        if await run_in_threadpool(store.get_report, engine, store.ReportKey.make(model_id, None, values)) is not None:
            counts["skipped"] += 1
        else:
            todo.append({"id": model_id, "options": values, "timeout_s": s.time_limit_s, "offline": s.offline})
    if todo:
        await run_in_threadpool(_warm_sweep, engine, todo, values, s, env, counts)
    counts["finished"] = True
    log.info("warm: %d pages computed, %d already stored, %d failed", counts["done"], counts["skipped"], counts["failed"])


def _warm_sweep(engine, todo: list[dict], values: dict, s: Settings, env: dict, counts: dict) -> None:
    import tempfile
    from pathlib import Path

    from ..sweep import iter_sweep
    from .worker import warm_job

    with tempfile.TemporaryDirectory(prefix="neurarch-warm-") as tmp:
        records = iter_sweep(
            todo,
            job=warm_job,
            results_path=Path(tmp) / "warm.jsonl",
            time_limit_s=s.time_limit_s,
            memory_limit_bytes=int(s.memory_limit_gib * (1 << 30)),
            workers=1,
            resume=False,
            preload=("neurarch.web.preload",),  # worker.warm(): what a pool worker imports at start
            env=env,
            key=lambda item: item["id"],
        )
        for rec in records:
            if counts.get("stop"):
                records.close()  # the sweep's cluster is closed
                return
            answer = rec.value if rec.ok else None
            if answer and answer[0] == "ok":
                _, text, seconds, revision = answer
                store.put_report(engine, store.ReportKey.make(rec.key, None, values), values, text, resolved_revision=revision, seconds=seconds)
                counts["done"] += 1
            else:
                counts["failed"] += 1
                why = answer[3] if answer else (rec.error or rec.status)
                log.warning("warm: %s: %s", rec.key, why)


def _docs_context(spec: dict) -> dict:
    ops = []
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            params = []
            for p in op.get("parameters", []):
                sch = p.get("schema", {})
                typ = sch.get("type") or " | ".join(x.get("type", "?") for x in sch.get("anyOf", []) if x.get("type") != "null") or "?"
                params.append(
                    {
                        "name": p["name"],
                        "where": p.get("in"),
                        "type": typ,
                        "required": p.get("required", False),
                        "default": "" if sch.get("default") is None else sch.get("default"),
                        "description": p.get("description", ""),
                    }
                )
            body = None
            content = (op.get("requestBody") or {}).get("content", {})
            for media in content.values():
                ref = media.get("schema", {}).get("$ref", "")
                body = ref.rsplit("/", 1)[-1] or "object"
            ops.append(
                {
                    "id": op.get("operationId", path),
                    "method": method.upper(),
                    "path": path,
                    "summary": op.get("summary"),
                    "description": op.get("description"),
                    "params": params,
                    "body": body,
                    "responses": [(code, r.get("description", "")) for code, r in op.get("responses", {}).items()],
                }
            )
    schemas = sorted((k, json.dumps(v, indent=2)) for k, v in spec.get("components", {}).get("schemas", {}).items())
    return {"spec": spec, "ops": ops, "schemas": schemas}
