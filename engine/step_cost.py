"""Sizing drafts under load: an online step-cost model and an expected-throughput rule.

A verify step over n fed tokens takes about `a + b * n` seconds: `a` is what any step pays
(reading the weights, launches), `b` what each fed token adds (compute, attention). On a GPU `b`
is tiny next to `a`, so long drafts for many sequences are nearly free; on a small CPU `b`
dominates once a batch is large, and a rejected draft token is paid in full.

Each sequence's draft tokens are accepted with an estimated per-token rate alpha (a geometric
model: the k-th draft token counts only if all before it were accepted, probability alpha^k).
`plan_drafts` adds draft tokens one at a time, always the one most likely to count, while it
raises the step's expected committed tokens per second: a token with probability p is worth its
cost b exactly when p > b * E / T (E expected tokens, T expected seconds so far). Greedy is
optimal here because each sequence's marginal gains only shrink.
"""

from __future__ import annotations

import heapq


# The least spread of the observed sizes (weighted variance, tokens^2) that a slope is fitted from.
# Below it one odd step decides the slope: one 2-token step among 1-token ones, slow for any
# reason, fitted 60 ms per token where a token costs ~3 ms, and drafts cut to nothing by that
# slope never made the steps that would correct it. Without a fit drafts are verified whole
# (Scheduler.size_drafts) and the hybrid's rule prices the mean step (`fit_or_flat`): the
# sizes spread again.
MIN_SPREAD = 1.0


class StepCost:
    """Exponentially weighted least-squares fit of seconds = a + b * tokens over recent steps."""

    def __init__(self, decay: float = 0.97, min_samples: int = 8):
        self.decay = decay
        self.min_samples = min_samples
        self.reset()

    def reset(self) -> None:
        """Forget every observed step."""
        self.w = self.sx = self.sy = self.sxx = self.sxy = 0.0
        self.samples = 0

    def observe(self, tokens: int, seconds: float) -> None:
        d = self.decay
        self.w = d * self.w + 1
        self.sx = d * self.sx + tokens
        self.sy = d * self.sy + seconds
        self.sxx = d * self.sxx + tokens * tokens
        self.sxy = d * self.sxy + tokens * seconds
        self.samples += 1

    def fit(self) -> tuple[float, float] | None:
        """(a, b), or None until enough steps of different sizes were seen."""
        if self.samples < self.min_samples:
            return None
        var = self.sxx * self.w - self.sx * self.sx
        if var < MIN_SPREAD * self.w * self.w:
            return None
        b = (self.sxy * self.w - self.sx * self.sy) / var
        a = (self.sy - b * self.sx) / self.w
        if a <= 0 or b <= 0:
            return None
        return a, b

    def fit_or_flat(self) -> tuple[float, float] | None:
        """The fit, or while none holds (one size seen, or no slope: a cost that does not grow
        with the tokens, such as a launch-bound forward) the mean seconds per step as a flat
        cost (a, 0); None before min_samples steps."""
        if (fit := self.fit()) is not None or self.samples < self.min_samples:
            return fit
        return self.sy / self.w, 0.0


def acceptance_rate(accepted: int, rejections: int, prior: float = 0.8, weight: float = 2.0) -> float:
    """Per-token acceptance estimate under the geometric model: successes / (successes + failures),
    with `weight` pseudo-observations at `prior` so that a new sequence is trusted moderately."""
    return (accepted + prior * weight) / (accepted + rejections + weight)


def plan_drafts(max_lengths: list[int], alphas: list[float], a: float, b: float, budget: int | None = None) -> list[int]:
    """Draft lengths maximizing expected committed tokens per second for one verify step.

    Example: a = 0.24 s, b = 0.06 s per fed token (a small CPU), two sequences with drafts of up
    to 15 tokens. With alpha 0.95 the k-th token counts with probability 0.95^k, still above
    b * E / T (about 0.2-0.4 here) at k = 15, so it drafts all 15; with alpha 0.5 only 0.5 and
    0.25 clear the bar, so it drafts 1 or 2.
    """
    n = len(max_lengths)
    lengths = [0] * n
    spare = None if budget is None else budget - n
    expected, seconds = float(n), a + b * n  # every sequence commits at least one token
    heap = [(-alphas[i], i) for i in range(n) if max_lengths[i] > 0]
    heapq.heapify(heap)
    while heap and (spare is None or spare > 0):
        neg_p, i = heapq.heappop(heap)
        p = -neg_p
        if p <= b * expected / seconds:
            break
        lengths[i] += 1
        expected += p
        seconds += b
        if spare is not None:
            spare -= 1
        if lengths[i] < max_lengths[i]:
            heapq.heappush(heap, (-(p * alphas[i]), i))
    return lengths
