"""Bearer-token authentication (ASGI middleware) for every route but /health.

With an API key set (`--api-key` or EDITAPPLY_API_KEY), a request needs
`Authorization: Bearer <key>`; the token is compared in constant time (`hmac.compare_digest`),
so response timing says nothing about how much of a guess was right. The key is read from the
settings on every request, so it can be changed while the server runs.
"""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers

from engine.server.errors import APIError

OPEN_PATHS = frozenset({"/health"})


class BearerAuth:
    def __init__(self, app, settings):
        self.app = app
        self.settings = settings

    async def __call__(self, scope, receive, send):
        key = self.settings.api_key
        if scope["type"] != "http" or not key or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        error = check(Headers(scope=scope).get("authorization"), key)
        if error is not None:
            return await error.response()(scope, receive, send)
        await self.app(scope, receive, send)


def check(header: str | None, key: str) -> APIError | None:
    """None if `header` carries the right bearer token, else the 401 to send."""
    challenge = {"WWW-Authenticate": "Bearer"}
    if not header:
        return APIError(401, "missing API key: send the header 'Authorization: Bearer <key>'", headers=challenge)
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return APIError(401, "the Authorization header must be 'Bearer <key>'", headers=challenge)
    if not hmac.compare_digest(token.strip().encode(), key.encode()):
        return APIError(401, "invalid API key", headers=challenge)
    return None
