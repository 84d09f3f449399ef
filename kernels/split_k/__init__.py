"""Split-K linear for steps of a few rows: x[M, K] @ w[N, K].T as SPLITS fp32 partial sums.

A 16-row verify step's down projection (the 0.5B: N = 896 outputs over K = 4,864) has too few
output tiles to fill the GPU, so cuBLAS splits K and adds the splits up in a kernel of its own.
Here program (n, m, s) sums its tile over the s-th of SPLITS equal runs of K (kernels/tiles.py
`dot_tile`) and the partial sums stay apart, [SPLITS, M, N] in fp32: the kernel that reads the
projection next, the residual add + RMSNorm (kernels/fused_ops `add_rms_norm`), adds them in split
order, so the reduction costs no launch of its own.

    sums = SplitK(splits=4)(x, w)      # SplitSums: .parts [4, M, N] fp32, .total() ~ x @ w.T
    SplitK()(gate_up, w, gated=True)   # ~ silu(gate) * up @ w.T: the MLP's SiLU-and-mul in the loads

The Triton kernel is partials.py, imported where it runs (Triton's interpreter is chosen before
its first import); the partial sums' type, SplitSums, is kernels/fused_ops's, whose norm reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.fused_ops.ref import SplitSums, silu_and_mul_ref


def split_bounds(K: int, splits: int, block_k: int) -> list[tuple[int, int]]:
    """The runs of K the splits sum: equal, in whole BLOCK_K chunks, the last one short (or empty)."""
    per = _cdiv(_cdiv(K, splits), block_k) * block_k
    return [(lo, min(lo + per, K)) for lo in range(0, splits * per, per)]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class SplitK:
    """How a projection is split: `splits` runs of K, output tiles of block_n columns summing K in
    block_k chunks, for steps of at most `max_rows` rows (more fill the GPU without a split)."""

    splits: int = 4
    block_n: int = 32
    block_k: int = 128
    num_stages: int = 4
    max_rows: int = 64
    gated: bool = False  # the MLP hands its down projection [gate | up], SiLU-and-mul done in the loads

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, gated: bool = False) -> SplitSums:
        """x @ weight.T as partial sums; gated: x is [gate | up] and the product silu(gate) * up @ weight.T."""
        from kernels.split_k.partials import linear_partials

        parts = linear_partials(x, weight, self.splits, self.block_n, self.block_k, num_stages=self.num_stages,
                                gated=gated)
        return SplitSums(parts, x.dtype)


def linear_partials_ref(x: torch.Tensor, weight: torch.Tensor, splits: int, block_k: int = 128,
                        gated: bool = False) -> torch.Tensor:
    """The same partial sums with torch, in fp32."""
    if gated:
        x = silu_and_mul_ref(x)
    return torch.stack([x[:, lo:hi].float() @ weight[:, lo:hi].float().T
                        for lo, hi in split_bounds(x.shape[1], splits, block_k)])
