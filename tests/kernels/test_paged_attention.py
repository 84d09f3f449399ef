"""The Triton paged-attention kernel (kernels/paged_attention/split_kv.py) against ref.py, its spec.

On the CPU the kernel runs in Triton's interpreter (tests/kernels/conftest.py), on a GPU natively.
Every buffer the kernel allocates (output and split partials) starts as NaN, so an element it fails
to write fails the comparison. Caches are filled through engine/kv_cache.py, so every storage
format is read exactly as the engine writes it; slot tables are scattered permutations with live
(masked) slots past each context.
"""

from contextlib import contextmanager
from itertools import accumulate
from unittest import mock

import pytest
import torch

from engine.config import KV_DTYPES
from engine.kv_cache import make_layer_kv
from kernels.paged_attention import paged_attention_cache_ref, resolve_impl
from kernels.paged_attention.split_kv import paged_attention_triton

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# max |kernel - ref| / max |ref|: fp32 differs in summation order only; 16-bit outputs round.
TOL = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


@contextmanager
def nan_buffers():
    empty, empty_like = torch.empty, torch.empty_like
    with mock.patch.object(torch, "empty", lambda *a, **k: empty(*a, **k).fill_(float("nan"))), \
         mock.patch.object(torch, "empty_like", lambda *a, **k: empty_like(*a, **k).fill_(float("nan"))):
        yield


def check(query_lens, context_lens, *, D=64, G=2, Hkv=2, kv_dtype="auto", dtype=torch.float32, window=None,
          seed=0, window_blocks=64, **kernel_args):
    """Random queries and cache for sequences with these query and context lengths; the kernel's
    output must match the reference's. int4 with a `window_blocks` pool smaller than the cache is
    written a block at a time, so that only the last blocks written keep their full-precision copy."""
    g = torch.Generator().manual_seed(seed)
    B = len(query_lens)
    width = max(context_lens) + 9  # padded tables, as the engine's are
    num_slots = -(-(B * width + 16) // 16) * 16
    kv = make_layer_kv(kv_dtype, num_slots, Hkv, D, dtype, DEVICE, window_blocks=window_blocks)
    k, v = torch.randn(num_slots, Hkv, D, generator=g).to(DEVICE), torch.randn(num_slots, Hkv, D, generator=g).to(DEVICE)
    step = 16 if num_slots > 16 * window_blocks else num_slots
    for a in range(0, num_slots, step):
        kv.write(torch.arange(a, a + step, device=DEVICE), k[a : a + step], v[a : a + step])
    slot_tables = torch.randperm(num_slots, generator=g)[: B * width].view(B, width).to(DEVICE)
    q = (2 * torch.randn(sum(query_lens), G * Hkv, D, generator=g)).to(dtype).to(DEVICE)
    max_q = max(query_lens)
    q_positions = torch.stack([torch.arange(c - n, c - n + max_q) for n, c in zip(query_lens, context_lens)]).to(DEVICE)
    uniform = len(set(query_lens)) == 1
    starts = None if uniform else torch.tensor(list(accumulate(query_lens, initial=0)), dtype=torch.int32, device=DEVICE)
    scale = D**-0.5

    ref = paged_attention_cache_ref(q, kv, slot_tables, q_positions, query_lens, context_lens, scale, window)
    with nan_buffers():
        out = paged_attention_triton(q, kv, slot_tables, q_positions, scale, window, query_starts=starts, **kernel_args)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert not out.isnan().any(), "unwritten output"
    err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    assert err <= TOL[dtype], f"relative error {err:.2e} > {TOL[dtype]:.0e}"


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("G", [1, 2, 7])
@pytest.mark.parametrize("Tq", [1, 5, 16])
def test_shapes(D, G, Tq):
    check([Tq, Tq], [Tq + 30, Tq + 77], D=D, G=G, seed=Tq)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_every_kv_dtype(kv_dtype, dtype):
    # the 0.5B model's GQA ratio, a verify block, three splits
    check([16, 16], [45, 100], G=7, kv_dtype=kv_dtype, dtype=dtype, num_splits=3, block_n=16)


@pytest.mark.parametrize("kv_dtype", ["int4", "int8"])
def test_quantized_head_dim_128(kv_dtype):
    check([5], [70], D=128, G=6, kv_dtype=kv_dtype, num_splits=2, block_n=16)


@pytest.mark.parametrize("Tq", [1, 16, 40])
def test_int4_full_precision_window_partly_evicted(Tq):
    # slot tables are scattered, so a query's own block may or may not be among the 6 held ones
    check([Tq, Tq], [Tq + 50, Tq + 130], G=7, kv_dtype="int4", window_blocks=6, num_splits=3, block_n=16, seed=Tq)


def test_fp16_compute():
    check([16, 1], [33, 64], G=7, dtype=torch.float16, num_splits=2, block_n=16)


@pytest.mark.parametrize("num_splits", [1, 2, 5, 20])
def test_splits(num_splits):
    # 20 splits of 16-key tiles for a 200-key context: some are empty and must weigh nothing
    check([5, 5, 5], [200, 17, 5], G=2, num_splits=num_splits, block_n=16)


def test_launch_layout(monkeypatch):
    """A verify block at batch 1 runs as query blocks of 64 rows on a GPU of 132 SMs, a batch of
    64 as blocks of 128 (split_kv.choose_block_m); splits are a power of two, within MAX_SPLITS."""
    from kernels.paged_attention import split_kv

    monkeypatch.setattr(split_kv, "_sm_count", lambda device: 132)
    cpu = torch.device("cpu")
    assert split_kv.choose_block_m(1, 16, 7, 2, 64, cpu) == 64  # the 0.5B
    assert split_kv.choose_block_m(1, 16, 6, 2, 128, cpu) == 64  # the 1.5B
    assert split_kv.choose_block_m(64, 16, 7, 2, 64, cpu) == 128
    assert split_kv.choose_block_m(1, 1, 7, 2, 64, cpu) == 16  # a decode token
    assert split_kv.choose_block_m(1, 512, 7, 2, 64, cpu) == 128  # a prefill chunk
    for programs in (1, 2, 4, 8, 33, 100, 131):
        for width in (16, 1000, 4608, 1 << 15):
            n = split_kv.choose_splits(programs, width, cpu)
            assert n & (n - 1) == 0 and 1 <= n <= split_kv.MAX_SPLITS, (programs, width, n)
    assert split_kv.choose_splits(4, 4608, cpu) == 64 and split_kv.choose_splits(132, 4608, cpu) == 1


@pytest.mark.parametrize("G,D", [(7, 64), (6, 128)])
def test_one_sequence_verify_block_in_64_row_blocks(G, D):
    # the interpreter's 8 SMs: one sequence's 16 queries over 2 KV heads take the 64-row blocks,
    # so the block of queries is cut in two (9 + 7 or 10 + 6 queries) and both read every split
    check([16], [300], D=D, G=G, dtype=torch.bfloat16)


@pytest.mark.parametrize("window", [1, 7, 40])
@pytest.mark.parametrize("Tq", [1, 16])
def test_sliding_window(window, Tq):
    check([Tq, Tq], [30, 120], G=7, window=window, num_splits=3, block_n=16)


@pytest.mark.parametrize("kv_dtype", ["auto", "int8", "int4"])
@pytest.mark.parametrize("window", [None, 24])
def test_varlen_batch(kv_dtype, window):
    # a decode, a whole first prompt chunk, a later 40-token chunk (three query blocks), a short verify
    check([1, 16, 40, 3], [50, 16, 90, 200], G=7, kv_dtype=kv_dtype, window=window, block_n=16)


def test_varlen_bf16_splits():
    check([1, 16, 3], [50, 16, 200], G=2, dtype=torch.bfloat16, num_splits=4, block_n=16)


@pytest.mark.parametrize("kv_dtype", ["auto", "int4"])
@pytest.mark.parametrize("window", [None, 24])
def test_reference_tiles_long_chunks(kv_dtype, window):
    """A prompt chunk longer than QUERY_TILE runs in query tiles, each over the context up to its
    last query: the same result as one SDPA over the whole chunk (batched with a decode, whose
    short query is never tiled)."""
    from kernels.paged_attention import ref

    g = torch.Generator().manual_seed(0)
    query_lens, context_lens, width = [1, 100], [70, 163], 172
    kv = make_layer_kv(kv_dtype, 2 * width + 4, 2, 64, torch.float32, "cpu")
    kv.write(torch.arange(2 * width + 4), torch.randn(2 * width + 4, 2, 64, generator=g),
             torch.randn(2 * width + 4, 2, 64, generator=g))
    slot_tables = torch.randperm(2 * width + 4, generator=g)[: 2 * width].view(2, width)
    q = torch.randn(sum(query_lens), 14, 64, generator=g)
    q_positions = torch.stack([torch.arange(c - n, c - n + 100) for n, c in zip(query_lens, context_lens)])
    args = (q, kv, slot_tables, q_positions, query_lens, context_lens, 0.125, window)
    whole = paged_attention_cache_ref(*args)
    with mock.patch.object(ref, "QUERY_TILE", 16):
        tiled = paged_attention_cache_ref(*args)
    torch.testing.assert_close(tiled, whole, rtol=1e-6, atol=1e-6)


def test_resolve_impl():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_impl("auto", cpu, 64) == "ref"
    assert resolve_impl("auto", cuda, 64) == "triton"
    assert resolve_impl("auto", cuda, 16) == "ref"  # below the kernel's smallest head dim
    assert resolve_impl("ref", cuda, 64) == "ref"
    assert resolve_impl("auto", cuda, 64, "int4") == "ref" and resolve_impl("triton", cuda, 64, "int4") == "triton"
    with pytest.raises(ValueError, match="head dims"):
        resolve_impl("triton", cuda, 80)
    with pytest.raises(ValueError, match="must be one of"):
        resolve_impl("flash", cpu, 64)


@pytest.mark.parametrize("kv_dtype", ["auto", "fp8", "int4"])
def test_engine_tokens_match_reference(tiny_model, kv_dtype):
    """Through the whole engine with each attention: prompt chunks of different lengths in one step
    (one varlen call), then decode and verify blocks side by side; the same tokens. In fp32 on every
    device: in bf16 a random model's near-tie logits flip with the reduction order (int4 did so
    once on the H200, at f294197), which says nothing about the kernel."""
    from engine.config import EngineConfig
    from engine.engine import LLMEngine
    from engine.types import Request, SamplingParams

    prompts = [[(7 * i) % 200 + 1 for i in range(70)], [(5 * i) % 190 + 3 for i in range(23)]]
    outs = {}
    for impl in ("ref", "triton"):
        eng = LLMEngine(EngineConfig(model=str(tiny_model), device=DEVICE, dtype="float32", attention=impl, kv_dtype=kv_dtype,
                                     max_model_len=256, max_num_seqs=2, max_batch_tokens=64, enforce_eager=True))
        assert eng.runner.attention == impl
        seqs = [eng.add_request(Request(p, SamplingParams(max_tokens=24, ignore_eos=True),
                                        sources={"prediction": p[-30:] * 2}, drafter=d))
                for p, d in zip(prompts, ("lookup", "none"))]
        while eng.has_work():
            eng.step()
        outs[impl] = [s.output_ids for s in seqs]
    assert outs["triton"] == outs["ref"]


@pytest.mark.parametrize("H,Hkv,D", [(14, 2, 64), (9, 3, 64), (12, 2, 128)])
def test_the_rows_form_gives_each_query_the_same_output_alone_or_in_any_block(H, Hkv, D):
    """Batch-invariant attention (ref.py, paged_attention_rows): a query's output is bit-identical
    whether it is computed alone (a decode step), as any row of a verify block, or over a key table
    padded further; and it is fp32 attention rounded to bf16 (the SDPA of fp32 copies)."""
    from kernels.paged_attention import paged_attention_rows

    g = torch.Generator().manual_seed(0)
    k, v = (torch.randn(1300, Hkv, D, generator=g).bfloat16() for _ in range(2))
    q, positions = torch.randn(40, H, D, generator=g).bfloat16(), torch.arange(990, 1030)
    block = paged_attention_rows(q, k, v, positions, D**-0.5)
    for i in range(0, 40, 3):
        for keys in (991 + i, 1030, 1300):
            alone = paged_attention_rows(q[i : i + 1], k[:keys], v[:keys], positions[i : i + 1], D**-0.5)
            assert torch.equal(alone[0], block[i])
        for rows in (2, 5, 17):
            j = max(0, i - rows + 1)
            assert torch.equal(paged_attention_rows(q[j : i + 1], k, v, positions[j : i + 1], D**-0.5)[-1], block[i])
    visible = (torch.arange(1030)[None] <= positions[:, None])[None, None]
    full = lambda x: x[:1030].float().permute(1, 0, 2).repeat_interleave(H // Hkv, 0)[None]
    exact = torch.nn.functional.scaled_dot_product_attention(
        q.float().permute(1, 0, 2)[None], full(k), full(v), attn_mask=visible, scale=D**-0.5)[0].permute(1, 0, 2)
    assert (block.float() - exact).abs().max() <= (exact.bfloat16().float() - exact).abs().max() + 1e-6


@pytest.mark.parametrize("dtype,window", [(torch.float32, None), (torch.bfloat16, 300)], ids=["fp32", "bf16-window"])
def test_the_kernels_invariant_form_gives_each_query_the_same_output_alone_or_in_any_block(dtype, window,
                                                                                        interpreter_rows_invariant):
    """The Triton kernel's batch-invariant form (split_kv.py, fixed splits): a query's output is
    bit-identical computed alone (a decode step, its table cut after its position or padded), as a
    row of a verify block, or beside another sequence's rows; and it is attention within TOL.
    Without the fixed splits the splits follow the row count and the table's width, and the bits
    part (choose_splits)."""
    g = torch.Generator().manual_seed(3)
    H, Hkv, D, width = 14, 2, 64, 1100
    kv = make_layer_kv("auto", 2 * width, Hkv, D, dtype, DEVICE)
    kv.write(torch.arange(2 * width, device=DEVICE), *(torch.randn(2 * width, Hkv, D, generator=g).to(DEVICE)
                                                       for _ in range(2)))
    tables = torch.randperm(2 * width, generator=g).view(2, width).to(DEVICE)
    q = torch.randn(20, H, D, generator=g).to(dtype).to(DEVICE)
    positions = torch.arange(1010, 1030, device=DEVICE)
    attend = lambda rows, table, pos, **kw: paged_attention_triton(rows, kv, table, pos, D**-0.5, window,
                                                                   invariant=True, **kw)
    block = attend(q, tables[:1], positions[None])
    ref = paged_attention_cache_ref(q, kv, tables[:1], positions[None], [20], [1030], D**-0.5, window)
    assert ((block.float() - ref.float()).abs().max() / ref.float().abs().max()).item() <= TOL[dtype]
    other = torch.randn(16, H, D, generator=g).to(dtype).to(DEVICE)
    for i in (0, 19):
        for keys in (1011 + i, width):
            assert torch.equal(attend(q[i : i + 1], tables[:1, :keys], positions[None, i : i + 1])[0], block[i])
        # beside another sequence's 16-row verify block, this query's block its own 4 rows
        j = max(0, i - 3)
        rows = torch.cat((other, q[j : i + 1]))
        pos = torch.stack((torch.arange(500, 516, device=DEVICE), torch.cat((positions[j : i + 1],
                           positions.new_zeros(16 - (i + 1 - j))))))
        starts = torch.tensor([0, 16, 16 + i + 1 - j], dtype=torch.int32, device=DEVICE)
        assert torch.equal(attend(rows, tables.flip(0), pos, query_starts=starts)[-1], block[i])
