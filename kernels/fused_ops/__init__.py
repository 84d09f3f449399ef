"""Fused small ops of a decoder layer: residual add + RMSNorm, SiLU-and-mul, RoPE on q and k (with
the KV-cache write, for a plain cache).

Each has two implementations behind one signature: `ref` (ref.py, the spec and the model's own
arithmetic; the CPU path) and `triton` (fused.py: one launch per op; the CUDA path). The model
picks the same implementation as its attention (CausalLM.set_kernel_impl, from the runner's
kernels/paged_attention resolve_impl).
"""

from __future__ import annotations

import torch

from kernels.fused_ops.ref import add_rms_norm_ref, apply_rope_ref, rotary_ref, rotary_to_cache_ref, silu_and_mul_ref


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


__all__ = ["add_rms_norm", "add_rms_norm_ref", "apply_rope_ref", "rotary", "rotary_ref", "rotary_to_cache",
           "rotary_to_cache_ref", "silu_and_mul", "silu_and_mul_ref"]
