"""The attention's q|k|v projection with its bias, RoPE and the KV-cache write in one Triton launch,
where the model ran a cuBLAS GEMM and then fused.py's RoPE-to-cache kernel.

The weight's rows are the q heads, then the k heads, then the v heads, D rows each. A program
takes one head and BLOCK_HALF of its rotary pairs (rows d and d + D/2 for each d it holds), sums
both over the whole K (kernels/tiles.py `dot_rows`, twice), adds the bias and rounds to the model
dtype (the projection's output), then does fused.py's RoPE arithmetic for a q or k head: q goes to
q_out, k and v to their slots' cache rows. The roundings are the unfused path's, so the results
differ only where the GEMM's summation order does. One block of rows, as gate_up.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.fused_ops import FUSED_MAX_ROWS
from kernels.fused_ops.fused import rope_pair
from kernels.pdl import pdl_options, release_next, wait_previous
from kernels.tiles import dot_options, dot_rows, prefetch_rows

# BLOCK_HALF (rotary pairs a program takes; at most D/2), BLOCK_K, warps, stages: a first guess, not
# yet measured; bench.linear_small --qkv sweeps them.
TILE = (16, 128, 4, 3)


@triton.jit
def _rope_half(x1, x2, cos_ptr, sin_ptr, rm, d, M, HALF, stride_cs, dt: tl.constexpr):
    """fused.py's `rope_pair` on rows rm, pairs d, with their cos/sin rows loaded."""
    rows = rm[:, None] < M
    c1 = tl.load(cos_ptr + rm[:, None] * stride_cs + d[None, :], mask=rows, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + rm[:, None] * stride_cs + HALF + d[None, :], mask=rows, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + rm[:, None] * stride_cs + d[None, :], mask=rows, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + rm[:, None] * stride_cs + HALF + d[None, :], mask=rows, other=0.0).to(tl.float32)
    return rope_pair(x1, x2, c1, c2, s1, s2, dt)


# M varies by step: not specialized on, so a new row count compiles no new variant mid-request.
@triton.jit(do_not_specialize=["M"])
def _qkv_rope_kernel(x_ptr, w_ptr, b_ptr, cos_ptr, sin_ptr, slot_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr,
                     M, K, H, HKV, HALF, stride_xm, stride_wn, stride_cs, stride_qot, stride_qoh, stride_ct, stride_ch,
                     HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_K: tl.constexpr,
                     DOT_FP32: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr):
    head = tl.program_id(0)  # q heads 0..H-1, then the k heads, then the v heads
    rm = tl.arange(0, BLOCK_M)
    d = tl.program_id(1) * BLOCK_HALF + tl.arange(0, BLOCK_HALF)  # this program's pairs: d and HALF + d
    n1 = head * 2 * HALF + d
    N = (H + 2 * HKV) * 2 * HALF
    if PDL:  # the weight's reads start before the wait (kernels/pdl.py)
        prefetch_rows(w_ptr, n1, N, K, stride_wn)
        prefetch_rows(w_ptr, n1 + HALF, N, K, stride_wn)
    wait_previous(PDL)
    a1 = dot_rows(x_ptr, w_ptr, rm, n1, M, N, K, stride_xm, stride_wn, BLOCK_M, BLOCK_HALF, BLOCK_K, DOT_FP32, PRECISION)
    a2 = dot_rows(x_ptr, w_ptr, rm, n1 + HALF, M, N, K, stride_xm, stride_wn, BLOCK_M, BLOCK_HALF, BLOCK_K, DOT_FP32,
                  PRECISION)
    release_next(PDL)
    if HAS_BIAS:
        a1 += tl.load(b_ptr + n1).to(tl.float32)[None, :]
        a2 += tl.load(b_ptr + n1 + HALF).to(tl.float32)[None, :]
    dt = q_out_ptr.dtype.element_ty
    x1, x2 = a1.to(dt).to(tl.float32), a2.to(dt).to(tl.float32)  # the projection's output, rounded
    rows = rm[:, None] < M
    if head < H:
        o1, o2 = _rope_half(x1, x2, cos_ptr, sin_ptr, rm, d, M, HALF, stride_cs, dt)
        out = q_out_ptr + rm[:, None] * stride_qot + head * stride_qoh + d[None, :]
        tl.store(out, o1, mask=rows)
        tl.store(out + HALF, o2, mask=rows)
    else:
        slot = tl.load(slot_ptr + rm, mask=rm < M, other=0).to(tl.int64)
        cache_dt = k_cache_ptr.dtype.element_ty
        if head < H + HKV:  # k: roped, rounded in the cache's dtype as fused.py's kernel does
            o1, o2 = _rope_half(x1, x2, cos_ptr, sin_ptr, rm, d, M, HALF, stride_cs, cache_dt)
            out = k_cache_ptr + slot[:, None] * stride_ct + (head - H) * stride_ch + d[None, :]
        else:
            o1, o2 = x1.to(cache_dt), x2.to(cache_dt)
            out = v_cache_ptr + slot[:, None] * stride_ct + (head - H - HKV) * stride_ch + d[None, :]
        tl.store(out, o1, mask=rows)
        tl.store(out + HALF, o2, mask=rows)


def qkv_rope_to_cache_triton(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, cos: torch.Tensor,
                             sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                             num_heads: int, tile: tuple[int, int, int, int] = TILE) -> torch.Tensor:
    """x [T, K] (T <= FUSED_MAX_ROWS), weight [(H + 2 * Hkv) * D, K], bias [(H + 2 * Hkv) * D] or None,
    cos/sin [T, 1, D], caches [num_slots, Hkv, D], slots [T] int64 -> rope(q) [T, H, D]; rope(k) and v
    land in the caches' rows `slots` (fused.py's rotary_to_cache_triton after the projection).
    `tile`: (BLOCK_HALF, BLOCK_K, warps, stages)."""
    T, K = x.shape
    Hkv, D = k_cache.shape[1:]
    half = D // 2
    block_half, block_k, warps, stages = tile
    block_half = min(block_half, half)
    assert weight.shape == ((num_heads + 2 * Hkv) * D, K) and weight.stride(1) == 1, (weight.shape, x.shape)
    assert weight.dtype == x.dtype and (bias is None or bias.shape == weight.shape[:1]), (weight.dtype, x.dtype)
    assert 0 < T <= FUSED_MAX_ROWS and x.stride(1) == 1, (x.shape, x.stride())
    assert half % block_half == 0 and block_half >= 16 and block_half & (block_half - 1) == 0, (D, block_half)
    assert cos.shape == sin.shape == (T, 1, D) and cos.is_contiguous() and sin.is_contiguous(), (cos.shape, sin.shape)
    assert cos.dtype == sin.dtype == x.dtype, (cos.dtype, x.dtype)
    assert v_cache.shape == k_cache.shape and k_cache.is_contiguous() and v_cache.is_contiguous(), k_cache.shape
    assert k_cache.dtype == v_cache.dtype and slots.shape == (T,) and slots.dtype == torch.int64, slots.shape
    q_out = torch.empty(T, num_heads, D, dtype=x.dtype, device=x.device)
    _qkv_rope_kernel[(num_heads + 2 * Hkv, half // block_half)](
        x_ptr=x, w_ptr=weight, b_ptr=bias if bias is not None else weight, cos_ptr=cos, sin_ptr=sin, slot_ptr=slots,
        q_out_ptr=q_out, k_cache_ptr=k_cache, v_cache_ptr=v_cache, M=T, K=K, H=num_heads, HKV=Hkv, HALF=half,
        stride_xm=x.stride(0), stride_wn=weight.stride(0), stride_cs=cos.stride(0), stride_qot=q_out.stride(0),
        stride_qoh=q_out.stride(1), stride_ct=k_cache.stride(0), stride_ch=k_cache.stride(1), HAS_BIAS=bias is not None,
        BLOCK_M=max(16, triton.next_power_of_2(T)), BLOCK_HALF=block_half, BLOCK_K=block_k,
        **dot_options(x), **pdl_options(x), num_warps=warps, num_stages=stages,
    )
    return q_out
