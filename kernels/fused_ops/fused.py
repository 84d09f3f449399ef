"""Triton kernels for the small elementwise ops of a decoder layer: one launch each for the
residual add + RMSNorm, SiLU-and-mul, and RoPE on q and k together.

A small model's GPU verify step is a few thousand such launches; fusing them cuts launches and
round trips through memory. Every kernel rounds to the model dtype where ref.py does (after the
residual add, after the fp32 normalization, after silu, after each product of RoPE), so that bf16
results differ from the reference only in summation order and transcendental rounding.
Outputs are new contiguous tensors; inputs may have any row stride (q/k are views of the fused
qkv projection) but a unit stride along the last dim.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.pdl import pdl_options, release_next, wait_previous

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def _add_rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, N, eps,
                         stride_x, stride_r, stride_o, stride_ro,
                         HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_previous(PDL)
    release_next(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0)
        # The sum is the new residual stream, rounded to the model dtype as ref.py's `x + residual`.
        x = (x.to(tl.float32) + r.to(tl.float32)).to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_ro + cols, x, mask=mask)
    x32 = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x32 * x32, axis=0) / N + eps)
    # Cast back to the model dtype before the weight, as RMSNorm does.
    normed = (x32 * rstd).to(out_ptr.dtype.element_ty)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    out = w.to(tl.float32) * normed.to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def add_rms_norm_triton(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                        eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual [..., N], weight [N], all in one dtype -> (normed [..., N], x + residual)."""
    N = x.shape[-1]
    x2 = x.reshape(-1, N)  # [M, N], a view unless the leading dims are strided
    assert x.dtype in DTYPES and x2.stride(1) == 1, (x.dtype, x2.stride())
    assert weight.shape == (N,) and weight.dtype == x.dtype and weight.is_contiguous(), (weight.shape, weight.dtype)
    M = x2.shape[0]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if residual is None:
        r2 = res_out = x2  # unused by the kernel (HAS_RESIDUAL=False)
    else:
        assert residual.shape == x.shape and residual.dtype == x.dtype, (residual.shape, residual.dtype)
        r2 = residual.reshape(-1, N)
        assert r2.stride(1) == 1, r2.stride()
        res_out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    _add_rms_norm_kernel[(M,)](
        x_ptr=x2, res_ptr=r2, w_ptr=weight, out_ptr=out, res_out_ptr=res_out, N=N, eps=eps,
        stride_x=x2.stride(0), stride_r=r2.stride(0), stride_o=out.stride(0), stride_ro=res_out.stride(0),
        HAS_RESIDUAL=residual is not None, BLOCK=triton.next_power_of_2(N), **pdl_options(x),
    )
    if residual is None:
        return out.view(x.shape), x
    return out.view(x.shape), res_out.view(x.shape)


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, I, stride_x, stride_o, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_previous(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < I
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + I + cols, mask=mask, other=0.0).to(tl.float32)
    # F.silu computes in fp32 and rounds to the model dtype; then the product rounds again.
    act = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty)
    out = act.to(tl.float32) * up
    tl.store(out_ptr + row * stride_o + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul_triton(x: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """x [..., 2 * I] = [gate | up] -> silu(gate) * up, [..., I]."""
    I2 = x.shape[-1]
    x2 = x.reshape(-1, I2)  # [M, 2 * I]
    assert I2 % 2 == 0 and x.dtype in DTYPES and x2.stride(1) == 1, (x.shape, x.dtype, x2.stride())
    M, I = x2.shape[0], I2 // 2
    out = torch.empty(M, I, dtype=x.dtype, device=x.device)
    block = min(block, triton.next_power_of_2(I))
    _silu_and_mul_kernel[(M, triton.cdiv(I, block))](
        x_ptr=x2, out_ptr=out, I=I, stride_x=x2.stride(0), stride_o=out.stride(0), BLOCK=block, **pdl_options(x),
    )
    return out.view(*x.shape[:-1], I)


@triton.jit
def _rope_heads(x_ptr, out_ptr, c1, c2, s1, s2, num_heads, stride_h, stride_oh, HALF,
                BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """One token's heads [num_heads, 2 * HALF]: x * cos + rotate_half(x) * sin, each product and
    the sum rounded to the model dtype as in ref.py (rotate_half(x) = [-x2 | x1])."""
    heads = tl.arange(0, BLOCK_H)[:, None]
    cols = tl.arange(0, BLOCK_HALF)[None, :]
    mask = (heads < num_heads) & (cols < HALF)
    x1 = tl.load(x_ptr + heads * stride_h + cols, mask=mask, other=0.0)
    x2 = tl.load(x_ptr + heads * stride_h + HALF + cols, mask=mask, other=0.0)
    dt = out_ptr.dtype.element_ty
    x1, x2 = x1.to(tl.float32), x2.to(tl.float32)
    o1 = (x1 * c1).to(dt).to(tl.float32) + (-x2 * s1).to(dt).to(tl.float32)
    o2 = (x2 * c2).to(dt).to(tl.float32) + (x1 * s2).to(dt).to(tl.float32)
    tl.store(out_ptr + heads * stride_oh + cols, o1.to(dt), mask=mask)
    tl.store(out_ptr + heads * stride_oh + HALF + cols, o2.to(dt), mask=mask)


@triton.jit
def _rope_token(q_ptr, q_out_ptr, k_ptr, k_out_ptr, cos_ptr, sin_ptr, H, HKV, HALF,
                stride_qh, stride_qoh, stride_kh, stride_koh,
                BLOCK_H: tl.constexpr, BLOCK_HKV: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """One token's q and k heads (pointers at the token's rows); its cos/sin row [2 * HALF] is
    loaded once, in halves, for every head."""
    cols = tl.arange(0, BLOCK_HALF)[None, :]
    mask = cols < HALF
    c1 = tl.load(cos_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + HALF + cols, mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + HALF + cols, mask=mask, other=0.0).to(tl.float32)
    _rope_heads(q_ptr, q_out_ptr, c1, c2, s1, s2, H, stride_qh, stride_qoh, HALF, BLOCK_H, BLOCK_HALF)
    _rope_heads(k_ptr, k_out_ptr, c1, c2, s1, s2, HKV, stride_kh, stride_koh, HALF, BLOCK_HKV, BLOCK_HALF)


@triton.jit
def _rotary_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, H, HKV, HALF,
                   stride_qt, stride_qh, stride_kt, stride_kh, stride_cs,
                   stride_qot, stride_qoh, stride_kot, stride_koh,
                   BLOCK_H: tl.constexpr, BLOCK_HKV: tl.constexpr, BLOCK_HALF: tl.constexpr, PDL: tl.constexpr):
    wait_previous(PDL)
    release_next(PDL)
    t = tl.program_id(0).to(tl.int64)
    _rope_token(q_ptr + t * stride_qt, q_out_ptr + t * stride_qot, k_ptr + t * stride_kt, k_out_ptr + t * stride_kot,
                cos_ptr + t * stride_cs, sin_ptr + t * stride_cs, H, HKV, HALF, stride_qh, stride_qoh, stride_kh,
                stride_koh, BLOCK_H, BLOCK_HKV, BLOCK_HALF)


def rotary_triton(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, D], k [T, Hkv, D], cos/sin [T, 1, D] in q's dtype -> rotated (q, k), contiguous."""
    T, H, D = q.shape
    Hkv = k.shape[1]
    assert D % 2 == 0 and k.shape == (T, Hkv, D), (q.shape, k.shape)
    assert q.dtype in DTYPES and k.dtype == cos.dtype == sin.dtype == q.dtype, (q.dtype, k.dtype, cos.dtype, sin.dtype)
    assert q.stride(2) == 1 and k.stride(2) == 1, (q.stride(), k.stride())
    assert cos.shape == sin.shape == (T, 1, D) and cos.is_contiguous() and sin.is_contiguous(), (cos.shape, sin.shape)
    q_out, k_out = torch.empty(T, H, D, dtype=q.dtype, device=q.device), torch.empty(T, Hkv, D, dtype=q.dtype, device=q.device)
    _rotary_kernel[(T,)](
        q_ptr=q, k_ptr=k, cos_ptr=cos, sin_ptr=sin, q_out_ptr=q_out, k_out_ptr=k_out, H=H, HKV=Hkv, HALF=D // 2,
        stride_qt=q.stride(0), stride_qh=q.stride(1), stride_kt=k.stride(0), stride_kh=k.stride(1),
        stride_cs=cos.stride(0), stride_qot=q_out.stride(0), stride_qoh=q_out.stride(1),
        stride_kot=k_out.stride(0), stride_koh=k_out.stride(1),
        BLOCK_H=triton.next_power_of_2(H), BLOCK_HKV=triton.next_power_of_2(Hkv),
        BLOCK_HALF=triton.next_power_of_2(D // 2), **pdl_options(q),
    )
    return q_out, k_out


@triton.jit
def _rotary_to_cache_kernel(q_ptr, k_ptr, v_ptr, cos_ptr, sin_ptr, slot_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr,
                            H, HKV, HALF, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                            stride_cs, stride_qot, stride_qoh, stride_ct, stride_ch,
                            BLOCK_H: tl.constexpr, BLOCK_HKV: tl.constexpr, BLOCK_HALF: tl.constexpr,
                            PDL: tl.constexpr):
    """One token: rope(q) to q_out, rope(k) and v straight into the cache rows of its slot."""
    wait_previous(PDL)
    release_next(PDL)
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    _rope_token(q_ptr + t * stride_qt, q_out_ptr + t * stride_qot, k_ptr + t * stride_kt, k_cache_ptr + slot * stride_ct,
                cos_ptr + t * stride_cs, sin_ptr + t * stride_cs, H, HKV, HALF, stride_qh, stride_qoh, stride_kh,
                stride_ch, BLOCK_H, BLOCK_HKV, BLOCK_HALF)
    heads = tl.arange(0, BLOCK_HKV)[:, None]
    vcols = tl.arange(0, 2 * BLOCK_HALF)[None, :]
    vmask = (heads < HKV) & (vcols < 2 * HALF)
    row = tl.load(v_ptr + t * stride_vt + heads * stride_vh + vcols, mask=vmask, other=0.0)
    tl.store(v_cache_ptr + slot * stride_ct + heads * stride_ch + vcols, row.to(v_cache_ptr.dtype.element_ty), mask=vmask)


def rotary_to_cache_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                           k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """q [T, H, D], k/v [T, Hkv, D], cos/sin [T, 1, D], caches [num_slots, Hkv, D] (contiguous, one
    dtype), slots [T] int64 -> rope(q) [T, H, D]; rope(k) and v land in the caches' rows `slots`.
    The rope's bf16 rounding is rotary_triton's; the cache store casts to the cache dtype."""
    T, H, D = q.shape
    Hkv = k.shape[1]
    assert D % 2 == 0 and k.shape == v.shape == (T, Hkv, D), (q.shape, k.shape, v.shape)
    assert q.dtype in DTYPES and k.dtype == v.dtype == cos.dtype == sin.dtype == q.dtype, (q.dtype, k.dtype, cos.dtype)
    assert q.stride(2) == 1 and k.stride(2) == 1 and v.stride(2) == 1, (q.stride(), k.stride(), v.stride())
    assert cos.shape == sin.shape == (T, 1, D) and cos.is_contiguous() and sin.is_contiguous(), (cos.shape, sin.shape)
    assert k_cache.shape[1:] == (Hkv, D) and v_cache.shape == k_cache.shape, (k_cache.shape, v_cache.shape)
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and k_cache.dtype == v_cache.dtype, k_cache.dtype
    assert slots.shape == (T,) and slots.dtype == torch.int64, (slots.shape, slots.dtype)
    q_out = torch.empty(T, H, D, dtype=q.dtype, device=q.device)
    _rotary_to_cache_kernel[(T,)](
        q_ptr=q, k_ptr=k, v_ptr=v, cos_ptr=cos, sin_ptr=sin, slot_ptr=slots, q_out_ptr=q_out,
        k_cache_ptr=k_cache, v_cache_ptr=v_cache, H=H, HKV=Hkv, HALF=D // 2,
        stride_qt=q.stride(0), stride_qh=q.stride(1), stride_kt=k.stride(0), stride_kh=k.stride(1),
        stride_vt=v.stride(0), stride_vh=v.stride(1), stride_cs=cos.stride(0),
        stride_qot=q_out.stride(0), stride_qoh=q_out.stride(1), stride_ct=k_cache.stride(0), stride_ch=k_cache.stride(1),
        BLOCK_H=triton.next_power_of_2(H), BLOCK_HKV=triton.next_power_of_2(Hkv),
        BLOCK_HALF=triton.next_power_of_2(D // 2), **pdl_options(q),
    )
    return q_out
