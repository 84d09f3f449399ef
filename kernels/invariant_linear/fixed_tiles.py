"""Triton matmul in one tile shape: out[M, N] = x[M, K] @ w[N, K].T (+ bias), each row alone.

Every call, whatever M, runs BLOCK_M x BLOCK_N output tiles with the same warps and stages, and
each tile sums K in BLOCK_K chunks from the first to the last into an fp32 accumulator
(kernels/tiles.py `dot_tile`): no split-K, no choice by shape. A row's outputs are then the same
bits in a 1-row step, a 16-row verify block or a batch of 64 blocks (rows past M are masked to zero
and never mix with the others). The price is cuBLAS's per-shape tuning: bench/RESULTS.md,
"Batch-invariant bf16 on the GPU", has the cost.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.pdl import pdl_options, wait_previous
from kernels.tiles import dot_options, dot_tile

# One tile shape for every call. BLOCK_M = 16 is tl.dot's least, a verify block's rows; BLOCK_N = 32
# keeps a few dozen programs busy on a 16-row step of an 896-wide layer.
BLOCK_M, BLOCK_N, BLOCK_K = 16, 32, 128
NUM_WARPS, NUM_STAGES = 4, 3


# M varies by step: not specialized on, so a new row count compiles no new variant mid-request.
@triton.jit(do_not_specialize=["M"])
def _linear_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
                   HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   DOT_FP32: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr):
    wait_previous(PDL)
    acc, rm, rn = dot_tile(x_ptr, w_ptr, M, N, K, stride_xm, stride_wn, BLOCK_M, BLOCK_N, BLOCK_K, DOT_FP32, PRECISION)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def linear_fixed_tiles(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., K] @ weight [N, K].T (+ bias [N]) -> [..., N] in x's dtype, every row computed alone."""
    K = x.shape[-1]
    N = weight.shape[0]
    assert weight.shape == (N, K) and weight.stride(1) == 1, (weight.shape, weight.stride())
    assert weight.dtype == x.dtype, (weight.dtype, x.dtype)
    x2 = x.reshape(-1, K).contiguous()
    M = x2.shape[0]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if M:
        _linear_kernel[(triton.cdiv(N, BLOCK_N), triton.cdiv(M, BLOCK_M))](
            x_ptr=x2, w_ptr=weight, bias_ptr=bias if bias is not None else weight, out_ptr=out, M=M, N=N, K=K,
            stride_xm=x2.stride(0), stride_wn=weight.stride(0), stride_om=out.stride(0),
            HAS_BIAS=bias is not None, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
            **dot_options(x), **pdl_options(x),
            num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )
    return out.view(*x.shape[:-1], N)
