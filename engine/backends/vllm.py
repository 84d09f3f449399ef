"""The Engine protocol over a running `vllm serve`: for deployments our one-GPU engine does not fit.

Why a separate `vllm serve` behind our front ends, not vLLM in our process: tensor and data
parallelism, Ray across nodes and several replicas behind a load balancer all belong to the
process that owns the GPUs. Run vLLM as vLLM runs best -- its own server, one per replica -- and
the front ends (HTTP API, language server, CLI, apply pipeline) stay as they are: they submit a
`Request` and read `Event`s through this class exactly as through `EngineService`. Everything
that is not generation (parsing, the deterministic merge, validation, diffs, limits, errors)
stays ours, so the same request gets the same answer shape from both backends.

How a request travels: `POST {url}/v1/completions` with the prompt as token ids (ours: our
tokenizer and chat template build it), greedy or sampled as its `SamplingParams` say, our
end-of-turn ids as `stop_token_ids`, `return_token_ids` and a streamed answer whose last chunk
carries `usage` and, with speculation on, vLLM's per-request speculative-decoding metrics.
Closing the stream (a cancel) aborts the request in vLLM.

What is lost against our engine: vLLM has no predicted outputs, so `Request.sources` (the
merge as a lookup source) cannot reach its drafter; the `draft` prompt form puts the merge in the
prompt, where its n-gram lookup (earliest match) finds it. Stats: tokens, timings, and -- when
vLLM reports them -- drafted and accepted tokens and the histogram of accepted drafts per step
are vLLM's own (its last step counts every draft it accepted, also those that `max_tokens` or a
stop then cut, so the histogram may add up to a few tokens more than the answer); steps without a
draft are inferred (each commits one token), and without vLLM's metrics the steps are the
stream's chunks (one per engine step as vLLM sends them).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shlex
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from engine.backends import vllm_serve
from engine.tokenizer import TOKENIZER_PROBE
from engine.types import (EngineLoad, EngineUnavailable, Event, GenerationStats, Request, RequestError,
                          check_prompt_length, check_score_from)

CONNECT_TIMEOUT_S = 10.0
_ids = itertools.count()


@dataclass
class VLLMConfig:
    """What the front ends read of an engine's config: the model's name and its context."""

    model: str
    max_model_len: int
    # Requests in flight through us beyond which the overload check refuses more (vLLM queues the
    # rest itself; its default max_num_seqs is 256).
    max_in_flight: int = 256


@dataclass
class VLLMHandle:
    request: Request
    id: str
    cancelled: bool = False
    done: bool = False
    _response: httpx.Response | None = field(default=None, repr=False)


class _Stream:
    """One request's answer as it arrives: chunks in, `Event`s out, and the figures at the end."""

    def __init__(self, handle: VLLMHandle):
        self.handle = handle
        self.t_start = time.perf_counter()
        self.t_first: float | None = None
        self.token_ids: list[int] = []
        self.chunks: list[int] = []  # tokens per chunk after the first token's
        self.finish_reason: str | None = None
        self.usage: dict = {}
        self.spec: dict | None = None

    def feed(self, data: dict) -> Event | None:
        """The event for one SSE chunk of vLLM's answer, or None (the usage chunk). An error
        vLLM reports inside the stream finishes it with finish_reason "error"."""
        if data.get("error"):
            message = (data["error"] or {}).get("message") if isinstance(data["error"], dict) else str(data["error"])
            return Event(self.handle.id, [], "", True, "error", self.stats(), error=f"vLLM: {message}")
        if data.get("usage"):
            self.usage = data["usage"]
            self.spec = (data.get("metrics") or {}).get("speculative_decoding")
        choices = data.get("choices") or []
        if not choices:
            return None
        choice = choices[0]
        ids = list(choice.get("token_ids") or [])
        if ids:
            first = self.t_first is None
            if first:
                self.t_first = time.perf_counter()
            if len(ids) > first:  # the first chunk's first token is the prefill's, not a step's
                self.chunks.append(len(ids) - first)
            self.token_ids += ids
        self.finish_reason = choice.get("finish_reason") or self.finish_reason
        return Event(self.handle.id, ids, choice.get("text") or "", False, None, self.stats())

    def last(self) -> Event:
        return Event(self.handle.id, [], "", True, self.finish_reason or "stop", self.stats())

    def stats(self) -> GenerationStats:
        now = time.perf_counter()
        generated = len(self.token_ids)
        hist, drafted, accepted = self._steps(generated)
        steps = sum(hist.values())
        committed = sum(k * n for k, n in hist.items())
        decode_s = now - self.t_first if self.t_first is not None else 0.0
        details = self.usage.get("prompt_tokens_details") or {}
        return GenerationStats(
            prompt_tokens=self.usage.get("prompt_tokens", len(self.handle.request.prompt_ids)),
            cached_prompt_tokens=details.get("cached_tokens") or 0,
            generated_tokens=generated,
            steps=steps,
            drafted=drafted,
            accepted=accepted,
            accepted_per_step=round(committed / steps, 3) if steps else 0.0,
            accepted_per_step_hist=dict(sorted(hist.items())),
            acceptance_rate=round(accepted / drafted, 4) if drafted else None,
            ttft_ms=None if self.t_first is None else round(1000 * (self.t_first - self.t_start), 2),
            tokens_per_second=round((generated - 1) / decode_s, 2) if generated > 1 and decode_s > 0 else 0.0,
            seconds=round(now - self.t_start, 4),
        )

    def _steps(self, generated: int) -> tuple[dict[int, int], int, int]:
        """(tokens committed per step -> steps, drafted, accepted) after the first token."""
        if not self.spec:
            hist: dict[int, int] = {}
            for n in self.chunks:
                hist[n] = hist.get(n, 0) + 1
            return hist, 0, 0
        # acceptance_histogram[j]: verify steps that accepted j drafts (each commits j + 1).
        hist = {j + 1: n for j, n in enumerate(self.spec.get("acceptance_histogram") or []) if n}
        plain = max(0, generated - 1 - sum(k * n for k, n in hist.items()))  # steps with no draft
        if plain:
            hist[1] = hist.get(1, 0) + plain
        return hist, int(self.spec.get("num_draft_tokens", 0)), int(self.spec.get("num_accepted_draft_tokens", 0))


class VLLMService:
    """The `service.Engine` protocol over `vllm serve` at `url` (see the module docstring).
    `tokenizer` is ours for the same model (prompts are built here); `cfg.max_model_len` is the
    server's (`connect` reads it)."""

    def __init__(self, url: str, tokenizer, cfg: VLLMConfig, served_model: str, api_key: str | None = None,
                 process=None):
        self.url = url.rstrip("/")
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.served_model = served_model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.process = process  # a `vllm serve` this service started (launch.py), stopped with it
        self._live: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, url: str, tokenizer, model: str, api_key: str | None = None, process=None) -> "VLLMService":
        """A service for the vLLM server at `url`, its served model and context read from
        `GET /v1/models`. Raises EngineUnavailable when nothing answers there, ValueError when it
        serves a model whose tokenizer is not `tokenizer` (prompts would be built for another model)."""
        url = url.rstrip("/").removesuffix("/v1")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            with httpx.Client(base_url=url, headers=headers, timeout=CONNECT_TIMEOUT_S) as client:
                models = client.get("/v1/models")
                if models.status_code != 401:
                    card = models.raise_for_status().json()["data"][0]
                    probe = client.post("/tokenize", json={"model": card["id"], "prompt": TOKENIZER_PROBE,
                                                           "add_special_tokens": False})
                    theirs = probe.raise_for_status().json()["tokens"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            raise EngineUnavailable(f"no vLLM server answers at {url}: {exc}") from None
        if models.status_code == 401:
            raise ValueError(f"the vLLM server at {url} wants an API key (EDITAPPLY_VLLM_API_KEY); none or a wrong one was given")
        if theirs != tokenizer.encode(TOKENIZER_PROBE):
            raise ValueError(f"the vLLM server at {url} serves {card['id']!r}, whose tokenizer is not {model!r}'s: "
                             "pass the served model (a preset, or a folder holding its tokenizer) as --model")
        return cls(url, tokenizer, VLLMConfig(model, int(card["max_model_len"])), card["id"], api_key, process)

    # ---- protocol -------------------------------------------------------------------------
    def submit(self, request: Request, loop: asyncio.AbstractEventLoop | None = None) -> VLLMHandle:
        """A handle for `request`; the request goes out when its stream is read. Raises
        RequestError at once for a request that can never run."""
        check_prompt_length(request.prompt_ids, self.cfg.max_model_len)
        check_score_from(request)
        return VLLMHandle(request, f"vllm-{next(_ids)}")

    def stream(self, handle: VLLMHandle) -> Iterator[Event]:
        if handle.request.score_from is not None:
            yield self._score(handle)
            return
        stream = _Stream(handle)
        self._enter(handle)
        try:
            with httpx.Client(timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)) as client, \
                    client.stream("POST", self.url + "/v1/completions", json=self._body(handle.request),
                                  headers=self.headers) as response:
                handle._response = response
                self._check(response, response.read() if response.status_code != 200 else b"")
                for data in _sse(response.iter_lines()):
                    if handle.cancelled:
                        break
                    if (event := stream.feed(data)) is not None:
                        yield event
                        if event.finished:
                            return
        except Exception as exc:  # noqa: BLE001 -- sorted out by _failed
            self._failed(handle, exc)
        finally:
            self._leave(handle)
        yield stream.last() if not handle.cancelled else Event(handle.id, [], "", True, "cancelled", stream.stats())

    async def astream(self, handle: VLLMHandle) -> AsyncIterator[Event]:
        if handle.request.score_from is not None:
            yield await asyncio.to_thread(self._score, handle)
            return
        stream = _Stream(handle)
        self._enter(handle)
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)) as client, \
                    client.stream("POST", self.url + "/v1/completions", json=self._body(handle.request),
                                  headers=self.headers) as response:
                self._check(response, await response.aread() if response.status_code != 200 else b"")
                async for data in _asse(response.aiter_lines()):
                    if handle.cancelled:
                        break
                    if (event := stream.feed(data)) is not None:
                        yield event
                        if event.finished:
                            return
        except Exception as exc:  # noqa: BLE001 -- sorted out by _failed
            self._failed(handle, exc)
        finally:
            self._leave(handle)
        yield stream.last() if not handle.cancelled else Event(handle.id, [], "", True, "cancelled", stream.stats())

    def cancel(self, handle: VLLMHandle) -> None:
        """Stop reading `handle`'s answer; closing the connection aborts the request in vLLM."""
        handle.cancelled = True
        if handle._response is not None:
            handle._response.close()

    def generate(self, request: Request) -> Iterator[Event]:
        return self.stream(self.submit(request))

    def load(self) -> EngineLoad:
        """Requests in flight through this service; those beyond `max_in_flight` count as waiting
        (vLLM's own queue, KV cache and steps are on its server: its /metrics)."""
        with self._lock:
            live = len(self._live)
        return EngineLoad(waiting=max(0, live - self.cfg.max_in_flight), running=min(live, self.cfg.max_in_flight))

    def shutdown(self) -> None:
        if self.process is not None:
            self.process.stop()

    # ---- helpers --------------------------------------------------------------------------
    def _score(self, handle: VLLMHandle) -> Event:
        """A score request (`Request.score_from`): vLLM's prompt log-probabilities (`prompt_logprobs`
        0: each prompt token's own, no others), summed from `score_from`, in one answer; vLLM's
        prefix caching keeps a shared head computed once."""
        request, stream = handle.request, _Stream(handle)
        body = {**self._body(request), "max_tokens": 1, "prompt_logprobs": 0, "stream": False}
        body.pop("stream_options")
        self._enter(handle)
        try:
            with httpx.Client(timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)) as client:
                response = client.post(self.url + "/v1/completions", json=body, headers=self.headers)
                self._check(response, response.content)
                data = response.json()
        except Exception as exc:  # noqa: BLE001 -- sorted out by _failed
            self._failed(handle, exc)
            return Event(handle.id, [], "", True, "cancelled", stream.stats())
        finally:
            self._leave(handle)
        stream.usage = data.get("usage") or {}
        # Position p's entry: {token id: {"logprob": ...}} for the prompt's own token there.
        rows = data["choices"][0]["prompt_logprobs"]
        ids = request.prompt_ids
        logprob = sum(rows[p][str(ids[p])]["logprob"] for p in range(request.score_from, len(ids)))
        return Event(handle.id, [], "", True, "stop", stream.stats(), logprob=logprob)

    def _body(self, request: Request) -> dict:
        p = request.params
        body = {"model": self.served_model, "prompt": request.prompt_ids, "max_tokens": p.max_tokens,
                "temperature": p.temperature, "top_p": p.top_p, "top_k": p.top_k or -1, "stream": True,
                "stream_options": {"include_usage": True}, "return_token_ids": True,
                "stop_token_ids": list(self.tokenizer.eos_ids), "ignore_eos": p.ignore_eos}
        if p.seed is not None:
            body["seed"] = p.seed
        if p.stop:
            body["stop"] = list(p.stop)
        return body

    def _check(self, response: httpx.Response, body: bytes) -> None:
        if response.status_code == 200:
            return
        try:
            message = json.loads(body).get("error", {}).get("message") or body.decode()[:300]
        except ValueError:
            message = body.decode(errors="replace")[:300]
        if 400 <= response.status_code < 500:
            raise RequestError(f"vLLM refused the request: {message}")
        raise EngineUnavailable(f"the vLLM server failed ({response.status_code}): {message}")

    def _failed(self, handle: VLLMHandle, exc: Exception) -> None:
        """A transport failure as EngineUnavailable; nothing when we closed the stream ourselves
        (a cancel from another thread may surface as any error of the closed connection)."""
        if handle.cancelled:
            return
        if isinstance(exc, httpx.ConnectError):
            raise EngineUnavailable(f"no vLLM server answers at {self.url}: {exc}") from None
        if isinstance(exc, httpx.HTTPError):
            raise EngineUnavailable(f"the vLLM server at {self.url} went away: {exc}") from None
        raise exc

    def _enter(self, handle: VLLMHandle) -> None:
        with self._lock:
            self._live.add(handle.id)

    def _leave(self, handle: VLLMHandle) -> None:
        handle.done = True
        with self._lock:
            self._live.discard(handle.id)


def _sse(lines: Iterator[str]) -> Iterator[dict]:
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[len("data: "):])


async def _asse(lines: AsyncIterator[str]) -> AsyncIterator[dict]:
    async for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[len("data: "):])


def open_vllm(cfg, tokenizer) -> VLLMService:
    """The service for `cfg` (an EngineConfig with backend vllm): over the server at
    `cfg.vllm_url`, or over one started here for `cfg.model` (its weights must be here) with
    `serve_args` plus `cfg.vllm_args`, stopped with the service."""
    if cfg.vllm_url:
        return VLLMService.connect(cfg.vllm_url, tokenizer, cfg.model, cfg.vllm_api_key or None)
    from engine.loader import registry

    folder = registry.resolve(cfg.model)
    context = cfg.for_model(registry.model_context(folder)).max_model_len
    cpu = cfg.torch_device.type == "cpu"
    args = vllm_serve.serve_args(str(folder), Path(cfg.model).name, context)
    args += ["--dtype", str(cfg.torch_dtype).removeprefix("torch.")]
    if cpu:  # vLLM's CPU build: eager (torch.compile takes minutes on a few cores, and is not faster here)
        args += ["--enforce-eager", "--gpu-memory-utilization", "0.3"]
    elif cfg.enforce_eager:
        args.append("--enforce-eager")
    args += shlex.split(cfg.vllm_args)
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # a local folder: nothing to fetch
    process = vllm_serve.start(cfg.vllm_python or vllm_serve.default_python(), args, registry.home() / "logs", env, cpu)
    try:
        return VLLMService.connect(process.url, tokenizer, cfg.model, cfg.vllm_api_key or None, process)
    except BaseException:
        process.stop()
        raise
