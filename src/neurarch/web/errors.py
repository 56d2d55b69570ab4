"""One error shape for every failure of the web app and the API:

    {"error": {"code": "not_found", "message": "no model found for 'x/y': ...", "field": null}}

``message`` is what the CLI prints after ``neurarch-trace: error:``; ``field``
names the option or body field at fault where there is one.  neurarch's own
errors map to HTTP statuses in one table (:data:`STATUS`).
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict

from .. import errors as E
from .ids import BadModelId


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str
    message: str
    field: Optional[str] = None


class ErrorResponse(BaseModel):
    """Every 4xx/5xx answer of the API."""

    model_config = ConfigDict(extra="forbid")
    error: ErrorBody


class ApiError(Exception):
    """An error with its HTTP status, code and (optional) field; ``headers`` go on the response."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "field": self.field}}

    def as_tuple(self) -> tuple:
        return (self.status, self.code, self.message, self.field, self.headers)

    @classmethod
    def from_tuple(cls, t) -> "ApiError":
        return cls(*t)


# The most specific class first: (class, status, code).
STATUS: tuple = (
    (BadModelId, 400, "bad_id"),
    (E.SourceNotFoundError, 404, "not_found"),
    (E.HubError, 503, "hub_unreachable"),
    (E.TraceTimeout, 504, "timeout"),
    (E.RemoteCodeError, 400, "remote_code_refused"),
    (E.UnknownRuleError, 400, "unknown_rule"),
    (E.LimitError, 400, "limit"),
    (E.ConfigError, 400, "bad_config"),
    (E.InputError, 400, "bad_option"),
    (E.BuildError, 422, "build_failed"),
    (E.VisionUnavailableError, 400, "unsupported"),
    (E.NeurarchError, 400, "bad_input"),
)

# Which option a neurarch error is about, when it carries no field itself.
_FIELDS = {E.UnknownRuleError: "disable"}


def _option_named_in(message: str) -> str | None:
    """The option a CLI-style message is about (``unknown --optimizer 'x'`` -> ``optimizer``)."""
    import re

    from .options import fields

    names = {f.name for f in fields()} | {"price": "prices"}.keys()
    for flag in re.findall(r"--([a-z][a-z-]*)", message):
        name = flag.replace("-", "_")
        name = {"price": "prices"}.get(name, name)
        if name in names:
            return name
    return None


def from_exception(exc: BaseException) -> ApiError:
    """The API error for any exception: neurarch's own by :data:`STATUS`, anything else a 500."""
    if isinstance(exc, ApiError):
        return exc
    msg = str(exc).strip()
    for cls, status, code in STATUS:
        if isinstance(exc, cls):
            field = getattr(exc, "field", None) or _FIELDS.get(cls) or _option_named_in(msg)
            return ApiError(status, code, msg or cls.__name__, field if isinstance(field, str) else None)
    first = msg.splitlines()[0] if msg else ""
    return ApiError(500, "internal", f"internal error: {type(exc).__name__}: {first}".rstrip(": "))


RESPONSES = {
    400: "Bad input: what the CLI refuses (unknown option value, malformed config, remote code).",
    404: "Unknown model: not in the bundled catalog, not on the Hub.",
    413: "Request body over the limit (default 1 MB).",
    422: "Input that does not validate (wrong type, unknown field), a model that cannot be built, or a simulation past the server's memory limit.",
    429: "The queue is full; retry after the number of seconds in Retry-After.",
    503: "The Hugging Face Hub could not be reached.",
    504: "The plan ran past the server's per-request time limit.",
}


def openapi_responses(*codes: int, html: bool = False) -> dict:
    """``responses=`` for a FastAPI route: the error shape under each status.
    ``html``: a page route, whose errors are an HTML page when the client asks for text/html."""
    if not html:
        return {c: {"model": ErrorResponse, "description": RESPONSES[c]} for c in codes}
    ref = {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}
    return {c: {"description": RESPONSES[c] + " An HTML page when the client accepts text/html.", "content": {"application/json": ref, "text/html": {"schema": {"type": "string"}}}} for c in codes}
