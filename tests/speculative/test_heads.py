"""The target's draft heads (engine/speculative/heads.py) and their training (engine/training/heads.py).

fp32 on the CPU with the real CI model (SmolLM2-135M). Its heads are trained here for a few steps
on the Python standard library's asyncio sources (real training, no fixture weights): enough that
they guess some tokens right and many wrong, so every test both accepts and rejects their drafts.
The corpus is one that no commit here changes: trained on this repository's engine/, a head's
gain after 12 steps sat within a token of a tie and an edit of the engine's code could flip it. The
1.5B's heads trained on the H200 are measured in bench/RESULTS.md; the CUDA-graph path (heads in
the captured step) is tested on the GPU in tests/kernels/test_decode_chain.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.speculative.heads import HEADS_FILE, HEADS_MAX_ROWS_CPU, DraftHeads, load_heads, save_heads
from engine.training.heads import chunk_tokens, read_corpus, train_model_heads
from engine.speculative.hybrid import MODEL, Acceptance
from engine.types import Request, SamplingParams
from tests.speculative.test_hybrid import CHAT, apply_case, generate, run_mixed_batch


@pytest.fixture(scope="module")
def heads_model(ci_model_dir, tmp_path_factory):
    """The CI model's files linked into a folder of its own, with heads trained next to them."""
    folder = tmp_path_factory.mktemp("heads") / "model"
    folder.mkdir()
    for f in ci_model_dir.iterdir():
        (folder / f.name).symlink_to(f)
    # A short run at a high learning rate, scored on few held-out chunks: ~75 s of CI's CPU.
    _, report = train_model_heads(str(folder), [Path(asyncio.__file__).parent], num_heads=3, steps=12, batch=4,
                                  seq_len=128, lr=3e-3, device="cpu", log=lambda *_: None, answers=8,
                                  answer_tokens=48, holdout=16)
    return folder, report


@pytest.fixture(scope="module")
def engine(heads_model):
    # adaptive_drafts off: draft lengths from acceptance alone, whatever this CPU's load.
    return LLMEngine(EngineConfig(model=str(heads_model[0]), draft_model="heads", drafter="hybrid",
                                  max_model_len=4096, max_num_seqs=4, adaptive_drafts=False))


def test_training_teaches_the_heads(heads_model):
    """From Medusa's init (every head guesses the next token again) to heads that guess the
    tokens after it: each head's top-1 agreement with the target rises on held-out chunks, and so
    does the number of leading heads that all agree (the tokens a step would accept), on the
    corpus and on held-out conversations the target wrote (half of each batch came from its
    answers to requests made from the corpus)."""
    folder, report = heads_model
    assert (folder / HEADS_FILE).is_file()
    assert report.corpus_files > 10 and report.tokens == 12 * 4 * 128
    assert all(a > b for a, b in zip(report.after.top1, report.before.top1)), report
    assert report.after.chain > 1.5 * report.before.chain > 0, report
    assert report.answers == 8 and report.answer_tokens >= 8 * 48
    assert report.answers_after.chain > report.answers_before.chain > 0, report


def test_answer_requests_are_made_from_the_corpus(ci_model_dir):
    """Questions about a file's definitions (the file as the document), requests to explain a
    definition's code or to write a function from its docstring; a prose file is summarized."""
    from engine.training.heads import SUMMARIZE, answer_requests
    from engine.tokenizer import Tokenizer

    tok = Tokenizer(ci_model_dir)
    code = 'import os\n\n\ndef load_table(path,\n               sep=","):\n    """Read a table of rows from a text file."""\n    return []\n'
    requests = answer_requests(tok, [code], 24, 16, seed=1)
    texts = [tok.decode(r.prompt_ids) for r in requests]
    assert all(r.params.max_tokens == 16 and r.params.greedy for r in requests)
    assert any("`load_table`" in t and "</document>" in t and r.sources for t, r in zip(texts, requests))
    assert any("Explain what this code does" in t and "def load_table(path," in t for t in texts)
    assert any("Write a Python function `load_table` that does this: Read a table of rows from a text file." in t
               for t in texts)
    prose = answer_requests(tok, ["# Notes\n\nPlain prose, no code.\n"], 2, 16)
    assert all(SUMMARIZE in tok.decode(r.prompt_ids) for r in prose)


def test_corpus_reading_and_chunks(tmp_path, ci_model_dir):
    (tmp_path / "a.py").write_text("def f():\n    return 1\n")
    (tmp_path / "b.bin").write_bytes(b"\x00\xff")
    (tmp_path / "c.md").write_text("# Title\n\nProse.\n")
    (tmp_path / "big.txt").write_text("x" * 300_000)
    texts = read_corpus([tmp_path])
    assert texts == ["def f():\n    return 1\n", "# Title\n\nProse.\n"]
    from engine.tokenizer import Tokenizer

    tok = Tokenizer(ci_model_dir)
    chunks = chunk_tokens(tok, texts * 20, 16)
    assert chunks.shape[1] == 16 and chunks.dtype == torch.long
    with pytest.raises(ValueError, match="fewer than one chunk"):
        chunk_tokens(tok, texts, 4096)
    with pytest.raises(ValueError, match="does not exist"):
        read_corpus([tmp_path / "missing"])


def test_saved_heads_load_and_wrong_ones_are_refused(tmp_path):
    """Also: the batched forward (all heads in one GEMM, as the verify step runs them) is each
    head's state as training computes it, head by head."""
    heads = DraftHeads(8, 2)
    torch.nn.init.normal_(heads.weight)
    torch.nn.init.normal_(heads.bias)
    x = torch.randn(5, 8)
    assert torch.allclose(heads(x), torch.stack([heads.head_state(k, x) for k in range(2)]), atol=1e-5)
    save_heads(heads, tmp_path / "h.safetensors", {"model": "m"})
    loaded, info = load_heads(tmp_path / "h.safetensors", 8, torch.float32, "cpu")
    assert torch.equal(loaded.weight, heads.weight) and info == {"model": "m"}
    with pytest.raises(ValueError, match="hidden size 8"):
        load_heads(tmp_path / "h.safetensors", 16, torch.float32, "cpu")
    with pytest.raises(ValueError, match="train them first"):
        load_heads(tmp_path / "none.safetensors", 8, torch.float32, "cpu")


def test_greedy_output_is_plain_decoding_with_the_heads(engine):
    """Chat and an apply prompt: the same tokens as plain decoding with the hybrid (lookup plus the
    heads) and with the heads alone (`draft`), the heads' tokens both accepted and rejected."""
    tok = engine.tokenizer
    prompts = [(tok.encode_chat(CHAT), {}), apply_case(tok)]
    drafted = accepted = 0
    engine.hybrid.rates[MODEL] = Acceptance(prior=0.9, weight=1e6)  # the heads draft wherever lookup does not quote
    try:
        for ids, sources in prompts:
            params = SamplingParams(max_tokens=96)
            plain, _ = generate(engine, Request(ids, params, drafter="none", verify_tokens=1))
            for drafter in ("hybrid", "draft"):
                out, stats = generate(engine, Request(ids, params, sources=sources, drafter=drafter))
                assert out == plain, drafter
                drafted, accepted = drafted + stats.model_drafted, accepted + stats.model_accepted
                assert stats.model_accepted <= stats.model_drafted <= stats.drafted
    finally:
        engine.hybrid.reset()
    assert 0 < accepted < drafted


def test_sampled_output_is_the_same_text_with_the_heads(engine):
    """Coupled verification: a seed gives the same text with the heads drafting as without."""
    ids = engine.tokenizer.encode_chat(CHAT)
    engine.hybrid.rates[MODEL] = Acceptance(prior=0.9, weight=1e6)
    try:
        for seed in (1, 2):
            params = SamplingParams(temperature=0.8, top_p=0.95, seed=seed, max_tokens=64)
            plain, _ = generate(engine, Request(ids, params, drafter="none", verify_tokens=1))
            out, stats = generate(engine, Request(ids, params, drafter="hybrid"))
            assert out == plain and stats.model_drafted > 0
    finally:
        engine.hybrid.reset()


def test_concurrent_requests_with_and_without_the_heads(engine):
    """One batch of three requests (hybrid, lookup, draft): each its plain output; the heads'
    guesses are handed out per sequence, so each drafts from its own last row."""
    engine.hybrid.rates[MODEL] = Acceptance(prior=0.9, weight=1e6)
    try:
        seqs, expected = run_mixed_batch(engine, [("chat", "hybrid"), ("apply", "lookup"), ("chat", "draft")])
    finally:
        engine.hybrid.reset()
    for (name, drafter), seq in seqs.items():
        assert seq.output_ids == expected[name], drafter
    assert seqs[("chat", "hybrid")].stats.model_drafted > 0 and seqs[("apply", "lookup")].stats.model_drafted == 0


def test_the_heads_run_in_short_steps_on_a_cpu(engine):
    """On a CPU the heads' rows cost compute: a step of more than HEADS_MAX_ROWS_CPU rows runs
    without them (no guesses), a shorter one hands out the heads' guesses after every row, and its
    greedy tokens (one lm_head GEMM with the heads' rows) are the argmax of its fp32 logits."""
    runner = engine.runner
    ids = engine.tokenizer.encode("def add(a, b):\n    return a + b\n")[: HEADS_MAX_ROWS_CPU + 1]
    row = SimpleNamespace(block_table=runner.kv.allocator.allocate(runner.kv.blocks_for(64)), num_cached=0,
                          needs_prefill=True)
    try:
        assert runner.collect(runner.launch([(row, ids)])).head_rows is None
        short = runner.collect(runner.launch([(row, ids[:HEADS_MAX_ROWS_CPU])]))
        rows = short.rows
        assert [len(g) for g in short.head_rows[0]] == [runner.model.heads.num_heads] * HEADS_MAX_ROWS_CPU
        logits = runner.verify([(row, ids[:HEADS_MAX_ROWS_CPU])], logits=True).logits
        assert rows[0] == logits.argmax(-1).tolist()
    finally:
        runner.kv.allocator.release(row.block_table)


def test_heads_are_needed_before_they_are_used(ci_model_dir):
    """A model without trained heads: a clear error that says how to get them."""
    with pytest.raises(ValueError, match="editapply train-heads"):
        LLMEngine(EngineConfig(model=str(ci_model_dir), draft_model="heads", drafter="hybrid", max_model_len=1024))


def test_train_heads_command_refuses_a_bad_corpus(tmp_path, ci_model_dir):
    """`editapply train-heads`: a corpus that does not exist, or holds no text file, is exit 2 with
    a one-line reason, before any model loads; nothing is written next to the model."""
    import subprocess
    import sys

    (tmp_path / "blob.bin").write_bytes(b"\0\1")
    for corpus, reason in ((tmp_path / "missing", "does not exist"), (tmp_path, "no text files")):
        r = subprocess.run([sys.executable, "-m", "engine.cli", "train-heads", "--model", str(ci_model_dir),
                            "--corpus", str(corpus), "--device", "cpu"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and r.stderr.startswith("editapply: ") and reason in r.stderr, r.stderr
    assert not (ci_model_dir / HEADS_FILE).exists()


def test_an_engine_is_freed_without_the_cycle_collector(heads_model):
    """An engine freezes what the process has loaded out of the cyclic garbage collector's reach
    (engine.engine.freeze_loaded_objects), so a dropped engine must be freed by reference counting
    alone: with the collector off, an engine that served a hybrid request with heads, its model
    and its heads are gone as soon as the last reference is."""
    import gc
    import weakref

    e = LLMEngine(EngineConfig(model=str(heads_model[0]), draft_model="heads", max_model_len=2048, max_num_seqs=2))
    list(e.generate(Request(e.tokenizer.encode("def add(a, b):"), SamplingParams(max_tokens=12), drafter="hybrid")))
    assert gc.get_freeze_count() > 0
    refs = [weakref.ref(e), weakref.ref(e.runner.model), weakref.ref(e.runner.model.heads)]
    gc.disable()
    try:
        del e
        assert [r() is None for r in refs] == [True, True, True]
    finally:
        gc.enable()
