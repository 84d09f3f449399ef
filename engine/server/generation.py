"""One engine generation seen from HTTP: text deltas cut at stop strings, disconnects, SSE.

`Generation(state, handle, route, stop)` wraps a submitted request. `deltas()` yields its text as
it is generated; `text(http_request)` collects it for a non-streaming answer while watching the
client, so a client that hangs up cancels the generation (its KV blocks are freed at the
engine's next step). For streams, `SSEResponse` closes the generator when the client goes away,
and the generator's `finally` cancels the request. Either way the outcome is recorded in the
metrics once (`reason` "disconnect" for a client that left).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

from fastapi import Request as HTTPRequest
from starlette.responses import StreamingResponse

from engine.server.errors import APIError, shutting_down, unavailable
from engine.types import EngineUnavailable, GenerationStats


def stops_of(stop: str | list[str] | None) -> tuple[str, ...]:
    """A request's `stop` field (a string, a list, or null) as a tuple."""
    return () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop)


class StopTrimmer:
    """Cuts streamed text before the first stop string, holding back a possible stop prefix.

    With stop ("END",) the last len("END") - 1 = 2 characters are always held back:
    push("ab") -> ""; push("cE") -> "ab" (holds "cE"); push("ND!") -> "c" and `stopped` is set.
    """

    def __init__(self, stop: tuple[str, ...] = ()):
        self.stop = stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.pending = ""
        self.stopped = False

    def push(self, text: str) -> str:
        if self.stopped or not text:
            return ""
        self.pending += text
        hits = [i for i in (self.pending.find(s) for s in self.stop) if i >= 0]
        if hits:
            out, self.pending, self.stopped = self.pending[: min(hits)], "", True
            return out
        cut = len(self.pending) - self.hold
        if cut <= 0:
            return ""
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


class Generation:
    def __init__(self, state, handle, route: str, stop: tuple[str, ...] = ()):
        self.state = state
        self.handle = handle
        self.route = route
        self.trim = StopTrimmer(stop)
        self.finish_reason: str | None = None
        self.stats: GenerationStats | None = None  # the last event's
        self.error: str | None = None
        self.finished = False
        self.disconnected = False
        self.stopped = False  # by the server's shutdown (ServerState.drain)
        self._recorded = False

    def stop_for_shutdown(self) -> None:
        self.stopped = True
        self.state.service.cancel(self.handle)

    async def deltas(self) -> AsyncIterator[str]:
        """Text deltas until the request finishes; then `finish_reason`, `stats` and `error` are set."""
        service = self.state.service
        self.state.running.add(self)
        try:
            async for event in service.astream(self.handle):
                text = self.trim.push(event.text)
                if text:
                    yield text
                if event.finished:  # the last event: astream ends after it
                    self.finish_reason, self.stats, self.error = event.finish_reason, event.stats, event.error
                elif self.trim.stopped:
                    # A stop string the engine's own check has not seen yet: stop paying for tokens.
                    service.cancel(self.handle)
            if not self.trim.stopped and self.finish_reason not in ("cancelled", "error"):
                tail = self.trim.flush()
                if tail:
                    yield tail
            if self.trim.stopped:
                self.finish_reason = "stop"
            self.finished = not self.disconnected
        except EngineUnavailable as exc:
            self.finish_reason, self.error, self.finished = "error", str(exc), True
            raise unavailable(exc, self.state.settings.retry_after_s) from None
        finally:
            self.state.running.discard(self)
            if self.stopped and self.finish_reason == "cancelled":
                self.finish_reason = "shutdown"
            if not self.finished:
                service.cancel(self.handle)
                self.disconnected = True
            self._record()
        if self.finish_reason == "shutdown":
            raise shutting_down(self.state.settings.retry_after_s)
        self.raise_for_error()

    async def text(self, http: HTTPRequest) -> str:
        """The whole text (non-streaming), cancelling the request if the client hangs up."""
        watcher = watch_disconnect(http, self._disconnect)
        try:
            return "".join([d async for d in self.deltas()])
        finally:
            watcher.cancel()

    def _disconnect(self) -> None:
        self.disconnected = True
        self.state.service.cancel(self.handle)

    def raise_for_error(self) -> None:
        if self.finish_reason == "error" or self.error:
            raise APIError(500, f"generation failed in the engine: {self.error or 'unknown error'}")

    def _record(self) -> None:
        if self._recorded:
            return
        self._recorded = True
        reason = "disconnect" if self.disconnected else self.finish_reason
        self.state.metrics.observe_generation(self.route, self.stats, reason)

    @property
    def openai_finish_reason(self) -> str:
        return "length" if self.finish_reason == "length" else "stop"


def watch_disconnect(http: HTTPRequest, on_disconnect) -> asyncio.Task:
    """A task that calls `on_disconnect()` when the client of `http` hangs up (cancel it when done).

    The body has been read by then, so the next ASGI message can only be the disconnect."""
    async def watch():
        while (await http.receive())["type"] != "http.disconnect":
            pass
        on_disconnect()

    return asyncio.create_task(watch())


def usage(stats: GenerationStats) -> dict:
    """OpenAI's usage object from engine stats. Predicted-output counts are the lookup drafts that
    verification accepted / rejected (the prediction is the drafter's first source)."""
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.generated_tokens,
        "total_tokens": stats.prompt_tokens + stats.generated_tokens,
        "prompt_tokens_details": {"cached_tokens": stats.cached_prompt_tokens},
        "completion_tokens_details": {
            "accepted_prediction_tokens": stats.accepted,
            "rejected_prediction_tokens": stats.drafted - stats.accepted,
            "reasoning_tokens": 0,
        },
    }


def public_stats(stats: GenerationStats) -> dict:
    """The speculative-decoding stats a response reports (engine stats minus the token counts,
    which `usage` reports)."""
    return {"steps": stats.steps, "drafted": stats.drafted, "accepted": stats.accepted,
            "accepted_per_step": stats.accepted_per_step, "accepted_per_step_hist": stats.accepted_per_step_hist,
            "acceptance_rate": stats.acceptance_rate, "ttft_ms": stats.ttft_ms,
            "tokens_per_second": stats.tokens_per_second, "seconds": stats.seconds}


def sse(payload: dict | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n"


async def sse_events(deltas: AsyncIterator[str], on_delta: Callable[[str], dict | None],
                     on_end: Callable[[], list[dict] | None], on_error: Callable[[APIError], dict],
                     start: tuple[dict, ...] = ()) -> AsyncIterator[str]:
    """The one SSE loop of every streamed route: `start` events, then an event per text delta
    (`on_delta`; None sends nothing), then `on_end()`'s events and `[DONE]` -- or, should the
    generation fail (the server shutting down included), `on_error(exc)` and `[DONE]`. `on_end`
    returning None ends the stream without `[DONE]` (nobody is listening any more). Closing the
    stream closes `deltas`, which cancels the generation."""
    for event in start:
        yield sse(event)
    try:
        async with aclosing(deltas) as texts:
            async for text in texts:
                if (event := on_delta(text)) is not None:
                    yield sse(event)
    except APIError as exc:
        yield sse(on_error(exc))
        yield sse("[DONE]")
        return
    end = on_end()
    if end is None:
        return
    for event in end:
        yield sse(event)
    yield sse("[DONE]")


class SSEResponse(StreamingResponse):
    """Server-sent events that always close their generator, so its `finally` runs at once when a
    client disconnects (whichever way the ASGI server reports it)."""

    media_type = "text/event-stream"

    def __init__(self, content):
        super().__init__(content, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()
