"""Triton int8 weight-only matmul: out[M, N] = x[M, K] @ (q[N, K] * scale[N]).T in fp32.

For the lm_head of a verify step (M = batch * K rows, N = vocab, K = hidden). The step is bound by
reading the table, so each program streams a [BLOCK_N, K] slice of int8 rows once (half the bytes
of bf16), converts it to x's dtype in registers and multiplies on the tensor cores; the row scale is
applied to the fp32 accumulator at the end. Rows of x beyond BLOCK_M take more programs along the
grid's second axis (each re-reads its slice), from 128 rows on (a batch of 8 verify blocks is one).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.pdl import pdl_options, wait_previous
from kernels.tiles import dot_options, dot_tile


@triton.jit
def _linear_int8_kernel(x_ptr, q_ptr, scale_ptr, out_ptr, M, N, K,
                        stride_xm, stride_qn, stride_om,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        DOT_FP32: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr):
    wait_previous(PDL)
    acc, rm, rn = dot_tile(x_ptr, q_ptr, M, N, K, stride_xm, stride_qn, BLOCK_M, BLOCK_N, BLOCK_K, DOT_FP32, PRECISION)
    s = tl.load(scale_ptr + rn, mask=rn < N, other=0.0)
    acc = acc * s[None, :]
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def linear_int8_triton(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor,
                       block_m: int | None = None, block_n: int = 64, block_k: int = 128) -> torch.Tensor:
    """x [M, K] (fp32/bf16/fp16), q [N, K] int8, scale [N] fp32 -> [M, N] fp32."""
    M, K = x.shape
    N = q.shape[0]
    assert q.dtype == torch.int8 and q.shape == (N, K) and q.stride(1) == 1, (q.dtype, q.shape, q.stride())
    assert scale.dtype == torch.float32 and scale.shape == (N,) and scale.is_contiguous()
    x = x.contiguous()
    out = torch.empty(M, N, dtype=torch.float32, device=x.device)
    # One row block up to 128 rows, so the table is read once (tl.dot needs at least 16 rows).
    block_m = block_m or min(128, max(16, triton.next_power_of_2(M)))
    grid = (triton.cdiv(N, block_n), triton.cdiv(M, block_m))
    _linear_int8_kernel[grid](
        x_ptr=x, q_ptr=q, scale_ptr=scale, out_ptr=out, M=M, N=N, K=K,
        stride_xm=x.stride(0), stride_qn=q.stride(0), stride_om=out.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        **dot_options(x), **pdl_options(x),
    )
    return out
