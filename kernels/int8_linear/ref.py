"""int8 weight-only matmul and embedding lookup, the specification (plain PyTorch; the CPU path).

A table W [N, K] is stored as int8 rows q [N, K] with one symmetric scale per row s [N]:
s[n] = max_k |W[n, k]| / 127 and q[n, k] = round(W[n, k] / s[n]), so W[n] ~= q[n] * s[n] with an
error of at most s[n] / 2 per element. One such table serves both the embedding (row = token) and
the lm_head (row = output logit), which is how tied models share it.
"""

from __future__ import annotations

import torch

# Rows dequantized at a time by the reference matmul: bounds its scratch memory (a [CHUNK, K] float
# copy) instead of a float copy of the whole table.
CHUNK_ROWS = 8192


def quantize_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] float -> (int8 [N, K], fp32 scales [N]). All-zero rows get scale 1 (and stay zero)."""
    w = w.float()
    scale = w.abs().amax(dim=1) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, scale


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """(int8 [N, K], scales [N]) -> [N, K] in dtype."""
    return (q.float() * scale[:, None]).to(dtype)


def embedding_int8_ref(ids: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, dtype) -> torch.Tensor:
    """ids [T] -> [T, K] in dtype: gather the int8 rows, then scale them."""
    return (q[ids].float() * scale[ids, None]).to(dtype)


def linear_int8_ref(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ (q * scale).T -> [M, N] fp32, dequantizing CHUNK_ROWS rows of q at a time."""
    out = torch.empty(x.shape[0], q.shape[0], dtype=torch.float32, device=x.device)
    for start in range(0, q.shape[0], CHUNK_ROWS):
        rows = slice(start, start + CHUNK_ROWS)
        out[:, rows] = (x @ q[rows].to(x.dtype).t()).float() * scale[rows]
    return out
