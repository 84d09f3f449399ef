"""A request in flight: its tokens, KV blocks, drafter and statistics."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from enum import Enum

import torch

from engine.block_manager import BlockTable
from engine.types import GenerationStats, Request


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Stats:
    """Per-request speculative-decoding statistics, accumulated as the request runs; `snapshot()` is
    what every stream event reports."""

    prompt_tokens: int = 0
    generated: int = 0
    steps: int = 0  # verify/decode steps after the prefill
    drafted: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens accepted
    rejections: int = 0  # steps whose draft was cut short by a rejection
    model_drafted: int = 0  # draft tokens written by the draft model (drafters hybrid, draft)
    model_accepted: int = 0  # ... and accepted
    committed_hist: dict[int, int] = field(default_factory=dict)  # tokens committed per step -> steps
    cached_prompt_tokens: int = 0
    t_start: float = field(default_factory=time.perf_counter)
    t_first: float | None = None
    t_end: float | None = None

    def record_step(self, drafted: int, accepted: int, committed: int, model_drafted: int = 0,
                    model_accepted: int = 0) -> None:
        self.steps += 1
        self.model_drafted += model_drafted
        self.model_accepted += model_accepted
        self.drafted += drafted
        self.accepted += accepted
        self.rejections += accepted < drafted
        self.committed_hist[committed] = self.committed_hist.get(committed, 0) + 1

    @property
    def accepted_per_step(self) -> float:
        """Mean tokens committed per verify step (accepted drafts + the bonus/recovered token)."""
        return sum(k * n for k, n in self.committed_hist.items()) / max(1, self.steps)

    @property
    def ttft_ms(self) -> float | None:
        return None if self.t_first is None else 1000 * (self.t_first - self.t_start)

    @property
    def tokens_per_second(self) -> float:
        end = self.t_end or time.perf_counter()
        start = self.t_first or self.t_start
        # Decode speed after the first token, as serving engines report it.
        return (self.generated - 1) / (end - start) if self.generated > 1 and end > start else 0.0

    def snapshot(self) -> GenerationStats:
        """The figures so far, as every stream event reports them."""
        return GenerationStats(
            prompt_tokens=self.prompt_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens,
            generated_tokens=self.generated,
            steps=self.steps,
            drafted=self.drafted,
            accepted=self.accepted,
            accepted_per_step=round(self.accepted_per_step, 3),
            accepted_per_step_hist=dict(sorted(self.committed_hist.items())),
            acceptance_rate=round(self.accepted / self.drafted, 4) if self.drafted else None,
            model_drafted=self.model_drafted,
            model_accepted=self.model_accepted,
            ttft_ms=None if self.ttft_ms is None else round(self.ttft_ms, 2),
            tokens_per_second=round(self.tokens_per_second, 2),
            seconds=round((self.t_end or time.perf_counter()) - self.t_start, 4),
        )


_ids = itertools.count()


class Sequence:
    def __init__(self, request: Request, drafter, verify_tokens: int, generator: torch.Generator | None):
        self.request = request
        self.id = request.request_id or f"seq-{next(_ids)}"
        self.params = request.params
        self.tokens: list[int] = list(request.prompt_ids)
        self.prompt_len = len(request.prompt_ids)
        self.num_cached = 0  # tokens whose K/V are in the cache
        self.block_table = BlockTable()
        self.chain_hashes: list[bytes] = []  # prefix-cache hashes of the tokens' leading full blocks
        self.num_published = 0  # leading blocks registered in (or taken from) the prefix cache
        self.drafter = drafter
        self.model_drafts = False  # the engine's draft model proposes for it (drafters hybrid, draft)
        self.lookup_fills = False  # ... with lookup leading or filling (hybrid)
        # The target's draft heads' guesses after its last token, from its last verify step
        # (engine/speculative/heads.py); [] before the first one.
        self.head_draft: list[int] = []
        self.verify_tokens = verify_tokens
        self.generator = generator
        self.seed = 0  # set by the engine: request seed or a random one
        self.status = Status.WAITING
        self.finish_reason: str | None = None
        self.stats = Stats(prompt_tokens=self.prompt_len)
        # A score request (Request.score_from): it ends once its prompt is prefilled, with the
        # summed log-probability of the scored tokens.
        self.score_from = request.score_from
        self.logprob = 0.0

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def needs_prefill(self) -> bool:
        """True while tokens before the last one are missing from the cache (the last known token
        is always fed by a verify step, together with the draft that follows it)."""
        return self.num_cached < len(self.tokens) - 1

    @property
    def scored(self) -> bool:
        """A score request whose prompt is prefilled: every scored token has its log-probability."""
        return self.score_from is not None and not self.needs_prefill

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    @property
    def num_generated(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def is_finished(self) -> bool:
        return self.status == Status.FINISHED
