"""The batch-invariant matmul (kernels/invariant_linear/fixed_tiles.py): torch's product within
rounding, and each row's bits the same whatever rows it is computed beside.

On the CPU the kernel runs in Triton's interpreter (tests/kernels/conftest.py), on a GPU natively,
where the row check is the one that matters (cuBLAS's rows differ between shapes there; device job
`kernels`). The output starts as NaN, so an element the kernel fails to write fails the comparison.
"""

import pytest
import torch

from kernels.invariant_linear.fixed_tiles import linear_fixed_tiles
from tests.kernels.test_paged_attention import nan_buffers

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# max |kernel - torch| / max |torch|: fp32 differs in summation order only; bf16 outputs round.
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def operands(M, K, N, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, w, b = torch.randn(M, K, generator=g), torch.randn(N, K, generator=g) / K**0.5, torch.randn(N, generator=g)
    return (t.to(dtype).to(DEVICE) for t in (x, w, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("M,K,N", [(1, 64, 40), (5, 200, 96), (16, 256, 33), (40, 130, 70)])
@pytest.mark.parametrize("bias", [False, True], ids=["", "bias"])
def test_matches_torch(M, K, N, dtype, bias):
    x, w, b = operands(M, K, N, dtype)
    b = b if bias else None
    with nan_buffers():
        out = linear_fixed_tiles(x, w, b)
    ref = torch.nn.functional.linear(x.float(), w.float(), None if b is None else b.float())
    assert out.shape == (M, N) and out.dtype == dtype and not out.isnan().any()
    err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    assert err <= TOL[dtype], f"relative error {err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_each_row_is_the_same_alone_in_a_block_or_in_a_batch(dtype, interpreter_rows_invariant):
    """A decode step's one row, a verify block's 16 and a batch of 3 blocks (48) give every row the
    same bits, wherever the row sits among them; leading dims are flattened as rows."""
    x, w, b = operands(48, 320, 72, dtype, seed=1)
    batch = linear_fixed_tiles(x, w, b)
    for i in (0, 7, 15, 16, 31, 47):
        assert torch.equal(linear_fixed_tiles(x[i : i + 1], w, b)[0], batch[i])
        j = max(0, i - 15)
        assert torch.equal(linear_fixed_tiles(x[j : i + 1], w, b)[-1], batch[i])
    assert torch.equal(linear_fixed_tiles(x.view(3, 16, 320), w, b).view(48, 72), batch)
