"""The CUDA graphs' inputs (engine/cuda_graphs.py `_Inputs`: staged on the host, derived on the
device) lay a batch out exactly as the eager path's `ModelRunner.prepare` does, padded to the
graph's shape. Staging and derivation are plain arithmetic, so they are checked on the CPU (the
graphs themselves run only on CUDA and are checked against eager steps by tests/kernels on the
H200 and by bench.step_time)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine.config import EngineConfig
from engine.cuda_graphs import _Inputs, block_sizes
from engine.engine import LLMEngine
from engine.types import Request, SamplingParams


@pytest.fixture(scope="module")
def engine(ci_model_dir):
    return LLMEngine(EngineConfig(model=str(ci_model_dir), device="cpu", max_model_len=1024, kv_cache_tokens=4096))


def test_staged_inputs_match_the_eager_layout(engine):
    Tq, B, width, bs = 16, 4, 1024, engine.kv.block_size
    seqs = []
    for n in (37, 300, 5):  # prompts of odd lengths: block tables of 3, 20 and 2 blocks
        seq = engine.add_request(Request(list(range(1, n + 1)), SamplingParams(max_tokens=4), drafter="none"))
        seq.num_cached = n
        engine.scheduler.ensure_room(seq, n + Tq)
        seqs.append(seq)
    batch = [(seq, [7 + i] * Tq) for i, seq in enumerate(seqs)]
    scratch_block = 771
    inputs = _Inputs(B, Tq, width, "cpu", scratch_block * bs, bs)
    inputs.host[:] = -1  # a stale layout must be overwritten everywhere
    graph = SimpleNamespace(B=B, Tq=Tq, width=width)
    inputs.stage(graph, batch, [seq.num_cached for seq in seqs])
    inputs.copy(graph)
    ids, pos, meta = inputs.derive(B, Tq, width)

    e_ids, e_pos, e_meta = engine.runner.prepare(batch)
    T, n = len(batch) * Tq, len(batch)
    assert torch.equal(ids[:T], e_ids) and torch.equal(pos[:T], e_pos)
    assert torch.equal(meta.slot_mapping[:T], e_meta.slot_mapping)
    assert torch.equal(meta.q_positions[:n], e_meta.q_positions)
    tables, e_tables = meta.slot_tables, e_meta.slot_tables
    for i, seq in enumerate(seqs):  # past a table's end: the scratch block, masked
        end = len(seq.block_table) * bs
        shown = min(end, e_tables.shape[1])  # the eager tables end at the batch's context
        assert torch.equal(tables[i, :shown], e_tables[i, :shown]) and (tables[i, end:] // bs == scratch_block).all()
    # The idle row: token 0 from position 0, its K/V written to the scratch block, reading it only.
    assert (ids[T:] == 0).all() and torch.equal(pos[T:], torch.arange(Tq))
    assert (meta.slot_mapping[T:] // bs == scratch_block).all() and (tables[n:] // bs == scratch_block).all()
    # A feed past the sequence's blocks is refused, never written to another sequence's slot.
    with pytest.raises(IndexError):
        inputs.stage(graph, batch, [seqs[0].num_cached + 64] + [seq.num_cached for seq in seqs[1:]])
    for seq in seqs:
        engine.cancel(seq)


def test_warm_prefill_leaves_the_cache_as_it_found_it(engine, monkeypatch):
    """`ModelRunner.warm_prefill` (CUDA, where graphs run: it compiles the prefill's attention
    variants) runs here with the graphs faked away to the eager path: every scratch block goes
    back, and a request afterwards writes what it wrote before."""
    params = SamplingParams(max_tokens=8)
    prompt = list(range(1, 200))
    before = [t for ev in engine.generate(Request(prompt, params, drafter="none")) for t in ev.token_ids]
    free = engine.kv.allocator.num_free
    monkeypatch.setattr(engine.runner, "graphs", SimpleNamespace(can_run=lambda batch: False))
    engine.runner.warm_prefill(1024)
    monkeypatch.setattr(engine.runner, "graphs", None)
    assert engine.kv.allocator.num_free == free
    after = [t for ev in engine.generate(Request(prompt, params, drafter="none")) for t in ev.token_ids]
    assert after == before


def test_block_sizes_climb_to_k():
    """A step replays the smallest captured block holding its feeds: past the short block, blocks
    double from 16 up to K, so a mid-length draft under long blocks pays a 16- or 32-row step."""
    assert block_sizes(16, 4) == [1, 4, 16]
    assert block_sizes(64, 4) == [1, 4, 16, 32, 64]
    assert block_sizes(48, 0) == [1, 16, 32, 48]
    assert block_sizes(4, 8) == [1, 4]  # the short block never passes K
    assert block_sizes(1, 4) == [1]
