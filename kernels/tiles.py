"""The K-loop of one output tile of x[M, K] @ w[N, K].T, shared by the Triton linears
(kernels/invariant_linear, kernels/int8_linear), and their dot options.

A program of the grid (N blocks, M blocks) sums its [BLOCK_M, BLOCK_N] tile over K in BLOCK_K
chunks, first to last, into an fp32 accumulator; rows past M and columns past N load as zeros.
The weight is cast to x's dtype in registers (exact for int8 weights, |q| <= 127; a no-op for a
weight of x's dtype). DOT_FP32: both operands go to fp32 first, where Triton's interpreter
multiplies bf16 wrongly (fp32 holds bf16 and int8 exactly, so the sums are the same).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def dot_options(x: torch.Tensor) -> dict:
    """The DOT_FP32 and PRECISION arguments of a kernel using these loops (and the split-KV
    attention's), for activations x: fp32 operands for bf16 off CUDA (the interpreter), IEEE fp32
    dots for fp32 (no TF32)."""
    return {"DOT_FP32": x.dtype == torch.bfloat16 and x.device.type != "cuda",
            "PRECISION": "ieee" if x.dtype == torch.float32 else None}


@triton.jit
def dot_tile(x_ptr, w_ptr, M, N, K, stride_xm, stride_wn,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
             DOT_FP32: tl.constexpr, PRECISION: tl.constexpr):
    """(acc [BLOCK_M, BLOCK_N] fp32, its rows rm, its columns rn) of this program's tile."""
    pid_n, pid_m = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0)
        w = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0)
        if DOT_FP32:
            x, w = x.to(tl.float32), w.to(tl.float32)
        else:
            w = w.to(x.dtype)
        acc = tl.dot(x, w, acc, input_precision=PRECISION)  # [BLOCK_M, BLOCK_K] @ [BLOCK_K, BLOCK_N]
    return acc, rm, rn
