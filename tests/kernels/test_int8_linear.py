"""int8 weight-only lm_head and embeddings (kernels/int8_linear): ref.py's quantization bounds, and
the Triton kernel against ref.py, its spec.

On the CPU the kernel runs in Triton's interpreter (tests/kernels/conftest.py), on a GPU natively.
The kernel's output starts as NaN, so an element it fails to write fails the comparison.
"""

import pytest
import torch

from kernels.int8_linear import (
    dequantize_rows,
    embedding_int8_ref,
    linear_int8,
    linear_int8_ref,
    quantize_rows,
)
from kernels.int8_linear.weight_only import linear_int8_triton
from tests.kernels.test_paged_attention import nan_buffers

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# max |kernel - ref| / max |ref|: fp32 differs in summation order only; 16-bit inputs round.
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def random_table(N, K, seed=0):
    g = torch.Generator().manual_seed(seed)
    # Rows of very different magnitudes, as an embedding table has; one all-zero row.
    w = torch.randn(N, K, generator=g) * torch.rand(N, 1, generator=g).mul(3).exp()
    w[N // 2] = 0
    return w


def test_round_trip_is_within_half_a_step_per_row():
    w = random_table(301, 77)
    q, scale = quantize_rows(w)
    assert q.dtype == torch.int8 and scale.shape == (301,)
    assert q.abs().max() <= 127
    err = (dequantize_rows(q, scale) - w).abs()
    assert (err <= scale[:, None] / 2 + 1e-6).all()
    assert (dequantize_rows(q, scale)[301 // 2] == 0).all()
    # Each row's largest element is stored exactly (as +-127 steps).
    assert (q.abs().amax(1)[torch.arange(301) != 301 // 2] == 127).all()


def test_embedding_gathers_the_dequantized_rows():
    w = random_table(50, 16)
    q, scale = quantize_rows(w)
    ids = torch.tensor([3, 0, 49, 3, 25])
    out = embedding_int8_ref(ids, q, scale, torch.float32)
    assert torch.equal(out, dequantize_rows(q, scale)[ids])


@pytest.mark.parametrize("M,N,K", [(1, 1000, 64), (16, 8193, 96), (63, 517, 200)])
def test_reference_logit_error_is_bounded(M, N, K, monkeypatch):
    """Against the float table: each logit is off by at most sum_k |x_k| * scale_n / 2."""
    monkeypatch.setattr("kernels.int8_linear.ref.CHUNK_ROWS", 1000)  # several chunks, a ragged last one
    w = random_table(N, K, seed=1)
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(2))
    q, scale = quantize_rows(w)
    out = linear_int8_ref(x, q, scale)
    exact = x.double() @ w.double().t()
    bound = x.abs().sum(1, keepdim=True).double() * scale.double()[None, :] / 2
    assert out.shape == (M, N) and out.dtype == torch.float32
    assert ((out.double() - exact).abs() <= bound + 1e-4).all()
    # On Gaussian data the error is far below the worst case: a small fraction of the logits' scale.
    assert (out.double() - exact).abs().max() / exact.abs().max() < 0.02


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("M,N,K", [(1, 130, 64), (16, 517, 96), (17, 300, 200), (63, 1000, 128), (130, 200, 64)])
def test_triton_matches_reference(M, N, K, dtype):
    w = random_table(N, K, seed=M)
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(3)).to(dtype)
    q, scale = quantize_rows(w)
    q, scale, x = q.to(DEVICE), scale.to(DEVICE), x.to(DEVICE)
    ref = linear_int8_ref(x.float(), q, scale)
    with nan_buffers():
        out = linear_int8_triton(x, q, scale)
    assert out.shape == ref.shape and out.dtype == torch.float32
    assert not out.isnan().any(), "unwritten output"
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    assert err <= TOL[dtype], f"relative error {err:.2e} > {TOL[dtype]:.0e}"


def test_dispatch_picks_the_implementation():
    w = random_table(40, 32)
    q, scale = quantize_rows(w)
    x = torch.randn(5, 32)
    assert torch.allclose(linear_int8(x.to(DEVICE), q.to(DEVICE), scale.to(DEVICE), "triton").cpu(),
                          linear_int8(x, q, scale, "ref"), atol=1e-4)
