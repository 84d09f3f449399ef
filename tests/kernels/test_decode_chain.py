"""The draft model's tokens fed back on the device (engine/cuda_graphs.py DecodeChain): on a GPU
the chain's step is a captured CUDA graph replayed back to back, and its tokens must be those of
eager forwards one token at a time. CI has no GPU: there both runners are eager and the test
checks the chain's logic alone (as tests/spec/test_hybrid.py does on the real CPU pair); the
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
