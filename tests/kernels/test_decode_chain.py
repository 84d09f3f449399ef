"""The draft model's tokens fed back on the device (engine/cuda_graphs.py DecodeChain): on a GPU
the chain's step is a captured CUDA graph replayed back to back, and its tokens must be those of
eager forwards one token at a time. CI has no GPU: there both runners are eager and the test
checks the chain's logic alone (as tests/speculative/test_hybrid.py does on the real CPU pair); the
H200's device job `kernels` runs the graphs."""

import pytest
import torch

from engine.config import EngineConfig
from engine.runner import ModelRunner
from tests.conftest import decode_both_ways

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("rows", [1, 3])  # on a GPU 3 rows replay a graph of 4: one idle row
def test_chained_tokens_equal_eager_steps(tiny_model, rows):
    """fp32 (a random model's bf16 near-ties flip with the reduction order, tests/kernels)."""
    cfg = dict(model=str(tiny_model), device=DEVICE, dtype="float32", max_model_len=256, max_num_seqs=4)
    graphs, eager = ModelRunner(EngineConfig(**cfg)), ModelRunner(EngineConfig(**cfg, enforce_eager=True))
    prompts = [[(7 * i + r) % 200 + 1 for i in range(30 + 9 * r)] for r in range(rows)]
    feeds = [[5, 6, 7][: 1 + r % 3] for r in range(rows)]  # one row: a decode graph; else verify blocks
    for n in (2, 5):
        chained = decode_both_ways(graphs, prompts, feeds, n, chained=True)
        assert chained == decode_both_ways(eager, prompts, feeds, n, chained=False)
    if DEVICE == "cuda":
        assert graphs.graphs.chains  # the chain's step ran as a graph


@pytest.mark.parametrize("rows", [1, 3])
def test_draft_heads_in_the_graph_equal_eager_ones(tiny_model, rows):
    """The target's draft heads (engine/speculative/heads.py) run inside the captured verify step: the
    graph's greedy tokens and the heads' guesses, read back once per step, equal an eager
    forward's (`CausalLM.greedy_rows` outside a graph), padded and idle rows left out. On the CPU
    both runners are eager, and run the heads in steps of at most 4 rows."""
    from engine.speculative.heads import DraftHeads
    from types import SimpleNamespace

    cfg = dict(model=str(tiny_model), device=DEVICE, dtype="float32", max_model_len=256, max_num_seqs=4)
    graphs, eager = ModelRunner(EngineConfig(**cfg)), ModelRunner(EngineConfig(**cfg, enforce_eager=True))
    torch.manual_seed(1)
    heads = DraftHeads(64, 3)
    torch.nn.init.normal_(heads.weight, std=0.3)
    out = []
    for runner in (graphs, eager):
        runner.attach_heads(DraftHeads(64, 3).to(DEVICE).requires_grad_(False))
        runner.model.heads.load_state_dict(heads.state_dict())
        batch = []
        for r in range(rows):
            prompt = [(5 * i + r) % 200 + 1 for i in range(20 + 7 * r)]
            seq = SimpleNamespace(block_table=runner.kv.allocator.allocate(runner.kv.blocks_for(len(prompt) + 16)),
                                  num_cached=0, needs_prefill=True)
            runner.forward([(seq, prompt)], logits=False)
            seq.num_cached, seq.needs_prefill = len(prompt), False
            batch.append((seq, [3, 4, 5, 6][: 2 + r]))  # feeds shorter than K: padded rows in the graph
        flight = runner.launch(batch)
        step = runner.collect(flight)
        out.append((step.rows, step.head_rows))
    assert out[0] == out[1]
    if sum(len(feed) for _, feed in batch) > graphs.heads_max_rows:
        assert out[0][1] is None  # on a CPU the heads skip steps of more than 4 rows (engine/speculative/heads.py)
    else:
        assert all(len(guesses) == len(feed) and all(len(g) == 3 for g in guesses)
                   for guesses, (_, feed) in zip(out[0][1], batch))
    if DEVICE == "cuda":
        assert graphs.graphs.graphs  # the step ran as a graph
