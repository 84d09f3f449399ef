import json
import os
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from engine.cuda_graphs import block_sizes as graph_block_sizes
from engine.loader import registry

CI_MODEL = "smollm2-135m"


def pytest_collection_modifyitems(config, items):
    if os.environ.get("EDITAPPLY_SLOW_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set EDITAPPLY_SLOW_TESTS=1 (make test-slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ci_model_dir():
    """The real CI model (SmolLM2-135M), pulled by `make test` before pytest runs."""
    if not registry.is_installed(CI_MODEL):
        pytest.fail(f"{CI_MODEL} is not installed; run `editapply pull {CI_MODEL}` (make test does)")
    return registry.model_dir(CI_MODEL)


def swap_tokens(folder, a: str, b: str) -> None:
    """Exchange two tokens' ids in `folder`'s tokenizer.json: a tokenizer of another model, as far
    as the ids go."""
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    path.write_text(json.dumps(data), encoding="utf-8")


@contextmanager
def scratch_sequences(runner, prompts: list[list[int]]):
    """Sequences of `runner` holding `prompts` (prefilled, room for 64 more tokens each), as
    rows a test feeds by hand (`num_cached` is the test's to advance); the cache's blocks are
    given back after."""
    rows = [SimpleNamespace(block_table=runner.kv.allocator.allocate(runner.kv.blocks_for(len(p) + 64)),
                            num_cached=0, needs_prefill=True) for p in prompts]
    try:
        runner.forward(list(zip(rows, prompts)), logits=False)
        for row, prompt in zip(rows, prompts):
            row.num_cached, row.needs_prefill = len(prompt), False
        yield rows
    finally:
        for row in rows:
            runner.kv.allocator.release(row.block_table)


def decode_both_ways(runner, prompts: list[list[int]], feeds: list[list[int]], n: int, chained: bool):
    """On scratch sequences of `runner` holding `prompts`: n greedy tokens after each feed, either
    chained on the device (ModelRunner.decode_greedy) or one forward per token, and the greedy
    token after the last one (it reads the K/V the n - 1 fed tokens wrote)."""
    with scratch_sequences(runner, prompts) as rows:
        batch = [(row, feed) for row, feed in zip(rows, feeds)]
        if chained:
            tokens, seconds = runner.decode_greedy(batch, n)
            assert seconds > 0
            for row, feed in zip(rows, feeds):
                row.num_cached += len(feed) + n - 1
        else:
            tokens = [[] for _ in rows]
            for _ in range(n):
                out = runner.verify(batch, last_only=True).rows
                for (row, feed), t, o in zip(batch, tokens, out):
                    row.num_cached += len(feed)
                    t.append(o[0])
                batch = [(row, [t[-1]]) for row, t in zip(rows, tokens)]
        after = runner.verify([(row, [t[-1]]) for row, t in zip(rows, tokens)], last_only=True).rows
        return tokens, after


class EagerBlocks:
    """What `GraphRunner.run` computes -- each feed padded to a captured block size with its last
    token, from its start -- as one eager forward, for a runner's `graphs` on the CPU: CUDA graphs
    run only on CUDA, and the tests that use it are about the blocks a short prefill is cut into,
    the positions its padding writes and the rows read back. Verify steps stay eager."""

    max_batch = 4

    def __init__(self, runner):
        self.runner, self.calls = runner, []  # calls: ([feed lengths], [starts]) of each replay
        self.block_sizes = graph_block_sizes(runner.cfg.verify_tokens, runner.cfg.short_block)

    def can_run(self, batch) -> bool:
        return False

    def run(self, batch, starts):
        tq = next(t for t in self.block_sizes if t >= max(len(f) for _, f in batch))
        self.calls.append(([len(f) for _, f in batch], list(starts)))
        ids, positions, meta = self.runner.prepare([(seq, f + [f[-1]] * (tq - len(f))) for seq, f in batch], starts)
        hidden = self.runner.model(ids, positions, meta, self.runner.kv.layers)
        keep = [i * tq + j for i, (_, f) in enumerate(batch) for j in range(len(f))]
        return hidden, None, keep if len(keep) < len(hidden) else None
