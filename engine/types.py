"""The types every front end shares with every engine: what a caller submits and what comes back.

`Request` (a tokenized prompt, its `SamplingParams`, its lookup sources), `Event` (one increment
of a request's stream), `RequestError` (a request no engine can serve as given). Torch-free: the
CLI's deterministic path, the HTTP server's handlers and the language server import these without
loading torch, and any backend (our `LLMEngine` behind `EngineService`, or another behind the same
`service.Engine` protocol) speaks them.
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


class RequestError(ValueError):
    """A request the engine cannot serve as given (too long, empty prompt, ...). `code` says which
    kind, in the HTTP API's words: `context_length_exceeded` or `invalid_request`."""

    def __init__(self, message: str, code: str = "invalid_request"):
        super().__init__(message)
        self.code = code


@dataclass
class Event:
    """One increment of a request's stream."""

    seq_id: str
    token_ids: list[int]
    text: str
    finished: bool
    finish_reason: str | None
    stats: dict
