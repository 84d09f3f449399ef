"""The types every front end shares with every engine: what a caller submits and what comes back.

`Request` (a tokenized prompt, its `SamplingParams`, its lookup sources), `Event` (one increment
of a request's stream, with its `GenerationStats`), `RequestError` (a request no engine can serve
as given), `EngineUnavailable` (an engine that cannot be reached just now). Torch-free: the
CLI's deterministic path, the HTTP server's handlers and the language server import these
without loading torch, and every backend (our `LLMEngine` behind `EngineService`, vLLM behind
`backends.vllm.VLLMService`) speaks them through the `service.Engine` protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy (top_k and top_p are then ignored)
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    seed: int | None = None  # None = a fresh seed per request
    max_tokens: int = 4096
    stop: tuple[str, ...] = ()  # stop strings; a single str is accepted and wrapped
    ignore_eos: bool = False

    def __post_init__(self):
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)):
            raise TypeError(f"temperature must be a number, got {self.temperature!r}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be finite and >= 0 (0 = greedy), got {self.temperature}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0 = off), got {self.top_k!r}")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed < 2**63):
            raise ValueError(f"seed must be None or an int in [0, 2**63), got {self.seed!r}")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop must be non-empty strings, got {self.stop!r}")
        self.stop = stop

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Request:
    """What a caller submits: a tokenized prompt plus how to generate and where drafts come from."""

    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    # Lookup sources in priority order, e.g. {"prediction": [...], "original": [...], "snippet": [...]}.
    # The prompt itself is always a source of the lookup drafter.
    sources: dict[str, list[int]] = field(default_factory=dict)
    verify_tokens: int | None = None  # per-request K; None = the engine's
    drafter: str | None = None  # per-request drafter kind; None = the engine's
    request_id: str | None = None
    # Teacher-forced scoring: the summed log-probability of prompt_ids[score_from:] given the
    # tokens before them comes back in the last Event's `logprob`; nothing is generated. A prompt
    # whose head another request has prefilled reads that head's K/V from the prefix cache.
    score_from: int | None = None


class RequestError(ValueError):
    """A request the engine cannot serve as given (too long, empty prompt, ...). `code` says which
    kind, in the HTTP API's words: `context_length_exceeded` or `invalid_request`."""

    def __init__(self, message: str, code: str = "invalid_request"):
        super().__init__(message)
        self.code = code


def check_prompt_length(prompt_ids: list[int], max_model_len: int) -> None:
    """Raise RequestError for a prompt no engine of this context can start (every backend's rule)."""
    n = len(prompt_ids)
    if n == 0:
        raise RequestError("empty prompt")
    if n + 1 > max_model_len:
        raise RequestError(f"prompt is {n} tokens; the context limit is {max_model_len}", "context_length_exceeded")


def check_score_from(request: Request) -> None:
    """Raise RequestError for a score request whose `score_from` is not a position in [1, len(prompt)]
    (the first token has no context to be scored in; len(prompt) scores nothing, a prefill only)."""
    s, n = request.score_from, len(request.prompt_ids)
    if s is not None and (isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= n):
        raise RequestError(f"score_from must be in [1, {n}] (the prompt's length), got {s!r}")


@dataclass(frozen=True)
class EngineLoad:
    """What an engine is doing now, for /health, /metrics and the overload check. A backend that
    does not know a figure leaves it None (vLLM's KV cache lives on its own server)."""

    waiting: int = 0  # requests submitted and not yet running
    running: int = 0  # requests being generated
    kv_blocks_total: int | None = None
    kv_blocks_free: int | None = None
    steps: int = 0  # engine steps run
    unavailable: str | None = None  # why the engine can serve nothing now (its process is gone); None = up


class EngineUnavailable(RuntimeError):
    """The engine cannot be reached: a remote backend (a `vllm serve`) is down, went away in the
    middle of a request, or answered with a server error. The HTTP API answers 503; the request
    itself may be fine and may be retried."""


@dataclass(frozen=True)
class GenerationStats:
    """A request's generation figures so far, sent with every `Event` (the last event's are final).

    prompt_tokens: the prompt's length in tokens.
    cached_prompt_tokens: prompt tokens whose K/V came from the prefix cache (not computed again).
    generated_tokens: tokens generated (committed to the output), end-of-sequence included.
    steps: verify/decode steps after the prefill.
    drafted: draft tokens proposed by the drafter.
    accepted: draft tokens verification accepted.
    accepted_per_step: mean tokens committed per step (accepted drafts + the bonus/recovered
        token), rounded to 3 decimals.
    accepted_per_step_hist: tokens committed in one step -> how many steps committed that many,
        by ascending key.
    acceptance_rate: accepted / drafted, rounded to 4 decimals; None while nothing was drafted.
    model_drafted, model_accepted: of `drafted` and `accepted`, the draft model's tokens (the
        `hybrid` and `draft` drafters; 0 otherwise).
    ttft_ms: milliseconds from the request's arrival at the engine (queueing included) to its
        first token, rounded to 2 decimals; None before that token.
    tokens_per_second: decode speed after the first token, rounded to 2 decimals; 0.0 before a
        second token.
    seconds: from the request's arrival at the engine to its last token (to now while it runs),
        rounded to 4 decimals.

    A request the engine never took (cancelled before, or refused) reports the defaults."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_per_step: float = 0.0
    accepted_per_step_hist: dict[int, int] = field(default_factory=dict)
    acceptance_rate: float | None = None
    model_drafted: int = 0
    model_accepted: int = 0
    ttft_ms: float | None = None
    tokens_per_second: float = 0.0
    seconds: float = 0.0


@dataclass
class Event:
    """One increment of a request's stream. `error` is the engine's message when the request
    failed (`finish_reason` "error")."""

    seq_id: str
    token_ids: list[int]
    text: str
    finished: bool
    finish_reason: str | None
    stats: GenerationStats
    error: str | None = None
    logprob: float | None = None  # a score request's result (`Request.score_from`), on its last event
