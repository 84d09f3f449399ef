"""Request-body guard (ASGI middleware): size limit, JSON content type, valid UTF-8.

Runs before FastAPI parses anything, so an oversized body is refused without being buffered
(413 at once when Content-Length says so, or as soon as the received bytes pass the limit), a
non-JSON content type gets 415, and bytes that are not UTF-8 get 400 naming the offset (JSON
must be UTF-8; FastAPI would otherwise report them as malformed JSON or worse). The checked body
is replayed to the app unchanged.
"""

from __future__ import annotations

from starlette.datastructures import Headers

from engine.server.errors import APIError

BODY_METHODS = ("POST", "PUT", "PATCH")


class BodyGuard:
    def __init__(self, app, settings):
        self.app = app
        self.settings = settings

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            return await self.app(scope, receive, send)
        error, body = await self._read(scope, receive)
        if error is not None:
            return await error.response()(scope, receive, send)
        if body is None:  # the client left while sending
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: waits for the client to disconnect

        await self.app(scope, replay, send)

    async def _read(self, scope, receive) -> tuple[APIError | None, bytes | None]:
        limit = self.settings.max_body_bytes
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        if length is not None:
            if not length.strip().isdigit():
                return APIError(400, f"Content-Length must be a number of bytes, got {length!r}", param="Content-Length"), None
            if int(length) > limit:
                return _too_large(int(length), limit), None
        ctype = headers.get("content-type")
        if ctype and not _is_json(ctype):
            return APIError(415, f"the request body must be JSON: send Content-Type: application/json (got {ctype!r})",
                            param="Content-Type"), None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None, None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return _too_large(size, limit, at_least=True), None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            return APIError(400, f"the request body is not valid UTF-8 (byte 0x{body[exc.start]:02x} at offset "
                                 f"{exc.start}: {exc.reason})", code="invalid_encoding"), None
        return None, body


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _too_large(size: int, limit: int, at_least: bool = False) -> APIError:
    what = f"at least {size}" if at_least else f"{size}"
    return APIError(413, f"the request body is {what} bytes; the limit is {limit} bytes (EDITAPPLY_MAX_BODY_BYTES)")
