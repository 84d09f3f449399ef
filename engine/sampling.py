"""The target distribution of `SamplingParams` (engine/types.py): temperature, then top-k, then top-p.

`target_probs` turns logits into the truncated distribution that both plain sampling and
speculative verification draw from, without sorting the whole vocabulary:

* top-k keeps the logits >= the k-th largest, found by `torch.topk` over k values. Ties with the
  k-th value are all kept (as HF's `TopKLogitsWarper` does), so a row may keep more than k tokens.
* top-p keeps the tokens whose probability is >= a threshold tau, the largest tau such that the
  kept mass sum(p[p >= tau]) is >= top_p. For distinct probabilities this is exactly the sort-based
  rule (keep a token iff the mass strictly above it is < top_p); ties with the last kept token are
  all kept, where a sort would keep an arbitrary subset. tau is found by `torch.topk` on the 256
  largest probabilities and a cumulative sum; rows whose top-256 mass falls short of top_p try the
  top 4096 (TOP_P_CAPS); rows flatter still fall back to a bisection over the float32 bit
  patterns of tau (positive floats order like their bits), which converges to the exact float in
  at most 30 vectorized masked sums (about 25 for a 150k vocabulary). Tolerance: the kept mass is
  summed in float32 in a different order than a sort's cumulative sum, so a row whose boundary
  mass is within ~1e-6 of top_p may keep one token more or fewer than a sort-based reference.

top-p is cheap where the top 256 tokens settle it (language-model rows) and launch-bound in the
bisection on flat rows (bench/HISTORY.md has the timings). It makes one host sync (are all rows
settled?), so it cannot be captured in a CUDA graph as is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from engine.types import SamplingParams

TOP_P_CAPS = (256, 4096)  # probabilities tried by torch.topk, in turn, before the top-p bisection


def target_probs(logits: torch.Tensor, params: SamplingParams | Sequence[SamplingParams]) -> torch.Tensor:
    """Logits [N, V] -> probabilities [N, V] of the truncated distribution, in float32.

    `params` applies to every row, or is one SamplingParams per row. A greedy row (temperature 0)
    becomes a one-hot at its argmax (the first index among equal maxima, as torch.argmax), so that
    rejection sampling against it accepts exactly the argmax.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be [N, V], got {tuple(logits.shape)}")
    n, vocab = logits.shape
    logits = logits.float()
    if isinstance(params, SamplingParams):
        # One set of parameters: Python scalars throughout, no host-to-device copies.
        if params.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), vocab).float()
        probs = torch.softmax(apply_top_k(logits / params.temperature, params.top_k), dim=-1)
        return apply_top_p(probs, params.top_p)
    rows = list(params)
    if len(rows) != n:
        raise ValueError(f"got {len(rows)} SamplingParams for {n} rows of logits")
    greedy = [r.greedy for r in rows]
    onehot = torch.nn.functional.one_hot(logits.argmax(-1), vocab).float() if any(greedy) else None  # [N, V]
    if all(greedy):
        return onehot
    temperature = torch.tensor([r.temperature or 1.0 for r in rows], device=logits.device)
    scaled = apply_top_k(logits / temperature[:, None], [r.top_k for r in rows])  # [N, V]
    probs = apply_top_p(torch.softmax(scaled, dim=-1), [r.top_p for r in rows])
    if onehot is not None:
        probs = torch.where(torch.tensor(greedy, device=logits.device)[:, None], onehot, probs)
    return probs


def apply_top_k(logits: torch.Tensor, top_k: int | Sequence[int]) -> torch.Tensor:
    """Set logits [N, V] below each row's k-th largest value to -inf (k = 0 or k >= V: row untouched).

    Example: logits [[3, 1, 2, 2]], k = 2 -> [[3, -inf, 2, 2]]: the 2nd largest is 2, and both 2s stay.
    """
    n, vocab = logits.shape
    if isinstance(top_k, int):
        if not 0 < top_k < vocab:
            return logits
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # [N, 1]
        return logits.masked_fill(logits < kth, -math.inf)
    ks = list(top_k)
    active = [0 < k < vocab for k in ks]
    if not any(active):
        return logits
    kmax = max(k for k, a in zip(ks, active) if a)
    top = logits.topk(kmax, dim=-1).values  # [N, kmax], descending
    kth_index = torch.tensor([k - 1 if a else 0 for k, a in zip(ks, active)], device=logits.device)
    kth = top.gather(1, kth_index[:, None])  # [N, 1]
    kth = torch.where(torch.tensor(active, device=logits.device)[:, None], kth, -math.inf)
    return logits.masked_fill(logits < kth, -math.inf)


def apply_top_p(probs: torch.Tensor, top_p: float | Sequence[float]) -> torch.Tensor:
    """Keep the tokens of probs [N, V] with probability >= the row's top-p threshold; renormalize."""
    n = probs.shape[0]
    if isinstance(top_p, (int, float)):
        if top_p >= 1:
            return probs
        p = torch.full((n,), float(top_p), device=probs.device)
    else:
        ps = list(top_p)
        if all(x >= 1 for x in ps):
            return probs
        p = torch.tensor(ps, dtype=torch.float32, device=probs.device)
    tau = top_p_threshold(probs, p)  # [N]
    kept = torch.where(probs >= tau[:, None], probs, 0.0)
    return kept / kept.sum(-1, keepdim=True)


def top_p_threshold(probs: torch.Tensor, top_p: torch.Tensor, caps: tuple[int, ...] = TOP_P_CAPS) -> torch.Tensor:
    """Per row of probs [N, V], the largest tau with sum(p[p >= tau]) >= top_p; 0 where top_p >= 1.

    Example: probs [[0.5, 0.1, 0.3, 0.1]], top_p 0.7: the descending values 0.5, 0.3, 0.1, 0.1 have
    cumulative sums 0.5, 0.8, ... -> 0.8 is the first to reach 0.7, so tau = 0.3 and {0, 2} are kept.
    Rows the first cap does not settle go to the next cap, then to the bisection.
    """
    probs = probs.float()
    vocab = probs.shape[1]
    off = top_p >= 1  # [N]
    if not caps:
        return torch.where(off, 0.0, _bisect_threshold(probs, top_p))
    c = min(caps[0], vocab)
    top = probs.topk(c, dim=-1).values  # [N, c], descending
    reached = top.cumsum(-1) >= top_p[:, None]  # [N, c]
    # argmax returns the first maximum: the first position whose cumulative mass reaches top_p.
    tau = top.gather(1, reached.int().argmax(-1, keepdim=True)).squeeze(1)  # [N]
    done = reached.any(-1) | off
    if c == vocab:
        # All of the vocabulary was summed: a row short of top_p (rounding) keeps everything.
        tau = torch.where(done, tau, 0.0)
    elif not bool(done.all()):  # the one host sync on the common path
        rows = (~done).nonzero().squeeze(1)
        tau[rows] = top_p_threshold(probs[rows], top_p[rows], caps[1:])
    return torch.where(off, 0.0, tau)


def _bisect_threshold(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """top_p_threshold by bisection on the bit patterns of tau; probs [M, V] float32 -> tau [M]."""
    vocab = probs.shape[1]
    # Invariant: mass(>= lo) >= top_p and mass(>= hi) < top_p. Tokens below (1 - top_p) / V hold
    # less than 1 - top_p together, so lo starts at half that (with room for rounding); hi starts
    # just above the max.
    lo_value = torch.where(top_p < 1 - 1e-4, (1 - top_p) / (2 * vocab), 0.0).float()
    hi = probs.amax(-1).contiguous().view(torch.int32) + 1
    lo = torch.minimum(lo_value.contiguous().view(torch.int32), hi - 1)
    # Each step halves hi - lo; positive float32 bit patterns (< 0x3F800001) cannot overflow the sum.
    for _ in range(int((hi - lo).max()).bit_length()):
        mid = (lo + hi) >> 1
        mass = torch.where(probs >= mid.view(torch.float32)[:, None], probs, 0.0).sum(-1)  # [M]
        ok = mass >= top_p
        lo = torch.where(ok, mid, lo)
        hi = torch.where(ok, hi, mid)
    return lo.view(torch.float32)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row of probs [N, V] (need not be normalized) -> ids [N] int64.

    The exponential race: argmax_i p_i / E_i with E_i ~ Exp(1) picks i with probability
    p_i / sum(p), in one vectorized pass and without a cumulative sum.
    """
    race = torch.empty_like(probs, dtype=torch.float32).exponential_(generator=generator)
    # Exp(1) may round to 0 in float32; p/0 would be inf (or nan where p = 0).
    race.clamp_min_(torch.finfo(torch.float32).tiny)
    return (probs.float() / race).argmax(-1)


def position_noise(seed: int, first_position: int, n: int, vocab: int, device=None) -> torch.Tensor:
    """Exp(1) noise [n, vocab] for the tokens at positions first_position .. first_position+n-1.

    The noise of a position depends only on (seed, position): whatever was drafted, the token
    sampled at a position is the same, so seeded sampling gives the same text with speculation
    as without (see `verify_coupled`).
    """
    out = torch.empty(n, vocab, dtype=torch.float32, device=device)
    gen = torch.Generator(device=out.device)
    for i in range(n):
        gen.manual_seed((seed * 0x9E3779B1 + first_position + i) % (1 << 63))
        out[i].exponential_(generator=gen)
    return out.clamp_min_(torch.finfo(torch.float32).tiny)
