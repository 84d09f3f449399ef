"""The client side of `POST /v1/apply`: run an apply on a remote engine server (`--engine URL`).

The body is `ApplyRequest.as_dict()` (`initial_code`, `edit_snippet`, and the optional fields set
to other than their defaults); the response is `ApplyResult.as_dict()`. A bearer token comes from
`EDITAPPLY_API_KEY` when set. Errors say what went wrong in one line: `RemoteInputError` for a 4xx
(the server refused the request: bad input, context limit) or a URL where nothing answers (both
the caller's to fix: the CLI's exit 2), `RemoteError` when the server failed (5xx, a malformed
answer).
"""

from __future__ import annotations

import os

import httpx

from engine.apply.errors import ApplyError
from engine.apply.pipeline import ApplyRequest
from engine.apply.result import ApplyResult

CONNECT_TIMEOUT_S = 10.0


class RemoteError(RuntimeError):
    """The engine server could not serve the request (unreachable, 5xx, a malformed answer)."""


class RemoteInputError(ApplyError):
    """The engine server refused the request as bad input (a 4xx), or nothing answers at the URL."""


def auth_headers(api_key: str | None = None) -> dict:
    """The bearer token of `api_key`, else of EDITAPPLY_API_KEY; none when neither is set."""
    key = api_key or os.environ.get("EDITAPPLY_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def error_message(body) -> str:
    """The human part of an error answer or event: `{"error": {"message"}}` (ours, OpenAI's),
    `{"detail"}` (FastAPI's), else the body as text."""
    if isinstance(body, dict):
        err = body.get("error", body.get("detail", body))
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)
        return str(err)
    return str(body)


def response_message(response: httpx.Response) -> str:
    try:
        return error_message(response.json())
    except ValueError:
        return response.text.strip()[:300] or response.reason_phrase


def remote_apply(url: str, req: ApplyRequest, api_key: str | None = None, timeout_s: float | None = None) -> ApplyResult:
    """POST `req` to `url`/v1/apply and return the server's result."""
    headers = auth_headers(api_key)
    endpoint = url.rstrip("/") + "/v1/apply"
    try:
        response = httpx.post(endpoint, json=req.as_dict(), headers=headers,
                              timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S))
    except httpx.HTTPError as exc:
        raise RemoteInputError(f"cannot reach the engine at {endpoint}: {exc}") from None
    if 400 <= response.status_code < 500:
        raise RemoteInputError(f"the engine refused the request ({response.status_code}): {response_message(response)}")
    if response.status_code != 200:
        raise RemoteError(f"the engine failed ({response.status_code}): {response_message(response)}")
    try:
        return ApplyResult.from_dict(response.json())
    except (ValueError, KeyError, TypeError) as exc:
        raise RemoteError(f"the engine's answer is not an apply result: {exc}") from None
