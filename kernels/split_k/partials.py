"""The Triton kernel of kernels/split_k: program (n, m, s) sums its output tile over the s-th run
of K (`split_bounds`) and writes it to the partial sums' slice s; gated, of silu(gate) * up
computed in its loads (kernels/tiles.py `dot_tile`)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.pdl import pdl_options, wait_previous
from kernels.split_k import split_bounds
from kernels.tiles import dot_options, dot_tile


# M varies by step: not specialized on, so a new row count compiles no new variant mid-request.
@triton.jit(do_not_specialize=["M"])
def _partials_kernel(x_ptr, w_ptr, out_ptr, M, N, K, K_SPLIT, stride_xm, stride_wn, stride_os, stride_om,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     DOT_FP32: tl.constexpr, PRECISION: tl.constexpr, GATED: tl.constexpr, PDL: tl.constexpr):
    wait_previous(PDL)
    s = tl.program_id(2)
    k_lo = s * K_SPLIT
    acc, rm, rn = dot_tile(x_ptr, w_ptr, M, N, k_lo, tl.minimum(k_lo + K_SPLIT, K), stride_xm, stride_wn,
                           BLOCK_M, BLOCK_N, BLOCK_K, DOT_FP32, PRECISION, GATED, K)
    tl.store(out_ptr + s * stride_os + rm[:, None] * stride_om + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def linear_partials(x: torch.Tensor, weight: torch.Tensor, splits: int, block_n: int = 32, block_k: int = 128,
                    num_warps: int = 4, num_stages: int = 4, gated: bool = False) -> torch.Tensor:
    """x [M, K] @ weight [N, K].T as [splits, M, N] fp32 partial sums (split s over
    `split_bounds(K, splits, block_k)[s]`); gated: x is [M, 2K] = [gate | up] and the product is
    silu(gate) * up @ weight.T."""
    M = x.shape[0]
    N, K = weight.shape
    assert x.shape[1] == (2 * K if gated else K), (x.shape, weight.shape, gated)
    assert weight.stride(1) == 1 and weight.dtype == x.dtype, (weight.stride(), weight.dtype, x.dtype)
    x = x.contiguous()
    per = split_bounds(K, splits, block_k)[0][1]
    out = torch.empty(splits, M, N, dtype=torch.float32, device=x.device)
    block_m = max(16, triton.next_power_of_2(min(M, 64)))
    _partials_kernel[(triton.cdiv(N, block_n), triton.cdiv(M, block_m), splits)](
        x_ptr=x, w_ptr=weight, out_ptr=out, M=M, N=N, K=K, K_SPLIT=per,
        stride_xm=x.stride(0), stride_wn=weight.stride(0), stride_os=out.stride(0), stride_om=out.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, **dot_options(x), GATED=gated, **pdl_options(x),
        num_warps=num_warps, num_stages=num_stages,
    )
    return out
