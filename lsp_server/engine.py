"""The engine behind the language server: one small client interface, two implementations.

* `LocalEngine`: the engine of this process, through the Engine protocol the CLI and the HTTP
  server use (`EngineService`, or a vLLM backend with the `backend` setting). The model is loaded on the first request that needs it, in a worker
  thread, once (`build_service` is the factory: a preset name or an HF folder in, a running
  service out); the deterministic path never calls the engine at all, so it never waits for it.
* `RemoteEngine`: a running `editapply serve`, over its HTTP API: `POST /v1/apply` and
  `POST /v1/rag` with `stream: true` (server-sent events: text deltas, then the result).

Both give `apply(req, plan, on_progress) -> ApplyResult`, `ask(documents, question, max_tokens,
on_progress) -> Answer`, `status() -> dict` and `close()`. `on_progress` sees a `RunProgress`
after each increment. To stop a run, cancel the asyncio task awaiting it: the local engine then
cancels its EngineService handle (the request's KV blocks are freed at the engine's next step),
the remote one closes the HTTP stream (the server cancels a request whose client left).

Errors: `ApplyError` (a ValueError) for input the engine refuses, `EngineUnavailable` when the
engine cannot be reached or loaded (the next request tries again), `EngineFailed` when it failed
while serving.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import asdict, dataclass

import httpx

from engine.apply.client import auth_headers, error_message, response_message
from engine.apply.errors import ApplyCancelled, ApplyError
from engine.apply.model_path import build_job
from engine.apply.pipeline import ApplyRequest, Plan
from engine.apply.result import ApplyResult, Progress
from engine.apply.run import ApplyStream, run_apply
from engine.types import EngineUnavailable  # cannot be reached (remote, vLLM) or loaded (local)
from lsp_server.settings import Settings

ASK_MAX_TOKENS = 512  # an answer's default length (the HTTP API's /v1/rag default too)
CONNECT_TIMEOUT_S = 5.0  # a server that does not accept the connection by then is down
PROBE_TIMEOUT_S = 3.0  # a status probe of a vLLM server


class EngineFailed(RuntimeError):
    """The engine accepted the request and then failed."""


@dataclass(frozen=True)
class RunProgress:
    """A model run so far. The remote stream carries text only: its figures are None."""

    text: str  # everything generated so far
    tokens: int | None = None
    steps: int | None = None
    tokens_per_second: float | None = None
    accepted_per_step: float | None = None  # committed tokens per verify step
    max_tokens: int | None = None


@dataclass(frozen=True)
class Answer:
    """An `editapply.ask` answer and its figures (completion_tokens, steps, tokens_per_second,
    accepted_per_step, ...)."""

    text: str
    finish_reason: str | None
    stats: dict


OnProgress = Callable[[RunProgress], None]
OnStatus = Callable[[str], None]


def build_service(model: str | None, backend: str | None = None, vllm_url: str | None = None):
    """A running engine for `model` (a preset name or an HF folder; None = EDITAPPLY_MODEL, else
    the registry default) on `backend` (ours, or vLLM at `vllm_url` or started here; None =
    EDITAPPLY_BACKEND), configured from the EDITAPPLY_* variables like every front end."""
    from engine.config import EngineConfig
    from engine.service import open_service

    return open_service(EngineConfig.from_env(model=model, backend=backend, vllm_url=vllm_url))


def make_engine(settings: Settings) -> "LocalEngine | RemoteEngine":
    if settings.engine == "remote":
        return RemoteEngine(settings.engine_url, settings.api_key)
    return LocalEngine(settings.model, settings.backend, settings.vllm_url)


class LocalEngine:
    def __init__(self, model: str | None, backend: str | None = None, vllm_url: str | None = None):
        self.model, self.backend, self.vllm_url = model, backend, vllm_url
        self._loading: asyncio.Future | None = None

    @property
    def name(self) -> str:
        from engine.loader.registry import DEFAULT_MODEL  # imports torch: only once a name is wanted

        return self.model or os.environ.get("EDITAPPLY_MODEL") or DEFAULT_MODEL

    async def service(self, on_status: OnStatus | None = None):
        """The EngineService, loading the model on first use. A load that fails is forgotten, so
        the next request tries again; a caller cancelled meanwhile does not stop the load."""
        if self._loading is None or (self._loading.done() and self._loading.exception() is not None):
            if on_status is not None:
                on_status(f"loading {self.name}")
            self._loading = asyncio.ensure_future(asyncio.to_thread(build_service, self.model, self.backend, self.vllm_url))
        try:
            return await asyncio.shield(self._loading)
        except (RuntimeError, OSError, ValueError) as exc:  # not installed, not a model folder, bad config
            raise EngineUnavailable(f"cannot load the model {self.name}: {exc}") from None

    async def apply(self, req: ApplyRequest, plan: Plan, on_progress: OnProgress,
                    on_status: OnStatus | None = None) -> ApplyResult:
        service = await self.service(on_status)
        job = await asyncio.to_thread(build_job, plan, service.tokenizer, service.cfg.max_model_len)
        if on_status is not None:
            on_status("ranking the readings" if job is None else f"prefilling {job.prompt_tokens} prompt tokens")
        text: list[str] = []

        def progress(p: Progress) -> None:
            text.append(p.text)
            on_progress(RunProgress("".join(text), p.tokens, p.steps, p.tokens_per_second, p.accepted_per_step,
                                    job.max_tokens if job else 0))

        # Cancelling this task cancels the stream, which cancels the engine's handle.
        try:
            return await run_apply(ApplyStream(service, req, plan=plan, job=job), progress)
        except ApplyCancelled:  # not by us: the engine was shut down (the settings changed)
            raise EngineFailed("the engine stopped the generation (it was shut down)") from None
        except EngineUnavailable:  # a vLLM backend went away: say so, as for a remote engine
            raise
        except RuntimeError as exc:  # the pipeline's "the engine failed"
            raise EngineFailed(str(exc)) from None

    async def ask(self, documents: list[dict], question: str, max_tokens: int | None, on_progress: OnProgress,
                  on_status: OnStatus | None = None) -> Answer:
        from engine.rag import rag_request
        from engine.types import GenerationStats, SamplingParams

        service = await self.service(on_status)
        request = await asyncio.to_thread(rag_request, service.tokenizer, documents, question)
        room = service.cfg.max_model_len - len(request.prompt_ids)
        request.params = SamplingParams(max_tokens=max(1, min(max_tokens or ASK_MAX_TOKENS, room)))
        handle = service.submit(request, loop=asyncio.get_running_loop())  # RequestError (bad input) here
        text, stats, finish, error = [], GenerationStats(), None, None
        # Cancelling this task stops astream, whose cleanup cancels the handle.
        async with aclosing(service.astream(handle)) as events:
            async for event in events:
                text.append(event.text)
                stats, finish, error = event.stats, event.finish_reason, event.error
                on_progress(RunProgress("".join(text), stats.generated_tokens, stats.steps, stats.tokens_per_second,
                                        stats.accepted_per_step, request.params.max_tokens))
        if error or finish == "error":
            raise EngineFailed(f"the engine failed: {error or 'unknown error'}")
        return Answer("".join(text), finish, {"completion_tokens": stats.generated_tokens,
                                              "prompt_tokens": stats.prompt_tokens, **_figures(asdict(stats))})

    async def status(self) -> dict:
        from engine.loader.registry import PRESETS, is_installed

        loaded = self._loading is not None and self._loading.done() and self._loading.exception() is None
        name = self.name
        # Whether a load can succeed: a preset pulled, or a folder that exists (checked when loaded).
        installed = is_installed(name) if name in PRESETS else os.path.isdir(os.path.expanduser(name))
        out = {"engine": "local", "model": name, "installed": installed, "loaded": loaded}
        if loaded:
            out.update(asdict(self._loading.result().load()))
        if self.vllm_url:
            out["vllm"] = await probe_vllm(self.vllm_url)
        return out

    async def close(self) -> None:
        """Shut the service down (what it runs is cancelled), after a load still under way."""
        if self._loading is None:
            return
        try:
            service = await asyncio.shield(self._loading)
        except (RuntimeError, OSError, ValueError):
            return
        await asyncio.to_thread(service.shutdown)


class RemoteEngine:
    def __init__(self, url: str, api_key: str | None):
        self.url = url
        # No read timeout: a long file streams for as long as the model writes.
        self._http = httpx.AsyncClient(base_url=url, headers=auth_headers(api_key),
                                       timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_S))

    async def apply(self, req: ApplyRequest, plan: Plan, on_progress: OnProgress,
                    on_status: OnStatus | None = None) -> ApplyResult:
        text = ""
        async with aclosing(self._events("/v1/apply", {**req.as_dict(), "stream": True})) as events:
            async for event in events:
                if event.get("type") == "delta":
                    text += event.get("text", "")
                    on_progress(RunProgress(text))
                elif event.get("type") == "result":
                    try:
                        return ApplyResult.from_dict(event)
                    except (KeyError, TypeError, ValueError) as exc:
                        raise EngineFailed(f"the engine's answer is not an apply result: {exc}") from None
        raise EngineFailed(f"the engine at {self.url} ended the stream without a result")

    async def ask(self, documents: list[dict], question: str, max_tokens: int | None, on_progress: OnProgress,
                  on_status: OnStatus | None = None) -> Answer:
        body = {"documents": documents, "question": question, "stream": True, "max_tokens": max_tokens or ASK_MAX_TOKENS}
        text = ""
        async with aclosing(self._events("/v1/rag", body)) as events:
            async for event in events:
                if event.get("type") == "delta":
                    text += event.get("text", "")
                    on_progress(RunProgress(text))
                elif event.get("type") == "result":
                    usage, stats = event.get("usage") or {}, event.get("stats") or {}
                    return Answer(text, event.get("finish_reason"), {
                        "completion_tokens": usage.get("completion_tokens", 0),
                        "prompt_tokens": usage.get("prompt_tokens", 0), **_figures(stats)})
        raise EngineFailed(f"the engine at {self.url} ended the stream without a result")

    async def status(self) -> dict:
        try:
            response = await self._http.get("/health")
        except httpx.TransportError as exc:
            raise EngineUnavailable(f"cannot reach the engine at {self.url}: {_reason(exc)}") from None
        return {"engine": "remote", "url": self.url, **(response.json() if response.status_code == 200 else
                                                         {"status": f"HTTP {response.status_code}"})}

    async def close(self) -> None:
        await self._http.aclose()

    async def _events(self, route: str, body: dict) -> AsyncIterator[dict]:
        """The JSON events of a server-sent-events answer; an `error` event raises."""
        try:
            async with self._http.stream("POST", route, json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise self._refusal(route, response)
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line.removeprefix("data: ")
                    if data == "[DONE]":
                        return
                    event = json.loads(data)
                    if event.get("type") == "error":
                        raise EngineFailed(f"the engine failed: {error_message(event)}")
                    yield event
        except httpx.TransportError as exc:  # refused, reset, timed out connecting, cut mid-stream
            raise EngineUnavailable(f"cannot reach the engine at {self.url}: {_reason(exc)}") from None
        except json.JSONDecodeError as exc:
            raise EngineFailed(f"the engine at {self.url} sent a malformed event: {exc}") from None

    def _refusal(self, route: str, response: httpx.Response) -> Exception:
        message = f"{route}: {response_message(response)} (HTTP {response.status_code})"
        if response.status_code in (401, 403):
            return EngineUnavailable(f"the engine at {self.url} refused the API key (set apiKey): {message}")
        if response.status_code == 503:
            return EngineUnavailable(f"the engine at {self.url} is busy, try again: {message}")
        if 400 <= response.status_code < 500:
            return ApplyError(f"the engine refused the request: {message}")
        return EngineFailed(f"the engine at {self.url} failed: {message}")


async def probe_vllm(url: str) -> dict:
    """`{url, reachable, error?}`: whether the vLLM server at `url` answers `GET /v1/models` (a
    status check: the API key, the model and the tokenizer are checked when the engine loads)."""
    try:
        async with httpx.AsyncClient(base_url=url, timeout=PROBE_TIMEOUT_S) as http:
            response = await http.get("/v1/models")
    except httpx.TransportError as exc:
        return {"url": url, "reachable": False, "error": f"no vLLM server answers at {url}: {_reason(exc)}"}
    if response.status_code in (200, 401):  # 401: it is there, and wants the key the engine sends
        return {"url": url, "reachable": True}
    return {"url": url, "reachable": False, "error": f"{url}/v1/models answered HTTP {response.status_code}"}


def _figures(stats: dict) -> dict:
    keys = ("steps", "tokens_per_second", "accepted_per_step", "accepted_per_step_hist", "ttft_ms", "seconds")
    return {k: stats[k] for k in keys if k in stats}


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
