"""The CUDA graphs' input staging (engine/cuda_graphs.py `_Inputs.stage`) lays a batch out exactly
as the eager path's `ModelRunner.prepare` does, padded to the graph's shape. The layout is plain
host arithmetic, so it is checked on the CPU (the graphs themselves run only on CUDA and are
checked against eager steps by tests/kernels on the H200 and by bench.step_time)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.cuda_graphs import _Inputs
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
    scratch = 12345
    inputs = _Inputs(B, Tq, width, "cpu", scratch, bs)
    inputs.host[:] = -1  # a stale layout must be overwritten everywhere
    graph = SimpleNamespace(B=B, Tq=Tq, width=width)
    inputs.stage(graph, batch, [seq.num_cached for seq in seqs])
    inputs.copy(graph)
    ids, pos, slots, tables, q_pos = (np.asarray(v) for v in inputs.views(B, Tq, width, "cpu"))

    e_ids, e_pos, meta = engine.runner.prepare(batch)
    T = len(batch) * Tq
    assert (ids[:T] == e_ids.numpy()).all() and (pos[:T] == e_pos.numpy()).all()
    assert (slots[:T] == meta.slot_mapping.numpy()).all()
    assert (q_pos[: len(batch)] == meta.q_positions.numpy()).all()
    e_tables = meta.slot_tables.numpy()
    for i, seq in enumerate(seqs):  # past a table's end both read a masked dummy slot
        n = len(seq.block_table) * bs
        assert (tables[i, : min(n, e_tables.shape[1])] == e_tables[i, :n]).all() and (tables[i, n:] == 0).all()
    # The idle row: token 0 at position 0, written to the scratch slot, reading nothing.
    assert (ids[T:] == 0).all() and (pos[T:] == 0).all() and (slots[T:] == scratch).all()
    assert (tables[len(batch) :] == 0).all() and (q_pos[len(batch) :] == 0).all()
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
