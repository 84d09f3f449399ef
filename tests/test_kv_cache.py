"""Paged KV cache: block accounting, prefix caching, quantized storage, preemption."""

import random

import numpy as np
import pytest
import torch

from engine.block_manager import BlockManager, BlockTable, OutOfBlocksError
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.kv_cache import make_layer_kv
from engine.types import Request, RequestError, SamplingParams
from tests.conftest import EagerBlocks

# ---- block manager, no model ---------------------------------------------------------------


def test_random_workload_never_leaks_blocks():
    rng = random.Random(0)
    bm = BlockManager(num_blocks=64, block_size=4)
    live = []
    for _ in range(3000):
        op = rng.random()
        if op < 0.5:
            tokens = [rng.randrange(3) for _ in range(rng.randrange(1, 40))]  # few symbols: many shared prefixes
            shared, hashes = bm.match_prefix(tokens)
            need = bm.blocks_for(len(tokens) + 4) - len(shared)
            if need > bm.num_free:
                bm.release(shared)
                continue
            table = shared + bm.allocate(need)
            for i, h in enumerate(bm.extend_hashes(hashes, tokens, (len(tokens) - 1) // 4)[len(shared):], len(shared)):
                bm.register(table[i], h)
            live.append(table)
        elif live:
            bm.release(live.pop(rng.randrange(len(live))))
        assert bm.num_free + sum(1 for r in bm.ref if r > 0) == bm.num_blocks
    for table in live:
        bm.release(table)
    assert bm.num_free == bm.num_blocks
    assert all(r == 0 for r in bm.ref)
    assert bm.hits > 0


def test_block_table_reads_as_the_list_it_replaces():
    """A sequence's BlockTable, grown a few blocks at a time as a verify step's room is allocated,
    reads like the list of the same blocks: positions as ints, slices and numpy views of the
    same ids, iteration both ways; released, every block is free again."""
    rng = random.Random(0)
    bm = BlockManager(num_blocks=512, block_size=16)
    table, mirror = BlockTable(bm.allocate(3)), []
    mirror.extend(table)
    while bm.num_free:
        blocks = bm.allocate(min(bm.num_free, rng.choice([0, 1, 1, 2, 5])))
        table.extend(blocks)
        mirror.extend(blocks)
        i = rng.randrange(len(mirror))
        assert len(table) == len(mirror) and table[i] == mirror[i] and type(table[i]) is int
        assert table[i:].tolist() == mirror[i:] and np.asarray(table).tolist() == mirror
        assert list(table) == mirror and list(reversed(table)) == mirror[::-1]
    assert len(BlockTable()) == 0 and BlockTable()[:4].tolist() == []
    bm.release(table)
    assert bm.num_free == bm.num_blocks


def test_out_of_blocks_is_an_error_not_a_crash():
    bm = BlockManager(num_blocks=2, block_size=4)
    bm.allocate(2)
    with pytest.raises(OutOfBlocksError, match="need 1 KV blocks, 0 free"):
        bm.allocate(1)


def test_prefix_match_never_shares_the_last_tokens_block():
    bm = BlockManager(num_blocks=8, block_size=4)
    tokens = list(range(8))  # exactly two full blocks
    table = bm.allocate(3)
    for i, h in enumerate(bm.prompt_hashes(tokens, 2)):
        bm.register(table[i], h)
    shared, _ = bm.match_prefix(tokens)
    assert shared == table[:1]  # the block holding the last token is recomputed privately


def test_eviction_is_lru_and_unregisters():
    bm = BlockManager(num_blocks=3, block_size=2)
    a, b = bm.allocate(2)
    bm.register(a, b"ha")
    bm.register(b, b"hb")
    bm.release([a])
    bm.release([b])
    bm.allocate(2)  # one plainly free block, then evicts the least recently released: a
    assert bm.num_cached == 1 and b"hb" in bm._by_hash


# ---- quantized storage on real activations --------------------------------------------------

# Relative L2 error of K and V tensors stored and read back as keys; measured on the CI model:
# bf16 0.17%, fp16 0.02%, fp8 2.5%, int8 1.3%, int4 6.5% (per channel over each block; 10.7% with
# the per-token groups before issue 16: keys have outlier channels within a head).
BOUNDS = {"bf16": 0.005, "fp16": 0.001, "fp8": 0.04, "int8": 0.02, "int4": 0.08}


@pytest.fixture(scope="module")
def real_kv(ci_model_dir):
    """Keys and values of every layer of the CI model on a real code prompt."""
    engine = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=1024, enable_prefix_caching=False))
    ids = engine.tokenizer.encode(open("engine/scheduler.py").read())[:300]
    seq = engine.add_request(Request(ids, SamplingParams(max_tokens=1)))
    while seq.needs_prefill:
        engine.step()
    slots = engine.kv.slot_tables([seq.block_table], len(ids) - 1, "cpu")
    kv = [layer.gather(slots) for layer in engine.kv.layers]
    engine.cancel(seq)
    return kv


@pytest.mark.parametrize("kv_dtype", sorted(BOUNDS))
def test_quantization_error_bounds(real_kv, kv_dtype):
    worst = 0.0
    for k, v in real_kv:
        for x in (k[0], v[0]):  # [S, H, D]
            layer = make_layer_kv(kv_dtype, x.shape[0], x.shape[1], x.shape[2], torch.float32, "cpu")
            slots = torch.arange(x.shape[0])
            layer.write(slots, x, x)
            y, _ = layer.gather(slots[None])
            worst = max(worst, ((y[0] - x).norm() / x.norm()).item())
    assert worst < BOUNDS[kv_dtype], worst


# ---- int4: keys per channel over a block, the newest block in full precision -----------------


def int4_layer(num_blocks=8, window_blocks=64, H=2, D=64):
    return make_layer_kv("int4", num_blocks * 16, H, D, torch.float32, "cpu", block_size=16, window_blocks=window_blocks)


def outlier_kv(T, H=2, D=64, seed=0):
    """Keys with Qwen-like outlier channels (a few channels 30-60x larger, offset), plain values."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(T, H, D, generator=g)
    k[..., [3, 40]] = k[..., [3, 40]] * 40 + 60
    return k, torch.randn(T, H, D, generator=g)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def test_int4_per_channel_keys_keep_outlier_channels():
    k, v = outlier_kv(64)
    layer = int4_layer()
    layer.write(torch.arange(64), k, v)
    kq, vq = layer.gather(torch.arange(64)[None])
    # Per-channel: every channel keeps 16 levels of its own range. Measured: keys 3.7%, the other
    # channels alone 6.6% (per-token groups of 32 on the same keys: 145% on them), values 7.9%.
    normal = [c for c in range(64) if c not in (3, 40)]
    assert rel(kq[0], k) < 0.05
    assert rel(kq[0][..., normal], k[..., normal]) < 0.10
    assert rel(vq[0], v) < 0.10


def test_int4_block_contents_do_not_depend_on_how_writes_are_cut():
    """One write of 70 tokens, or token by token, or chunks across block boundaries with drafts
    written past the end and then rewritten (a rejected verify block): the same stored bytes."""
    k, v = outlier_kv(70)
    junk_k, junk_v = outlier_kv(70, seed=1)
    slots = torch.tensor([5 * 16 + i for i in range(16)] + [2 * 16 + i for i in range(16)] +
                         [7 * 16 + i for i in range(16)] + [0 * 16 + i for i in range(16)] + [3 * 16 + i for i in range(6)])
    once = int4_layer()
    once.write(slots, k, v)
    cut = int4_layer()
    for a, b in ((0, 1), (1, 13), (13, 20)):
        cut.write(slots[a:b], k[a:b], v[a:b])
    cut.write(slots[20:40], junk_k[20:40], junk_v[20:40])  # a verify block across a boundary, rejected
    for a, b in ((20, 33), (33, 50), (50, 51), (51, 70)):
        cut.write(slots[a:b], k[a:b], v[a:b])
    for name, rows in (("k", slots), ("v", slots), ("v_scale", slots), ("k_scale", slots.unique() // 16)):
        assert torch.equal(getattr(once, name)[rows], getattr(cut, name)[rows]), name


def test_int4_window_holds_full_precision_and_is_bounded():
    k, v = outlier_kv(40)
    layer = int4_layer(window_blocks=2)
    slots = torch.arange(40)  # blocks 0, 1, 2 (partial)
    for i in range(40):
        layer.write(slots[i : i + 1], k[i : i + 1], v[i : i + 1])
    kq, vq = layer.gather(slots[None])
    kf, vf = layer.gather_window(slots[None], kq, vq)
    assert layer.window_of.tolist()[:3] == [-1, 0, 1] or layer.window_of.tolist()[:3] == [-1, 1, 0]
    assert torch.equal(kf[0, 16:], k[16:]) and torch.equal(vf[0, 16:], v[16:])  # held: exact
    assert torch.equal(kf[0, :16], kq[0, :16])  # evicted: its quantized form
    with pytest.raises(RuntimeError, match="touches 3 KV blocks"):
        layer.write(torch.tensor([0, 16, 32]), k[:3], v[:3])


def test_int4_attention_reads_own_block_in_full_precision():
    """A decode query in block 2 sees blocks 0-1 quantized and its own block exactly."""
    from kernels.paged_attention import paged_attention_cache_ref, paged_attention_ref

    k, v = outlier_kv(40)
    layer = int4_layer()
    slots = torch.arange(40)
    layer.write(slots, k, v)
    q = torch.randn(1, 4, 64)
    out = paged_attention_cache_ref(q, layer, slots[None], torch.tensor([[39]]), [1], [40], 0.125)
    kq, vq = layer.gather(slots[None])
    mixed_k, mixed_v = torch.cat((kq[0, :32], k[32:]))[None], torch.cat((vq[0, :32], v[32:]))[None]
    want = paged_attention_ref(q[None], mixed_k, mixed_v, torch.tensor([[39]]), 0.125)[0]
    torch.testing.assert_close(out, want)


def test_quantized_bytes_per_token_shrink():
    sizes = {d: make_layer_kv(d, 16, 2, 64, torch.bfloat16, "cpu").bytes_per_slot for d in ("bf16", "fp8", "int8", "int4")}
    assert sizes["bf16"] > sizes["fp8"] == sizes["int8"] > sizes["int4"]


# ---- the engine ------------------------------------------------------------------------------


def run(engine, prompts, max_tokens=24, together=True):
    reqs = [Request(p, SamplingParams(max_tokens=max_tokens)) for p in prompts]
    if together:
        seqs = [engine.add_request(r) for r in reqs]
        while engine.has_work():
            engine.step()
        return [s.output_ids for s in seqs], seqs
    outs = []
    for r in reqs:
        outs.append([t for ev in engine.generate(r) for t in ev.token_ids])
    return outs, None


@pytest.fixture(scope="module")
def prompts(ci_model_dir):
    from engine.tokenizer import Tokenizer

    tok = Tokenizer(ci_model_dir)
    doc = open("engine/block_manager.py").read()[:1500]
    return [tok.encode_chat([{"role": "user", "content": f"{doc}\n\nQuestion {i}: what does line {i} do?"}])
            for i in range(4)]


@pytest.mark.parametrize("kv_dtype", ["auto", "int4"])
def test_prefix_cache_hits_and_identical_results(ci_model_dir, prompts, kv_dtype):
    # int4: shared full blocks are read quantized exactly as their writer stored them
    cached = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=2048, kv_dtype=kv_dtype))
    plain = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=2048, enable_prefix_caching=False,
                                   kv_dtype=kv_dtype))
    with_cache, _ = run(cached, prompts, together=False)
    without, _ = run(plain, prompts, together=False)
    assert with_cache == without
    assert cached.kv.blocks.hits >= 3 * (len(prompts[0]) // 16 - 4)  # questions 2..4 reuse the document
    assert plain.kv.blocks.hits == 0
    assert cached.kv.blocks.num_free == cached.kv.num_blocks  # nothing leaked, cached blocks evictable


def test_batched_equals_one_at_a_time_and_preemption_is_invisible(ci_model_dir, prompts):
    roomy = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=2048, max_num_seqs=4))
    alone, _ = run(roomy, prompts, together=False)
    batched, _ = run(roomy, prompts, together=True)
    assert batched == alone
    # Room to admit two sequences but not to grow both: the newer one is preempted, recomputed.
    admit_blocks = -(-(max(len(p) for p in prompts) + roomy.cfg.verify_tokens) // 16)
    tight = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=2048, max_num_seqs=4,
                                   kv_cache_tokens=2 * admit_blocks * 16, enable_prefix_caching=False))
    squeezed, _ = run(tight, prompts, together=True)
    assert tight.scheduler.preemptions > 0
    assert squeezed == alone
    assert tight.kv.blocks.num_free == tight.kv.num_blocks


def test_a_request_the_pool_can_never_hold_is_refused_not_left_waiting(ci_model_dir):
    """What a request can have is the pool less its reserved blocks, with its own verify block:
    on CUDA the graphs reserve a scratch block (engine/cuda_graphs.py; reserved by hand here, as
    GraphRunner does, since CI has no GPU). A prompt whose verify block needed that block passed
    the check and then waited for room that never comes, the engine stepping forever
    (bench.step_time at 4k tokens and K=64 on an H100). Now add_request refuses it, and one that
    fits runs to its end."""
    engine = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=320, max_num_seqs=1, verify_tokens=16,
                                    kv_cache_tokens=320))  # 20 blocks
    engine.kv.allocator.reserve()
    assert engine.kv.allocator.capacity == 19
    prompt = [100 + i for i in range(256)]
    # The request's own block counts, not the engine's 16: 256 + 64 positions are 20 blocks.
    with pytest.raises(RequestError, match="do not fit the KV cache"):
        engine.add_request(Request(prompt, SamplingParams(max_tokens=4), drafter="none", verify_tokens=64))
    seq = engine.add_request(Request(prompt, SamplingParams(max_tokens=4), drafter="none", verify_tokens=32))  # 18
    while engine.has_work():
        engine.step()
    assert seq.finish_reason == "length" and seq.num_generated == 4
    assert engine.kv.blocks.num_free == engine.kv.allocator.capacity


def test_the_default_pool_seats_full_context_requests_at_the_longest_block(ci_model_dir):
    engine = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=320, max_num_seqs=2))
    prompts = [[100 + i + j for i in range(316)] for j in range(2)]
    seqs = [engine.add_request(Request(p, SamplingParams(max_tokens=4), drafter="none", verify_tokens=64))
            for p in prompts]
    engine.step()  # both admitted at once, each with its verify block of 64
    assert all(seq in engine.running for seq in seqs)
    while engine.has_work():
        engine.step()
    assert [seq.num_generated for seq in seqs] == [4, 4]


def test_a_short_prefill_after_a_cached_document_runs_in_verify_blocks(ci_model_dir, prompts):
    # Question 2's uncached tail (under SHORT_PREFILL tokens) goes in blocks of K from its cached
    # length, padding included, and the answers are those of one eager prefill.
    from engine.runner import SHORT_PREFILL

    blocks = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=2048))
    eager = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=2048))
    stand_in = blocks.runner.graphs = EagerBlocks(blocks.runner)
    got, _ = run(blocks, prompts[:3], together=False)
    want, _ = run(eager, prompts[:3], together=False)
    assert got == want
    k = blocks.cfg.verify_tokens
    replays = [call for call in stand_in.calls if call[1][0] > 0]  # after the cached document
    first = replays[0][1][0]
    tail = len(prompts[1]) - 1 - first
    n = -(-tail // k)
    assert first % blocks.kv.block_size == 0 and tail <= SHORT_PREFILL
    lengths = [length for lengths, _ in replays for length in lengths][:n]
    starts = [start for _, starts in replays for start in starts][:n]
    assert starts == list(range(first, len(prompts[1]) - 1, k)) and sum(lengths) == tail and max(lengths) <= k
