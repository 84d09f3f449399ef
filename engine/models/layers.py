"""Building blocks shared by every supported family: linear layers, RMSNorm, rotary embeddings, SwiGLU."""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from kernels.fused_ops import add_rms_norm, silu_and_mul


# Batch-invariant rows are computed this many at a time: oneDNN's bf16 kernels on a CPU with AMX
# block the rows differently above 32 (Intel Xeon, torch 2.13: rows 0-31 of a 33-row matmul
# differ in the last bit from the same rows of a 32-row one), while every N from 2 to 32 agrees.
INVARIANT_ROWS = 32


def rows_matmul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                invariant: bool = False, packed: torch.Tensor | None = None) -> torch.Tensor:
    """x [N, in] @ weight [out, in]^T (+ bias); `packed`: the weight as `pack_weight` laid it out,
    used in its place. `invariant`: each row's result does not depend on N. On the CPU a matmul
    of one row takes a GEMV kernel whose sums differ from the GEMM's (at 1,536 inputs and more),
    while every N from 2 to INVARIANT_ROWS gives the same rows: so rows go INVARIANT_ROWS at a
    time, and one row is computed as the first of two. On CUDA, cuBLAS chooses its kernel by shape:
    kernels/invariant_linear's one tile shape instead. Batch-invariant mode,
    kernels/paged_attention/ref.py says why."""
    if invariant and x.is_cuda:
        from kernels.invariant_linear.fixed_tiles import linear_fixed_tiles

        return linear_fixed_tiles(x, weight, bias)
    if invariant and x.shape[0] > INVARIANT_ROWS:
        return torch.cat([rows_matmul(part, weight, bias, True, packed) for part in x.split(INVARIANT_ROWS)])
    if invariant and x.shape[0] == 1:
        return rows_matmul(torch.cat((x, x)), weight, bias, packed=packed)[:1]
    if packed is not None:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return nn.functional.linear(x, weight, bias)


# The rows oneDNN lays a packed weight out for: a verify block's (any row count runs on it).
PACK_ROWS = 16


def can_pack(weight: torch.Tensor) -> bool:
    """Whether `pack_weight` applies: the CPU with oneDNN, fp32, or bf16 where oneDNN packs it."""
    return (weight.device.type == "cpu" and weight.dtype in (torch.float32, torch.bfloat16)
            and torch.backends.mkldnn.is_available() and onednn_packs(weight.dtype))


@functools.cache
def onednn_packs(dtype: torch.dtype) -> bool:
    """Whether oneDNN lays out a `dtype` weight on this CPU: bf16 needs AVX-512 (BW, VL, DQ) or
    AVX-NE-CONVERT, and an AVX2-only CPU refuses it (a RuntimeError). Asked once per dtype."""
    try:
        pack_weight(torch.zeros(PACK_ROWS, PACK_ROWS, dtype=dtype))
    except RuntimeError:
        return False
    return True


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] in oneDNN's blocked layout, for `rows_matmul` on the CPU. aten's linear
    lays a plain weight out again at every call; packed once, a 16-row matmul runs 1.4-3.6x faster
    (fp32 MKL against oneDNN, and bf16) on the AMD EPYC, each row's result independent of the row
    count from 2 up in fp32 as in bf16, and in bf16 bit-identical to aten's (bench/HISTORY.md,
    "Packed weights on the CPU"; tests/models/test_packed_weights.py)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS)


class Linear(nn.Linear):
    """nn.Linear with `rows_matmul`'s batch-invariant form behind a switch (CausalLM.set_batch_invariant),
    and its weight packed for the CPU once loaded (`pack`)."""

    batch_invariant = False
    packed: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rows_matmul(x, self.weight, self.bias, self.batch_invariant, self.packed)

    def pack(self) -> None:
        """Keep the weight packed (`pack_weight`) in place of the plain one, which is given up: a
        read of `weight` afterwards finds an empty tensor."""
        self.packed = pack_weight(self.weight)
        self.weight = nn.Parameter(self.weight.new_empty(0), requires_grad=False)


class RMSNorm(nn.Module):
    """weight * rmsnorm(x). Called with the residual stream as well, it is vLLM's fused form: adds x
    to the stream first and returns (normed, new stream). The arithmetic is kernels/fused_ops's
    (normalize in fp32, cast back before the weight, as the reference implementations do)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.impl = "ref"  # or "triton"; CausalLM.set_kernel_impl

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        out, residual_out = add_rms_norm(x, residual, self.weight, self.eps, self.impl)
        return out if residual is None else (out, residual_out)


class SiluAndMul(nn.Module):
    """SwiGLU activation on a fused [gate | up] projection: silu(gate) * up."""

    def __init__(self):
        super().__init__()
        self.impl = "ref"  # or "triton"; CausalLM.set_kernel_impl

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x, self.impl)


def rope_inv_freq(head_dim: int, theta: float, scaling: dict) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [head_dim // 2] and the cos/sin scale factor for a rope config.

    Supports the scalings the supported families ship with: default, linear (position
    interpolation), llama3 (Llama 3.1 frequency-band smoothing) and yarn (Qwen2.5 long context).
    """
    dim = head_dim
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    kind = scaling.get("rope_type", "default")
    if kind == "default":
        return inv_freq, 1.0
    factor = float(scaling["factor"])
    if kind == "linear":
        return inv_freq / factor, 1.0
    if kind == "llama3":
        low_ff, high_ff = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_len = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low_ff, old_len / high_ff
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low_ff) / (high_ff - low_ff)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled), 1.0
    if kind == "yarn":
        return _yarn_inv_freq(dim, theta, factor, scaling)
    raise ValueError(f"unsupported rope_type {kind!r}")


def _yarn_inv_freq(dim: int, theta: float, factor: float, s: dict) -> tuple[torch.Tensor, float]:
    """YaRN: interpolate low frequencies, keep high ones, blend with a linear ramp between."""
    orig_len = s["original_max_position_embeddings"]

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = s.get("attention_factor")
    if attention_factor is None:
        if s.get("mscale") and s.get("mscale_all_dim"):
            attention_factor = mscale(factor, s["mscale"]) / mscale(factor, s["mscale_all_dim"])
        else:
            attention_factor = mscale(factor)
    beta_fast, beta_slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(orig_len / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = theta ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation = 1 - ramp
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv_freq, float(attention_factor)


class RotaryEmbedding(nn.Module):
    """Precomputed cos/sin tables, looked up by absolute position (rotate-half layout)."""

    def __init__(self, head_dim: int, theta: float, scaling: dict, max_positions: int):
        super().__init__()
        inv_freq, attention_factor = rope_inv_freq(head_dim, theta, scaling)
        freqs = torch.arange(max_positions, dtype=torch.float32)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)  # [max_positions, head_dim]
        self.register_buffer("cos", emb.cos() * attention_factor, persistent=False)
        self.register_buffer("sin", emb.sin() * attention_factor, persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        # [T, 1, head_dim] each, broadcast over heads
        return self.cos[positions, None].to(dtype), self.sin[positions, None].to(dtype)


class Int8Table(nn.Module):
    """An embedding / lm_head table stored as int8 rows with per-row scales (kernels/int8_linear).

    Called with token ids it embeds them (gather the int8 rows, scale, cast to `dtype`); `logits`
    multiplies hidden states by the table. Tied models use one table for both.
    """

    def __init__(self, weight: torch.Tensor, impl: str = "ref"):
        super().__init__()
        from kernels.int8_linear import quantize_rows

        q, scale = quantize_rows(weight)
        self.register_buffer("q", q.to(weight.device))  # [vocab, hidden] int8
        self.register_buffer("scale", scale.to(weight.device))  # [vocab] fp32
        self.dtype, self.impl = weight.dtype, impl

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # [T] -> [T, hidden]
        from kernels.int8_linear import embedding_int8_ref

        return embedding_int8_ref(ids, self.q, self.scale, self.dtype)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:  # [N, hidden] -> [N, vocab] fp32
        from kernels.int8_linear import linear_int8

        return linear_int8(hidden, self.q, self.scale, self.impl)
