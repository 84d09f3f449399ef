"""The drafter protocol, its configuration and the factory that builds one per request.

A drafter is created per request with its sources and, before each verify step, proposes up to
`max_tokens` tokens to follow `context` (prompt + tokens generated so far). The context grows
between calls by the committed tokens, any number of them; a drafter may keep state between calls
but must check what was committed rather than assume its last draft was accepted. `[]` means no
draft: the step is a plain decode step.

Kinds: `lookup` (engine/speculative/lookup.py: sources, cursors, nearest re-anchoring, adaptive length),
`hybrid` (lookup plus the engine's draft model, engine/speculative/hybrid.py: the per-request drafter is
the lookup one, the draft model is batched by the engine), `draft` (the draft model alone: no
per-request drafter), `ngram-earliest` and `pld` (engine/speculative/baselines.py: vLLM's and HF's
prompt-lookup behaviour), `none`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from engine.speculative.baselines import EarliestNgramDrafter
from engine.speculative.lookup import LookupDrafter

DRAFTER_KINDS = ("lookup", "hybrid", "draft", "ngram-earliest", "pld", "none")
MODEL_DRAFTERS = ("hybrid", "draft")  # the kinds that run the engine's draft model


class Drafter(Protocol):
    def propose(self, context: list[int], max_tokens: int) -> list[int]: ...


@dataclass
class DraftConfig:
    # lookup
    min_match: int = 2  # shortest suffix match that may anchor a draft (an index key length)
    long_match: int = 8  # second index key length (clamped into [min_match, max_match])
    max_match: int = 16  # longer matches count as equal; then nearness and priority decide
    max_candidates: int = 64  # occurrences examined per re-anchor, those nearest the cursor
    growth: float = 2.0  # draft length = ceil(growth * run), run = tokens matched so far
    prompt_as_source: bool = True  # the prompt itself is the last lookup source
    # ngram-earliest; vLLM's prompt_lookup_min/max default to 5 when neither is set
    ngram_min_n: int = 5
    ngram_max_n: int = 5
    # pld; HF's max_matching_ngram_size default and prompt_lookup_num_tokens
    pld_max_ngram: int = 2
    pld_num_tokens: int = 10

    def __post_init__(self):
        if not 1 <= self.min_match <= self.max_match:
            raise ValueError(f"need 1 <= min_match <= max_match, got {self.min_match}, {self.max_match}")
        if self.long_match < 1:
            raise ValueError(f"long_match must be >= 1, got {self.long_match}")
        if self.max_candidates < 1:
            raise ValueError(f"max_candidates must be >= 1, got {self.max_candidates}")
        if not self.growth > 0:
            raise ValueError(f"growth must be > 0, got {self.growth}")
        if not 1 <= self.ngram_min_n <= self.ngram_max_n:
            raise ValueError(f"need 1 <= ngram_min_n <= ngram_max_n, got {self.ngram_min_n}, {self.ngram_max_n}")
        if self.pld_max_ngram < 1 or self.pld_num_tokens < 1:
            raise ValueError(f"pld_max_ngram and pld_num_tokens must be >= 1, got {self.pld_max_ngram}, {self.pld_num_tokens}")


class NoDrafter:
    """Never drafts: every step is a plain decode step."""

    def propose(self, context: list[int], max_tokens: int) -> list[int]:
        return []


def make_drafter(kind: str, sources: Mapping[str, list[int]], prompt_len: int, cfg: DraftConfig | None = None) -> Drafter:
    """A drafter of `kind` for one request.

    `sources` are named token lists in priority order (e.g. prediction, original, snippet,
    documents), used by `lookup` only; the baselines look up in the context, as their peers do.
    `prompt_len` is how many leading context tokens are the prompt.
    """
    cfg = cfg or DraftConfig()
    if isinstance(prompt_len, bool) or not isinstance(prompt_len, int) or prompt_len < 0:
        raise TypeError(f"prompt_len must be an int >= 0 (the prompt's length, not its tokens), got {type(prompt_len).__name__}")
    if kind in ("lookup", "hybrid"):
        return LookupDrafter(sources, prompt_len, min_match=cfg.min_match, long_match=cfg.long_match,
                             max_match=cfg.max_match, max_candidates=cfg.max_candidates,
                             growth=cfg.growth, prompt_as_source=cfg.prompt_as_source)
    if kind == "ngram-earliest":
        return EarliestNgramDrafter(cfg.ngram_min_n, cfg.ngram_max_n)
    if kind == "pld":
        return EarliestNgramDrafter(1, cfg.pld_max_ngram, num_tokens=cfg.pld_num_tokens)
    if kind in ("none", "draft"):
        return NoDrafter()
    raise ValueError(f"unknown drafter {kind!r}; choose one of {', '.join(DRAFTER_KINDS)}")
