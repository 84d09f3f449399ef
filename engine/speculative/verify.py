"""Verification of drafted tokens against the target, with a fixed output shape.

One step ran the target on `[last token] + draft` for each of B sequences: K positions, where the
draft holds up to K-1 tokens, padded on the right with PADDING (-1). Position j's distribution is
the target's prediction after `[last token] + draft[:j]`, so it judges draft[j], and position
len(draft) predicts the token after the whole draft.

* **accepted** tokens: the longest prefix of the draft the target agrees with. Greedy: draft[j]
  equals the argmax at position j. Sampled: the draft is a point mass at x = draft[j] (lookup
  drafts carry no distribution), so x is accepted with probability p_j(x), the target's truncated
  probability, and the first rejection ends the prefix.
* **recovered** token: at the first rejected position j, the target's own token. Greedy: the
  argmax. Sampled: a draw from p_j with x removed and renormalized, the residual
  norm(max(0, p_j - delta_x)) of rejection sampling; together with the acceptance this makes each
  committed token distributed exactly as p_j.
* **bonus** token: when every draft token is accepted, a token drawn from the position after the
  last draft token (greedy: its argmax); the target computed that position anyway.

Output `[B, K]` int64: the accepted tokens, then exactly one recovered or bonus token, then
PADDING. Each row commits between 1 (nothing accepted) and K tokens; `parse_output` strips the
padding. Greedy output is token for token what plain greedy decoding would produce.

The engine verifies greedy requests with `accept_greedy`, the same rule on the host over the argmax
tokens the step already brought back (one small copy per step, not one per sequence); the tensor
form stays the specification and the path of sampled requests.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.sampling import sample

PADDING = -1


def pad_drafts(drafts: Sequence[Sequence[int]], width: int, device=None) -> torch.Tensor:
    """Drafts of up to `width` (= K-1) tokens -> [B, width] int64 padded with PADDING."""
    out = torch.full((len(drafts), width), PADDING, dtype=torch.int64)
    for i, d in enumerate(drafts):
        if len(d) > width:
            raise ValueError(f"draft {i} has {len(d)} tokens; the verify block allows {width}")
        out[i, : len(d)] = torch.tensor(list(d), dtype=torch.int64)
    return out.to(device) if device is not None else out


def parse_output(out: torch.Tensor) -> list[list[int]]:
    """[B, K] verify output -> per sequence, the tokens to commit (padding stripped)."""
    return [[t for t in row if t != PADDING] for row in out.tolist()]


def verify_greedy(logits: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    """Greedy verification: logits [B, K, V], draft [B, K-1] -> [B, K] (see the module docstring).

    Example (K = 4): draft [[7, 8, 9]], argmax per position [[7, 8, 5, 2]] -> [[7, 8, 5, -1]]:
    7 and 8 accepted, 9 rejected, 5 recovered. With argmax [[7, 8, 9, 2]] -> [[7, 8, 9, 2]]: all
    accepted plus the bonus 2.
    """
    _check_shapes(logits, draft)
    target = logits.argmax(-1)  # [B, K]
    # Padding (-1) never equals an argmax, so it is never accepted.
    accepted = draft == target[:, :-1]  # [B, K-1]
    num_accepted = accepted.long().cumprod(dim=1).sum(dim=1)  # [B]
    last = target.gather(1, num_accepted[:, None]).squeeze(1)  # [B] recovered or bonus
    return _assemble(draft, num_accepted, last)


def accept_greedy(target: list[int], draft: list[int]) -> list[int]:
    """Greedy verification on the host, the engine's fast path: `target` holds the argmax at each of
    the block's len(draft) + 1 rows (one device-to-host copy per step brought them); returns the
    tokens to commit, as `parse_output(verify_greedy(...))` would.

    Example: draft [7, 8, 9], target [7, 8, 5, 2] -> [7, 8, 5]; target [7, 8, 9, 2] -> [7, 8, 9, 2].
    """
    if len(target) != len(draft) + 1:
        raise ValueError(f"need one target token per draft token plus one, got {len(target)} for {len(draft)}")
    n = 0
    while n < len(draft) and draft[n] == target[n]:
        n += 1
    return list(draft[:n]) + [target[n]]


def verify_sampled(probs: torch.Tensor, draft: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Rejection sampling of point-mass drafts: probs [B, K, V] (target_probs), draft [B, K-1] -> [B, K].

    Draws K-1 uniforms and then one exponential race over V per sequence from `generator`.
    """
    _check_shapes(probs, draft)
    batch, k, _ = probs.shape
    valid = draft != PADDING  # [B, K-1]
    x = draft.clamp_min(0)  # [B, K-1]; padding gathers token 0 and is masked by `valid`
    p_x = probs[:, :-1].gather(2, x[..., None]).squeeze(-1)  # [B, K-1] target probability of each draft token
    u = torch.rand(p_x.shape, generator=generator, device=probs.device, dtype=torch.float32)
    accepted = accept_mask(p_x, u) & valid
    num_accepted = accepted.long().cumprod(dim=1).sum(dim=1)  # [B]

    rows = torch.arange(batch, device=probs.device)
    p_last = probs[rows, num_accepted].float()  # [B, V] the position after the accepted prefix
    # A recovered token where that position holds a (rejected) draft token, a bonus where it is past the draft.
    no_token = torch.zeros((batch, 1), dtype=torch.bool, device=probs.device)
    rejected = torch.cat([valid, no_token], 1)[rows, num_accepted]  # [B]
    rejected_x = torch.cat([x, no_token.long()], 1)[rows, num_accepted]  # [B]
    last = sample(residual_probs(p_last, rejected_x, rejected), generator)  # [B]
    return _assemble(draft, num_accepted, last)


def verify_coupled(probs: torch.Tensor, draft: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Sampled verification coupled to per-position noise: probs, noise [B, K, V] -> [B, K].

    The target's own sample at each position is y_j = argmax(p_j / E_j) with E_j ~ Exp(1) (the
    exponential race), and drafts are accepted while they equal it. For a point-mass draft x
    that is the rejection rule above: x is accepted with probability P(y_j = x) = p_j(x), and
    on a mismatch the committed y_j is distributed as p_j with x removed and renormalized. When
    the noise is keyed by (seed, position) (`engine.sampling.position_noise`), every committed
    token is exactly the one plain sampling with that seed commits: greedy verification of the
    perturbed distribution.
    """
    return verify_greedy(probs / noise, draft)


def accept_mask(p_x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Accept a point-mass draft token with probability p(x): u ~ U[0, 1) below p(x)."""
    return u < p_x


def residual_probs(p: torch.Tensor, x: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """p [B, V] with token x [B] removed where `rejected` [B] (unnormalized: `sample` needs no norm).

    Example: p [[0.5, 0.3, 0.2]], x [0], rejected [True] -> [[0, 0.3, 0.2]], sampled as 0.6 / 0.4.
    """
    q = p.scatter(1, x[:, None], 0.0)
    # A row whose whole mass sat on x cannot be rejected (u < 1 = p(x)) unless p was not
    # normalized; keep p there rather than sample from nothing.
    q = torch.where((rejected & (q.sum(-1) > 0))[:, None], q, p)
    return q


def _assemble(draft: torch.Tensor, num_accepted: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """[B, K]: draft[:, :n] where n = num_accepted, then `last`, then PADDING."""
    batch, width = draft.shape
    out = torch.cat([draft, draft.new_full((batch, 1), PADDING)], dim=1)  # [B, K]
    pos = torch.arange(width + 1, device=draft.device)[None, :]  # [1, K]
    n = num_accepted[:, None]
    out = torch.where(pos < n, out, PADDING)
    return torch.where(pos == n, last[:, None].to(out.dtype), out)


def _check_shapes(target: torch.Tensor, draft: torch.Tensor) -> None:
    shapes = f"target {tuple(target.shape)}, draft {tuple(draft.shape)}"
    if target.dim() != 3 or draft.dim() != 2:
        raise ValueError(f"expected target [B, K, V] and draft [B, K-1], got {shapes}")
    if target.shape[0] != draft.shape[0] or target.shape[1] != draft.shape[1] + 1:
        raise ValueError(f"{shapes}: the draft needs [{target.shape[0]}, {target.shape[1] - 1}]")
    if draft.dtype != torch.int64:
        raise ValueError(f"draft must be int64, got {draft.dtype}")
