"""Every error is a JSON body in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.

Routes raise `APIError`; FastAPI's own failures (validation, unknown route, wrong method) and
anything unexpected are turned into the same shape by the handlers `install` registers:

* malformed JSON -> 400 `invalid_json`; a field that fails validation -> 422 naming the field,
  what it should be and what it got; unknown route -> 404; wrong method -> 405;
* anything else -> 500 `internal_error` (a bug: the message says so, the traceback goes to the log);
* a request whose task is cancelled before it answered (uvicorn's graceful shutdown timed out)
  -> 503 `shutting_down` (`AnswerCancelled`), where uvicorn would send `500 text/plain`.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

log = logging.getLogger("editapply.server")

TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
         405: "invalid_request_error", 413: "invalid_request_error", 415: "invalid_request_error",
         422: "invalid_request_error", 500: "server_error", 503: "server_error"}
BODY_RULES = ("empty_snippet",)  # schemas.py's rules over a whole body: their type is their code
CODES = {400: "bad_request", 401: "invalid_api_key", 404: "not_found", 405: "method_not_allowed",
         413: "request_too_large", 415: "unsupported_media_type", 422: "invalid_value",
         500: "internal_error", 503: "overloaded"}


class APIError(Exception):
    """An error with its HTTP status, raised anywhere a request is handled."""

    def __init__(self, status: int, message: str, *, code: str | None = None, param: str | None = None,
                 type: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or CODES.get(status, "error")
        self.param = param
        self.type = type or TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
        self.headers = headers

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def unavailable(exc: Exception, retry_after_s: int = 2) -> APIError:
    """503 for an engine that cannot be reached (a vLLM backend down or gone mid-request); the
    server itself stays up and the request may be retried."""
    return APIError(503, f"the engine is unavailable: {exc}", code="engine_unavailable",
                    headers={"Retry-After": str(retry_after_s)})


def shutting_down(retry_after_s: int = 2) -> APIError:
    """503 for a request the server could not finish because it is stopping (state.py, `drain`)."""
    return APIError(503, "the server is shutting down; this request was not finished (retry it: on another server, or "
                         "on this one once it is back)", code="shutting_down", headers={"Retry-After": str(retry_after_s)})


def validation_error(exc: RequestValidationError) -> APIError:
    """FastAPI's list of pydantic errors -> one APIError saying which field, what and why."""
    errors = exc.errors()
    for e in errors:
        if e.get("type") == "json_invalid":
            error = (e.get("ctx") or {}).get("error", "not JSON")
            at = e["loc"][1] if len(e.get("loc", ())) > 1 else "?"
            return APIError(400, f"malformed JSON in the request body: {error} (at character {at})", code="invalid_json")
    messages, params = [], []
    for e in errors:
        param = field_path(e.get("loc", ()))
        if param in params:
            continue  # a union's other members failing too says nothing new
        params.append(param)
        if param is None:
            if e.get("type") in BODY_RULES:  # a rule over several fields (schemas.py)
                messages.append(e.get("msg", "invalid"))
            else:
                messages.append(f"the request body must be a JSON object ({_shorten(e.get('msg', ''))})")
            continue
        got = "" if e.get("type") == "missing" else f" (got {_shorten(repr(e.get('input')))})"
        messages.append(f"{param}: {_lower_first(e.get('msg', 'invalid'))}{got}")
    more = f"; and {len(messages) - 5} more" if len(messages) > 5 else ""
    messages = messages[:5]
    params = [p for p in params if p is not None]
    first = errors[0].get("type") if errors else None
    code = "missing_field" if first == "missing" else first if first in BODY_RULES else "invalid_value"
    return APIError(422, "; ".join(messages) + more, param=params[0] if params else None, code=code)


def field_path(loc) -> str | None:
    """('body', 'messages', 0, 'content') -> 'messages[0].content'; the body itself -> None."""
    parts = [p for p in loc if p != "body"]
    # pydantic puts the name of the union member it tried into the path ('str', 'list[...]').
    parts = [p for p in parts if not (isinstance(p, str) and ("[" in p or p in ("str", "int", "float", "bool")))]
    if not parts:
        return None
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        return validation_error(exc).response()

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException):
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return APIError(exc.status_code, message, headers=getattr(exc, "headers", None)).response()

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return APIError(500, f"internal error ({type(exc).__name__}); this is a bug in editapply").response()


class AnswerCancelled:
    """ASGI middleware: a request task cancelled before it sent a response answers 503
    `shutting_down` in the JSON shape (then the cancellation goes on). Only a stopping server
    cancels request tasks (a client that leaves is a disconnect message, not a cancel)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracked(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if not started:
                with suppress(Exception):
                    await shutting_down().response()(scope, receive, send)
            raise
