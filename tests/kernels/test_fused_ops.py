"""Fused small ops (kernels/fused_ops): the Triton kernels against ref.py, their spec, and ref.py
against the model's unfused layers.

On the CPU the kernels run in Triton's interpreter (tests/kernels/conftest.py), on a GPU natively.
Their outputs start as NaN, so an element a kernel fails to write fails the comparison. Hidden
sizes 72 and 200 are not powers of two, so the kernels' blocks must mask.
"""

import pytest
import torch
import torch.nn.functional as F

from kernels.fused_ops import (add_rms_norm, add_rms_norm_ref, rotary, rotary_ref, rotary_to_cache, rotary_to_cache_ref,
                               silu_and_mul, silu_and_mul_ref)
from kernels.fused_ops.fused import add_rms_norm_triton, rotary_to_cache_triton, rotary_triton, silu_and_mul_triton
from tests.kernels.test_paged_attention import nan_buffers

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
# max |kernel - ref| / max |ref|: fp32 differs in summation order and exp/rsqrt rounding only; in
# 16 bits those differences can flip a rounding step of an output (2^-8 relative in bf16). Triton's
# interpreter (3.x) casts fp32 -> bf16 by truncation, not round-to-nearest as the GPU and torch do,
# so on the CPU bf16 outputs are off by up to one more step of each rounding.
TOL = {FP32: 1e-5, FP16: 1e-3, BF16: 2e-2}
# Where the kernel's rounding is torch's (not interpreted bf16), one-rounding results are bit-exact.
EXACT_ROUNDING = {FP32: True, FP16: True, BF16: DEVICE == "cuda"}


def cases(sizes, dtypes=(FP32, BF16)):
    """Rows 1, 7 and 63 for every size and dtype; 500 rows (a batch of verify blocks) for the first
    size only, since the interpreter runs a program at a time; fp16 on one case each."""
    grid = [(T, size, dt) for T in (1, 7, 63) for size in sizes for dt in dtypes]
    return grid + [(500, sizes[0], dt) for dt in dtypes] + [(63, sizes[-1], FP16)]


def ids(case):
    T, size, dt = case
    size = "x".join(map(str, size)) if isinstance(size, tuple) else size
    return f"T{T}-{size}-{str(dt).removeprefix('torch.')}"


def randn(*shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEVICE)


def assert_close(out, ref, dtype):
    assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, ref.shape, out.dtype, ref.dtype)
    assert not out.isnan().any(), "unwritten output"
    err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    assert err <= TOL[dtype], f"relative error {err:.2e} > {TOL[dtype]:.0e}"


@pytest.mark.parametrize("T,N,dtype", cases([896, 72, 200]), ids=map(ids, cases([896, 72, 200])))
def test_add_rms_norm(T, N, dtype):
    x = randn(T, N, dtype=dtype, seed=T)
    residual = randn(T, N, dtype=dtype, seed=T + 1, scale=4.0)
    weight = randn(N, dtype=dtype, seed=N)
    ref_out, ref_res = add_rms_norm_ref(x, residual, weight, 1e-6)
    with nan_buffers():
        out, res = add_rms_norm_triton(x, residual, weight, 1e-6)
    # The residual add is one rounding of an exact sum on both sides: equal bit for bit.
    if EXACT_ROUNDING[dtype]:
        assert torch.equal(res, ref_res)
    assert_close(res, ref_res, dtype)
    assert_close(out, ref_out, dtype)


@pytest.mark.parametrize("dtype", [FP32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("T,N", [(1, 896), (63, 72)])
def test_rms_norm_without_residual_returns_the_input(T, N, dtype):
    x = randn(T, N, dtype=dtype, seed=5)
    weight = randn(N, dtype=dtype, seed=6)
    with nan_buffers():
        out, res = add_rms_norm_triton(x, None, weight, 1e-5)
    assert res is x
    assert_close(out, add_rms_norm_ref(x, None, weight, 1e-5)[0], dtype)


def test_rms_norm_of_strided_heads():
    """q_norm's input: heads [T, H, D] of a fused qkv projection, rows not contiguous."""
    qkv = randn(7, 3 * 4 * 72, dtype=FP32, seed=8)
    q = qkv[:, : 4 * 72].view(7, 4, 72)
    weight = randn(72, dtype=FP32, seed=9)
    with nan_buffers():
        out, _ = add_rms_norm_triton(q, None, weight, 1e-6)
    assert_close(out, add_rms_norm_ref(q, None, weight, 1e-6)[0], FP32)


@pytest.mark.parametrize("T,I,dtype", cases([200, 72, 896]), ids=map(ids, cases([200, 72, 896])))
def test_silu_and_mul(T, I, dtype):
    x = randn(T, 2 * I, dtype=dtype, seed=T * I, scale=3.0)
    with nan_buffers():
        out = silu_and_mul_triton(x, block=128)  # several blocks per row, a ragged last one
    assert_close(out, silu_and_mul_ref(x), dtype)


@pytest.mark.parametrize("T,heads,dtype", cases([(14, 2, 64), (9, 3, 72), (4, 4, 128)]),
                         ids=map(ids, cases([(14, 2, 64), (9, 3, 72), (4, 4, 128)])))
def test_rotary(T, heads, dtype):
    H, Hkv, D = heads
    # q and k as views of one fused qkv row, as the model hands them over.
    qkv = randn(T, (H + 2 * Hkv) * D, dtype=dtype, seed=T + D)
    q = qkv[:, : H * D].view(T, H, D)
    k = qkv[:, H * D: (H + Hkv) * D].view(T, Hkv, D)
    angles = torch.rand(T, 1, D // 2, generator=torch.Generator().manual_seed(H)) * 100
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos().to(dtype).to(DEVICE), angles.sin().to(dtype).to(DEVICE)
    ref_q, ref_k = rotary_ref(q, k, cos, sin)
    with nan_buffers():
        out_q, out_k = rotary_triton(q, k, cos, sin)
    assert_close(out_q, ref_q, dtype)
    assert_close(out_k, ref_k, dtype)


@pytest.mark.parametrize("T,heads,dtype,cache_dtype", [(1, (14, 2, 64), FP32, FP32), (7, (9, 3, 72), BF16, BF16),
                                                       (63, (4, 4, 128), FP32, BF16), (16, (14, 2, 64), BF16, BF16)])
def test_rotary_to_cache(T, heads, dtype, cache_dtype):
    """rope(k) and v land in the cache rows of their slots (in any order, other rows untouched), in
    the cache's dtype; q comes back rotated."""
    H, Hkv, D = heads
    qkv = randn(T, (H + 2 * Hkv) * D, dtype=dtype, seed=T + D)
    q = qkv[:, : H * D].view(T, H, D)
    k = qkv[:, H * D: (H + Hkv) * D].view(T, Hkv, D)
    v = qkv[:, (H + Hkv) * D:].view(T, Hkv, D)
    angles = torch.rand(T, 1, D // 2, generator=torch.Generator().manual_seed(H)) * 100
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos().to(dtype).to(DEVICE), angles.sin().to(dtype).to(DEVICE)
    slots = torch.randperm(3 * T, generator=torch.Generator().manual_seed(T))[:T].to(DEVICE)
    caches = {impl: [torch.full((3 * T, Hkv, D), float("nan"), dtype=cache_dtype, device=DEVICE) for _ in range(2)]
              for impl in ("ref", "triton")}
    ref_q = rotary_to_cache_ref(q, k, v, cos, sin, *caches["ref"], slots)
    with nan_buffers():
        out_q = rotary_to_cache_triton(q, k, v, cos, sin, *caches["triton"], slots)
    assert_close(out_q, ref_q, dtype)
    for ref_cache, out_cache in zip(caches["ref"], caches["triton"]):
        assert_close(out_cache[slots], ref_cache[slots], dtype if cache_dtype == dtype else cache_dtype)
        others = torch.ones(3 * T, dtype=torch.bool, device=DEVICE)
        others[slots] = False
        assert out_cache[others].isnan().all()  # rows of other slots untouched
    assert torch.equal(rotary_to_cache(q, k, v, cos, sin, *caches["ref"], slots, "ref"), ref_q)


def test_reference_is_the_unfused_arithmetic():
    """ref.py is what the model computed before fusion, bit for bit (the exactness tests rely on it)."""
    x, r = randn(9, 40, dtype=BF16, seed=1), randn(9, 40, dtype=BF16, seed=2)
    w = randn(40, dtype=BF16, seed=3)
    s = r + x
    s32 = s.float()
    expect = w * (s32 * torch.rsqrt(s32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(s.dtype)
    out, res = add_rms_norm_ref(x, r, w, 1e-6)
    assert torch.equal(res, s) and torch.equal(out, expect)
    assert torch.equal(silu_and_mul_ref(x), F.silu(x[:, :20]) * x[:, 20:])


@pytest.mark.parametrize("impl", ["ref", "triton"])
def test_dispatch(impl):
    x, r = randn(3, 64, dtype=FP32, seed=1), randn(3, 64, dtype=FP32, seed=2)
    w = randn(64, dtype=FP32, seed=3)
    out, res = add_rms_norm(x, r, w, 1e-6, impl)
    assert_close(out, add_rms_norm_ref(x, r, w, 1e-6)[0], FP32)
    assert_close(silu_and_mul(x, impl), silu_and_mul_ref(x), FP32)
    q, k = x.view(3, 2, 32), r.view(3, 2, 32)
    cos, sin = w[None, None, :32].expand(3, 1, 32).contiguous(), w[None, None, 32:].expand(3, 1, 32).contiguous()
    for a, b in zip(rotary(q, k, cos, sin, impl), rotary_ref(q, k, cos, sin)):
        assert_close(a, b, FP32)


def test_pdl_stays_off_where_the_gpu_cannot_take_it(monkeypatch):
    """EngineConfig.pdl on, the kernels on Triton's interpreter (no griddepcontrol there): they keep
    their plain launches and results (kernels/pdl.py)."""
    from kernels import pdl

    monkeypatch.setattr(pdl, "_enabled", True)
    x, r = randn(3, 64, dtype=FP32, seed=1), randn(3, 64, dtype=FP32, seed=2)
    assert pdl.pdl_options(x) == {"PDL": False, "launch_pdl": False}
    assert_close(add_rms_norm(x, r, randn(64, dtype=FP32, seed=3), 1e-6, "triton")[0],
                 add_rms_norm_ref(x, r, randn(64, dtype=FP32, seed=3), 1e-6)[0], FP32)


def test_model_with_triton_kernels_matches_reference():
    """A 2-layer random Qwen3 (q/k norms on strided heads, 4 query heads on 2 KV heads, hidden 72,
    intermediate 100) through CausalLM with every kernel on triton, against the reference path."""
    from engine.kv_cache import KVCache
    from engine.models.config import ModelConfig
    from engine.models.layers import RMSNorm, SiluAndMul
    from engine.models.transformer import Attention, AttentionMetadata, CausalLM

    cfg = ModelConfig(architecture="qwen3", vocab_size=97, hidden_size=72, intermediate_size=100, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=32, rms_norm_eps=1e-6, rope_theta=1e6,
                      max_position_embeddings=64, qk_norm=True)
    torch.manual_seed(0)
    model = CausalLM(cfg).to(DEVICE)
    for m in model.modules():
        if isinstance(m, RMSNorm):
            m.weight.data.normal_(1.0, 0.2)
    ids = torch.randint(0, 97, (11,), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    logits = {}
    for impl in ("ref", "triton"):
        model.set_kernel_impl(impl)
        assert all(m.impl == impl for m in model.modules() if isinstance(m, (Attention, RMSNorm, SiluAndMul)))
        kv = KVCache(2, num_blocks=4, block_size=8, num_kv_heads=2, head_dim=32, dtype=FP32, device=DEVICE)
        slot_tables = kv.slot_tables([[2, 0]], 11, DEVICE)
        meta = AttentionMetadata(slot_mapping=slot_tables[0, :11], slot_tables=slot_tables,
                                 q_positions=torch.arange(11, device=DEVICE)[None], query_lens=[11], context_lens=[11])
        with torch.no_grad():
            logits[impl] = model.compute_logits(model(ids, torch.arange(11, device=DEVICE), meta, kv.layers))
    assert_close(logits["triton"], logits["ref"], FP32)
