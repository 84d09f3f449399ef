"""Baseline drafters for honest comparison: the earliest occurrence of the longest n-gram suffix.

Both peers look only at the context (prompt + generated tokens) and take the EARLIEST occurrence:

* **ngram-earliest**, as vLLM's ngram proposer (`vllm/v1/spec_decode/ngram_proposer.py`,
  `_find_longest_matched_ngram_and_propose_tokens`): the longest n in [min_n, max_n] whose last-n
  tokens occur earlier in the context; among occurrences of that n-gram the earliest; the k tokens
  after it, fewer if the context ends first. vLLM finds it with a KMP failure table over the
  reversed context, O(context) per step; here a map from n-gram to its first occurrence, extended
  with each committed token, answers the same question in O(max_n^2) per step. k is the
  `max_tokens` the engine passes (K-1, vLLM's num_speculative_tokens); vLLM's cap at the model's
  maximum length is the engine's job here.
* **pld**, as HF transformers' `PromptLookupCandidateGenerator`: n from max_matching_ngram_size
  (default 2) down to 1, the first (left-most) occurrence with at least one token after it,
  num_output_tokens tokens, fewer if the context ends first. Not carried over: HF's truncation of
  the draft at an EOS token and its logits-processor check on draft tokens.

The two differ only in the range of n and in k, so one class serves both.
"""

from __future__ import annotations

NgramFirst = dict[tuple[int, ...], int]


def index_first_ngrams(tokens: list[int], sizes: range, first: NgramFirst, start: int = 0) -> None:
    """Record, for each n in `sizes`, each n-gram's first occurrence as the position right after it.

    Example: tokens [1, 2, 3, 1, 2], sizes range(2, 3) -> {(1, 2): 2, (2, 3): 3, (3, 1): 4}; the
    second (1, 2), ending at 5, does not replace the first. `start` adds only positions >= start.
    """
    for p in range(max(1, start), len(tokens) + 1):
        for n in sizes:
            if n <= p:
                first.setdefault(tuple(tokens[p - n : p]), p)


def earliest_ngram_draft(context: list[int], first: NgramFirst, min_n: int, max_n: int, k: int) -> list[int]:
    """The k tokens after the earliest occurrence of the longest n-gram suffix, n in [min_n, max_n].

    `first` indexes all of `context` (index_first_ngrams); an n-gram whose first occurrence is the
    suffix itself (position len(context)) has no earlier occurrence. vLLM's docstring example:
    context [1, 2, 3, 4, 2, 3], min_n 2, max_n 3, k 4: (4, 2, 3) never occurred before; (2, 3)
    first ends at position 3 -> the draft is context[3:7] = [4, 2, 3], three tokens because the
    context ends there.
    """
    for n in range(min(max_n, len(context) - 1), min_n - 1, -1):
        p = first.get(tuple(context[-n:]))
        if p is not None and p < len(context):
            return context[p : p + k]
    return []


class EarliestNgramDrafter:
    """ngram-earliest (vLLM) or pld (HF) depending on (min_n, max_n, num_tokens); see the module."""

    def __init__(self, min_n: int, max_n: int, num_tokens: int | None = None):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.min_n, self.max_n, self.num_tokens = min_n, max_n, num_tokens
        self._first: NgramFirst = {}
        self._seen = 0

    def propose(self, context: list[int], max_tokens: int) -> list[int]:
        if len(context) < self._seen:
            raise ValueError(f"context shrank from {self._seen} to {len(context)} tokens; drafters expect it to grow")
        index_first_ngrams(context, range(self.min_n, self.max_n + 1), self._first, self._seen + 1)
        self._seen = len(context)
        k = max_tokens if self.num_tokens is None else min(max_tokens, self.num_tokens)
        if k <= 0:
            return []
        return earliest_ngram_draft(context, self._first, self.min_n, self.max_n, k)
