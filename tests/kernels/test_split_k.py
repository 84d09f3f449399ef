"""Split-K partial sums (kernels/split_k) and the residual add + RMSNorm that adds them up
(kernels/fused_ops with a SplitSums input), against torch.

On the CPU the kernels run in Triton's interpreter (tests/kernels/conftest.py), on a GPU natively.
K = 200 and 4,864 with BLOCK_K 64 or 128 leave a short last split, and N = 72 a short last tile;
outputs start as NaN, so a tile or split the kernel fails to write fails the comparison."""

import pytest
import torch

from kernels.fused_ops import SplitSums, add_rms_norm, add_rms_norm_ref
from kernels.split_k import SplitK, linear_partials_ref, split_bounds
from kernels.split_k.partials import linear_partials
from tests.kernels.test_fused_ops import BF16, DEVICE, EXACT_ROUNDING, FP32, TOL, assert_close, randn
from tests.kernels.test_paged_attention import nan_buffers, side_by_side_tokens


def test_split_bounds_cover_k_in_whole_chunks():
    assert split_bounds(4864, 4, 128) == [(0, 1280), (1280, 2560), (2560, 3840), (3840, 4864)]
    assert split_bounds(200, 8, 64) == [(0, 64), (64, 128), (128, 192), (192, 200), (256, 200), (320, 200),
                                        (384, 200), (448, 200)]  # the last four sum nothing


@pytest.mark.parametrize("M,N,K,splits,block_k,dtype", [
    (16, 72, 200, 2, 64, FP32), (16, 72, 200, 8, 64, FP32), (1, 96, 4864, 4, 128, FP32),
    (23, 64, 200, 3, 64, BF16), (64, 72, 4864, 4, 128, BF16)])
def test_linear_partials_match_torch(M, N, K, splits, block_k, dtype):
    x = randn(M, K, dtype=dtype, seed=M)
    w = randn(N, K, dtype=dtype, seed=N, scale=K ** -0.5)
    ref = linear_partials_ref(x, w, splits, block_k)
    with nan_buffers():
        parts = linear_partials(x, w, splits, block_n=32, block_k=block_k, num_stages=2)
    assert parts.shape == (splits, M, N) and parts.dtype == FP32
    assert not parts.isnan().any(), "unwritten partial sum"
    err = ((parts - ref).abs().max() / ref.abs().max()).item()
    assert err <= 1e-5, err  # fp32 sums of exact products: the order within a split only
    full = (x.float() @ w.float().T)
    assert ((parts.sum(0) - full).abs().max() / full.abs().max()).item() <= 1e-5


@pytest.mark.parametrize("M,K,dtype", [(16, 200, FP32), (5, 200, BF16), (64, 4864, BF16)])
def test_gated_partials_do_the_silu_and_mul_in_their_loads(M, K, dtype):
    """x = [gate | up]: the partial sums of silu(gate) * up @ w.T, the activation rounded as
    kernels/fused_ops's SiLU-and-mul rounds it, so only the sums' order differs (but for bf16 in
    Triton's interpreter, which rounds to bf16 by truncation: tests/kernels/test_fused_ops.py)."""
    N, splits, block_k = 72, 4, 64
    gate_up = randn(M, 2 * K, dtype=dtype, seed=K, scale=3.0)
    w = randn(N, K, dtype=dtype, seed=N, scale=K ** -0.5)
    ref = linear_partials_ref(gate_up, w, splits, block_k, gated=True)
    with nan_buffers():
        parts = linear_partials(gate_up, w, splits, block_n=32, block_k=block_k, num_stages=2, gated=True)
    assert not parts.isnan().any(), "unwritten partial sum"
    assert ((parts - ref).abs().max() / ref.abs().max()).item() <= (1e-5 if EXACT_ROUNDING[dtype] else TOL[dtype])
    with pytest.raises(AssertionError):  # [gate | up] is twice the weight's K wide
        linear_partials(gate_up[:, :K], w, splits, block_k=block_k, gated=True)


@pytest.mark.parametrize("splits,dtype", [(1, FP32), (4, FP32), (4, BF16), (7, BF16)])
def test_add_rms_norm_adds_split_sums_up_first(splits, dtype):
    M, N = 7, 200
    parts = randn(splits, M, N, dtype=FP32, seed=splits)
    residual = randn(M, N, dtype=dtype, seed=3, scale=4.0)
    weight = randn(N, dtype=dtype, seed=N)
    summed = SplitSums(parts, dtype)
    ref_out, ref_res = add_rms_norm_ref(summed.total(), residual, weight, 1e-6)
    for impl in ("ref", "triton"):
        with nan_buffers():
            out, res = add_rms_norm(summed, residual, weight, 1e-6, impl)
        assert_close(out, ref_out, dtype)
        assert_close(res, ref_res, dtype)


def test_engine_tokens_with_the_down_projection_split(tiny_model):
    """Through the whole engine: prompt chunks, decode and verify blocks with every layer's down and
    o projections as split-K sums (the SiLU-and-mul in the loads or not) give the tokens of the
    plain projections (fp32)."""
    from engine.config import EngineConfig
    from engine.engine import LLMEngine

    outs = {}
    for split in ("off", "down+o", "down+act+o"):
        eng = LLMEngine(EngineConfig(model=str(tiny_model), device=DEVICE, dtype="float32", attention="triton",
                                     max_model_len=256, max_num_seqs=2, max_batch_tokens=64, enforce_eager=True,
                                     split_k=split, packed_weights=False))
        layer = eng.runner.model.layers[0]
        assert (layer.mlp.split_k is not None, layer.self_attn.split_k is not None) == (split != "off",) * 2
        if split != "off":  # three runs of K each: the down projection's 96, o's 896
            assert layer.mlp.split_k.gated == ("act" in split)
            eng.runner.model.set_split_k(SplitK(splits=3, block_k=32, gated="act" in split), ("down", "o"))
        outs[split] = side_by_side_tokens(eng)
    assert outs["down+o"] == outs["off"] and outs["down+act+o"] == outs["off"]


def test_the_split_is_for_steps_of_a_few_rows():
    """A step of more rows than the plan's max_rows runs the plain projection."""
    from types import SimpleNamespace

    from engine.models.transformer import MLP

    mlp = MLP(SimpleNamespace(hidden_size=32, intermediate_size=64)).to(DEVICE)
    mlp.split_k = SplitK(splits=2, block_k=32, max_rows=8)
    few, many = randn(8, 32, dtype=FP32, seed=1), randn(9, 32, dtype=FP32, seed=2)
    assert isinstance(mlp(few), SplitSums) and isinstance(mlp(many), torch.Tensor)
    torch.testing.assert_close(mlp(few).total(), mlp.down_proj(mlp.act(mlp.gate_up_proj(few))))
    mlp.split_k = SplitK(splits=2, block_k=32, max_rows=8, gated=True)
    assert isinstance(mlp(few), SplitSums) and isinstance(mlp(many), torch.Tensor)
    torch.testing.assert_close(mlp(few).total(), mlp.down_proj(mlp.act(mlp.gate_up_proj(few))))
