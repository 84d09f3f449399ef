"""Fused small ops of a decoder layer: residual add + RMSNorm, SiLU-and-mul (alone, or in the gate/up
projection's epilogue), RoPE on q and k (with the KV-cache write, for a plain cache; or that and the
q|k|v projection before it).

Each has two implementations behind one signature: `ref` (ref.py, the spec and the model's own
arithmetic; the CPU path) and `triton` (fused.py: one launch per op; gate_up.py and qkv_rope.py: a
projection and the ops after it in one; the CUDA path). The model picks the same implementation as its
attention (CausalLM.set_kernel_impl, from the runner's kernels/paged_attention resolve_impl).
"""

from __future__ import annotations

import torch

from kernels.fused_ops.ref import (add_rms_norm_ref, apply_rope_ref, gate_up_silu_ref, qkv_rope_to_cache_ref, rotary_ref,
                                   rotary_to_cache_ref, silu_and_mul_ref)


# The most rows the fused projections (gate_up.py, qkv_rope.py) take: one block of rows, so each
# weight is read once (a verify step's few dozen rows). Here, so that reading it imports no kernel.
FUSED_MAX_ROWS = 128


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                 impl: str = "ref") -> tuple[torch.Tensor, torch.Tensor]:
    """(weight * rmsnorm(x + residual), x + residual); with residual None, (weight * rmsnorm(x), x)."""
    if impl == "triton":
        from kernels.fused_ops.fused import add_rms_norm_triton

        return add_rms_norm_triton(x, residual, weight, eps)
    return add_rms_norm_ref(x, residual, weight, eps)


def silu_and_mul(x: torch.Tensor, impl: str = "ref") -> torch.Tensor:
    """[..., 2 * I] = [gate | up] -> silu(gate) * up, [..., I]."""
    if impl == "triton":
        from kernels.fused_ops.fused import silu_and_mul_triton

        return silu_and_mul_triton(x)
    return silu_and_mul_ref(x)


def gate_up_silu(x: torch.Tensor, weight: torch.Tensor, impl: str = "ref") -> torch.Tensor:
    """x [M, K], weight [2 * I, K] = [gate | up] rows -> silu(x @ gate.T) * (x @ up.T), [M, I]; triton
    takes at most FUSED_MAX_ROWS rows."""
    if impl == "triton":
        from kernels.fused_ops.gate_up import gate_up_silu_triton

        return gate_up_silu_triton(x, weight)
    return gate_up_silu_ref(x, weight)


def rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           impl: str = "ref") -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE on q [T, H, D] and k [T, Hkv, D]; cos/sin [T, 1, D] in the model dtype."""
    if impl == "triton":
        from kernels.fused_ops.fused import rotary_triton

        return rotary_triton(q, k, cos, sin)
    return rotary_ref(q, k, cos, sin)


def rotary_to_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, impl: str = "ref") -> torch.Tensor:
    """RoPE on q and k with k and v written to a plain KV cache's rows `slots`; returns rope(q)."""
    if impl == "triton":
        from kernels.fused_ops.fused import rotary_to_cache_triton

        return rotary_to_cache_triton(q, k, v, cos, sin, k_cache, v_cache, slots)
    return rotary_to_cache_ref(q, k, v, cos, sin, k_cache, v_cache, slots)


def qkv_rope_to_cache(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, cos: torch.Tensor,
                      sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                      num_heads: int, impl: str = "ref") -> torch.Tensor:
    """The q|k|v projection of x [T, K] (weight [(H + 2 * Hkv) * D, K], bias or None), then
    `rotary_to_cache`; returns rope(q) [T, H, D]. triton takes at most FUSED_MAX_ROWS rows."""
    if impl == "triton":
        from kernels.fused_ops.qkv_rope import qkv_rope_to_cache_triton

        return qkv_rope_to_cache_triton(x, weight, bias, cos, sin, k_cache, v_cache, slots, num_heads)
    return qkv_rope_to_cache_ref(x, weight, bias, cos, sin, k_cache, v_cache, slots, num_heads)


__all__ = ["FUSED_MAX_ROWS", "add_rms_norm", "add_rms_norm_ref", "apply_rope_ref", "gate_up_silu", "gate_up_silu_ref",
           "qkv_rope_to_cache", "qkv_rope_to_cache_ref", "rotary", "rotary_ref", "rotary_to_cache",
           "rotary_to_cache_ref", "silu_and_mul", "silu_and_mul_ref"]
