"""What every route needs: the engine service, the merge pool, the settings, the metrics, and the
checks they share; and what runs now, so that a server told to stop can answer it.

Stopping (SIGTERM, Ctrl-C): uvicorn stops accepting connections and waits a few seconds for the
requests in flight, then cancels them, which used to answer `500 text/plain` (and cut streams
short). `drain()`, called when uvicorn's shutdown begins (serve.py), ends every generation now
running at once -- each answers 503 `shutting_down` in the JSON error shape, a stream sends it as
its error event and then `[DONE]` -- and refuses new work the same way, so every request in
flight gets an answer before the server goes."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from fastapi import Request as HTTPRequest
from starlette.concurrency import run_in_threadpool

from engine.types import EngineUnavailable, Request, RequestError
from engine.server.errors import APIError, shutting_down, unavailable
from engine.server.metrics import Metrics
from engine.server.settings import ServerSettings, model_names
from engine.server.workers import MergePool


@dataclass
class ServerState:
    service: object  # engine.service.EngineService (or anything with its protocol)
    settings: ServerSettings
    metrics: Metrics
    merges: MergePool
    created: int = field(default_factory=lambda: int(time.time()))
    draining: bool = False
    running: set = field(default_factory=set)  # the Generations and HTTPApply runs in flight (stop_for_shutdown)

    def drain(self) -> None:
        """The server is stopping: refuse new work, and end what runs now (each answers 503)."""
        self.draining = True
        for run in list(self.running):
            run.stop_for_shutdown()

    def check_open(self) -> None:
        """503 `shutting_down` once the server has begun to stop."""
        if self.draining:
            raise shutting_down(self.settings.retry_after_s)

    @property
    def model_id(self) -> str:
        return self.settings.model_id or model_names(self.service.cfg.model)[0]

    @property
    def tokenizer(self):
        return self.service.tokenizer

    @property
    def context_limit(self) -> int:
        return self.service.cfg.max_model_len

    @property
    def max_tokens_limit(self) -> int:
        return self.settings.max_tokens_limit or self.context_limit

    def check_model(self, name: str | None) -> None:
        if name is None or name in (self.model_id, *model_names(self.service.cfg.model)):
            return
        raise APIError(404, f"the model {name!r} does not exist here; this server serves {self.model_id!r} (GET /v1/models)",
                       param="model", code="model_not_found")

    def check_capacity(self) -> None:
        """503 with Retry-After when more requests wait for the engine than the bound allows."""
        self.check_open()
        load = self.service.load()
        if load.unavailable:
            raise unavailable(EngineUnavailable(load.unavailable), self.settings.retry_after_s)
        waiting = load.waiting
        if waiting >= self.settings.max_queue:
            raise APIError(503, f"the engine is overloaded: {waiting} requests are waiting (limit {self.settings.max_queue}); "
                                f"retry in {self.settings.retry_after_s} s",
                           headers={"Retry-After": str(self.settings.retry_after_s)})

    def check_tokens_limit(self, requested: int | None, param: str = "max_tokens") -> None:
        """422 when a request asks for more tokens than this server allows."""
        if requested is not None and requested > self.max_tokens_limit:
            raise APIError(422, f"{param}: {requested} is over this server's limit of {self.max_tokens_limit} tokens",
                           param=param)

    def check_prompt_size(self, texts: list[str], param: str) -> None:
        """400 at once when `texts` (what a prompt will hold) surely have more tokens than the
        context: a lower bound from their length, before anything is tokenized (a 3 MB message
        is refused in microseconds, not after seconds of tokenizing)."""
        low = sum(self.tokenizer.min_tokens(t) for t in texts)
        if low + 1 > self.context_limit:
            raise APIError(400, f"the prompt is at least {low} tokens; the model's context limit is {self.context_limit} "
                                "tokens (prompt + output)", param=param, code="context_length_exceeded")

    def max_tokens(self, prompt_tokens: int, requested: int | None, param: str = "max_tokens") -> int:
        """The max_tokens to run with (without one asked for: `default_max_tokens`, at most the
        rest of the context); 400/422 when the request cannot fit the context."""
        limit = self.context_limit
        if prompt_tokens + 1 > limit:
            raise APIError(400, f"the prompt is {prompt_tokens} tokens; the model's context limit is {limit} tokens "
                                "(prompt + output)", param="messages", code="context_length_exceeded")
        if requested is None:
            return min(self.settings.default_max_tokens or limit, self.max_tokens_limit, limit - prompt_tokens)
        self.check_tokens_limit(requested, param)
        if prompt_tokens + requested > limit:
            raise APIError(400, f"the prompt is {prompt_tokens} tokens and {param} asks for {requested} more: "
                                f"{prompt_tokens + requested} tokens, over the model's context limit of {limit} tokens",
                           param=param, code="context_length_exceeded")
        return requested

    def submit(self, request: Request):
        """Queue `request` on the engine (after the overload check); the handle streams via astream."""
        self.check_capacity()
        try:
            return self.service.submit(request, loop=asyncio.get_running_loop())
        except RequestError as exc:
            raise APIError(400, str(exc), code=exc.code) from None
        except EngineUnavailable as exc:
            raise unavailable(exc, self.settings.retry_after_s) from None


def get_state(request: HTTPRequest) -> ServerState:
    return request.app.state.editapply


async def offload(fn, *args, **kwargs):
    """Run CPU work (tokenizing, templating) off the event loop; merges go to `ServerState.merges`."""
    return await run_in_threadpool(fn, *args, **kwargs)
