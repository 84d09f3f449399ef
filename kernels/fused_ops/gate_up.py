"""The MLP's gate/up projection with SiLU-and-mul in its epilogue: one Triton launch for
silu(x @ w_gate.T) * (x @ w_up.T), where the model ran a cuBLAS GEMM and then fused.py's
SiLU-and-mul.

A program sums one [BLOCK_M, BLOCK_N] tile of the gate and the same tile of the up projection over
the whole K (kernels/tiles.py `dot_tile`, twice), then rounds and multiplies them as the unfused
path does: each projection rounded to the model dtype (the GEMM's output), silu in fp32 rounded,
the product rounded. So the result differs from the unfused path's only where the GEMM's summation
order does. One block of rows (BLOCK_M up to FUSED_MAX_ROWS): a verify step's few dozen rows,
where the weights are read once. Larger steps keep cuBLAS (models/transformer.py MLP).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.fused_ops import FUSED_MAX_ROWS
from kernels.pdl import pdl_options, wait_previous
from kernels.tiles import dot_options, dot_tile, prefetch_rows

# BLOCK_N, BLOCK_K, warps, stages: a first guess, not yet measured; bench.linear_small --mlp sweeps them.
TILE = (32, 128, 4, 3)


# M varies by step: not specialized on, so a new row count compiles no new variant mid-request.
@triton.jit(do_not_specialize=["M"])
def _gate_up_silu_kernel(x_ptr, w_ptr, out_ptr, M, I, K, stride_xm, stride_wn, stride_om,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         DOT_FP32: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr):
    if PDL:  # the weight's reads start before the wait (kernels/pdl.py)
        rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        prefetch_rows(w_ptr, rn, I, K, stride_wn)
        prefetch_rows(w_ptr + I * stride_wn, rn, I, K, stride_wn)
    wait_previous(PDL)
    gate, rm, rn = dot_tile(x_ptr, w_ptr, M, I, K, stride_xm, stride_wn, BLOCK_M, BLOCK_N, BLOCK_K, DOT_FP32, PRECISION)
    up, _, _ = dot_tile(x_ptr, w_ptr + I * stride_wn, M, I, K, stride_xm, stride_wn, BLOCK_M, BLOCK_N, BLOCK_K,
                        DOT_FP32, PRECISION)
    dt = out_ptr.dtype.element_ty
    g = gate.to(dt).to(tl.float32)
    act = (g / (1.0 + tl.exp(-g))).to(dt)  # fused.py's SiLU-and-mul from here
    out = act.to(tl.float32) * up.to(dt).to(tl.float32)
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], out.to(dt), mask=(rm[:, None] < M) & (rn[None, :] < I))


def gate_up_silu_triton(x: torch.Tensor, weight: torch.Tensor, tile: tuple[int, int, int, int] = TILE) -> torch.Tensor:
    """x [M, K] (M <= FUSED_MAX_ROWS), weight [2 * I, K] = [gate | up] rows -> silu(gate) * up, [M, I].
    `tile`: (BLOCK_N, BLOCK_K, warps, stages)."""
    M, K = x.shape
    I = weight.shape[0] // 2
    assert weight.shape == (2 * I, K) and weight.stride(1) == 1 and weight.dtype == x.dtype, (weight.shape, x.shape)
    assert 0 < M <= FUSED_MAX_ROWS and x.stride(1) == 1, (x.shape, x.stride())
    block_n, block_k, warps, stages = tile
    out = torch.empty(M, I, dtype=x.dtype, device=x.device)
    _gate_up_silu_kernel[(triton.cdiv(I, block_n), 1)](
        x_ptr=x, w_ptr=weight, out_ptr=out, M=M, I=I, K=K, stride_xm=x.stride(0), stride_wn=weight.stride(0),
        stride_om=out.stride(0), BLOCK_M=max(16, triton.next_power_of_2(M)), BLOCK_N=block_n, BLOCK_K=block_k,
        **dot_options(x), **pdl_options(x), num_warps=warps, num_stages=stages,
    )
    return out
