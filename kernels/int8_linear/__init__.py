"""int8 weight-only lm_head and embeddings (per-row symmetric scales).

`linear_int8` has two implementations behind one signature: `ref` (ref.py, the spec: dequantize a
chunk of rows at a time, then matmul; the CPU path) and `triton` (weight_only.py: streams the int8
table once, dequantizes in registers; the CUDA path). The engine's switch is EDITAPPLY_INT8_HEAD;
the implementation follows the device like the attention kernel's (EDITAPPLY_ATTENTION's auto).
"""

from __future__ import annotations

import torch

from kernels.int8_linear.ref import (
    dequantize_rows,
    embedding_int8_ref,
    linear_int8_ref,
    quantize_rows,
)


def linear_int8(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, impl: str = "ref") -> torch.Tensor:
    """x [M, K] @ (q [N, K] int8 * scale [N]).T -> [M, N] fp32."""
    if impl == "triton":
        from kernels.int8_linear.weight_only import linear_int8_triton

        return linear_int8_triton(x, q, scale)
    return linear_int8_ref(x, q, scale)


__all__ = ["dequantize_rows", "embedding_int8_ref", "linear_int8", "linear_int8_ref", "quantize_rows"]
