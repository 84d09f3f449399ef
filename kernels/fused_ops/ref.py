"""Fused small ops of a decoder layer, the specification (plain PyTorch; the CPU path).

These are exactly the model's arithmetic (engine/models/layers.py calls them), so the reference
path is bit-identical to the unfused model: same ops, same dtypes, same cast points.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def add_rms_norm_ref(
    x: torch.Tensor,  # [..., N] in the model dtype
    residual: torch.Tensor | None,  # [..., N] the residual stream, or None (plain RMSNorm)
    weight: torch.Tensor,  # [N] in the model dtype
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # (normed [..., N], new residual [..., N])
    """vLLM's fused residual add + RMSNorm: residual = x + residual in the model dtype, then
    weight * rmsnorm(residual). Normalize in fp32 and cast back before the weight, as the reference
    implementations do. With residual None it is a plain RMSNorm and the residual is x itself."""
    if residual is not None:
        x = x + residual
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype), x


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """[..., 2 * I] = [gate | up] -> silu(gate) * up, [..., I]."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D], cos/sin [T, 1, D] in x's dtype -> [T, H, D] (rotate-half layout)."""
    return x * cos + rotate_half(x) * sin


def rotary_ref(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE on q [T, H, D] and k [T, Hkv, D] at the same positions (cos/sin [T, 1, D])."""
    return apply_rope_ref(q, cos, sin), apply_rope_ref(k, cos, sin)


def rotary_to_cache_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                        k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """RoPE on q and k, then k and v written to their cache rows: k_cache[slots[t]] = rope(k[t]),
    v_cache[slots[t]] = v[t] (caches [num_slots, Hkv, D], cast to the cache dtype). Returns rope(q)."""
    q, k = rotary_ref(q, k, cos, sin)
    k_cache.index_copy_(0, slots, k.to(k_cache.dtype))
    v_cache.index_copy_(0, slots, v.to(v_cache.dtype))
    return q
