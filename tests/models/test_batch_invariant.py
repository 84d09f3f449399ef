"""Batch-invariant mode (EngineConfig.batch_invariant, on by default for bf16 on the CPU): every
row of a step is computed independently of the others, so a verify block of 16 tokens gives the
logits 16 single decode steps give, bit for bit, alone or beside another sequence; and so
speculation never changes the text in bf16 either. The real CI model, in bf16 on the CPU."""

import json

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.models.layers import rows_matmul
from engine.runner import ModelRunner
from engine.types import Request, SamplingParams
from prompts.apply import build_apply_prompt
from tests.conftest import scratch_sequences


def test_a_row_of_a_matmul_does_not_depend_on_the_others():
    g = torch.Generator().manual_seed(0)
    for k, n in [(576, 1536), (1536, 8960), (8960, 1536)]:
        w, x = torch.randn(n, k, generator=g).bfloat16(), torch.randn(17, k, generator=g).bfloat16()
        block = rows_matmul(x, w, invariant=True)
        for i in range(17):
            assert torch.equal(rows_matmul(x[i : i + 1], w, invariant=True)[0], block[i])
            assert torch.equal(rows_matmul(x[: i + 1], w, invariant=True)[i], block[i])


@pytest.fixture(scope="module")
def runner(ci_model_dir):
    return ModelRunner(EngineConfig(model=str(ci_model_dir), device="cpu", dtype="bf16", max_model_len=2048))


def logits_of(runner, prompts: list[list[int]], steps: list[list[list[int]]]) -> list[torch.Tensor]:
    """Scratch sequences holding `prompts`; each step feeds every sequence its next tokens. The
    logits of every fed row, per sequence."""
    out = [[] for _ in prompts]
    with scratch_sequences(runner, prompts) as rows:
        for feeds in steps:
            logits = runner.forward(list(zip(rows, feeds)), logits=True)
            start = 0
            for n, (row, feed) in enumerate(zip(rows, feeds)):
                out[n].append(logits[start : start + len(feed)])
                row.num_cached += len(feed)
                start += len(feed)
    return [torch.cat(x) for x in out]


def test_a_verify_block_gives_the_logits_of_single_steps(runner):
    assert runner.cfg.rows_invariant and runner.dtype == torch.bfloat16
    text = open("engine/kv_cache.py", encoding="utf-8").read()
    ids = runner.tokenizer.encode(text)[:700]
    prompt, block, other = ids[:300], ids[300:316], ids[400:700]
    single = logits_of(runner, [prompt], [[[t]] for t in block])[0]
    verify = logits_of(runner, [prompt], [[block]])[0]
    beside, _ = logits_of(runner, [prompt, other], [[block, other[-5:]]])
    chunks = logits_of(runner, [prompt], [[block[:3]], [block[3:12]], [block[12:]]])[0]
    assert torch.equal(verify, single) and torch.equal(beside, single) and torch.equal(chunks, single)


def test_greedy_speculation_is_identical_in_bf16(ci_model_dir):
    """Lookup with the commit's file as its prediction (nearly every step a full block) writes
    what plain decoding writes, on the dev set's smallest apply prompts."""
    engine = LLMEngine(EngineConfig(model=str(ci_model_dir), device="cpu", dtype="bf16", max_model_len=4096))
    cases = sorted((json.loads(line) for line in open("bench/data/dev.jsonl")), key=lambda r: len(r["original"]))
    tok = engine.tokenizer
    for case in cases[:2]:  # plain decoding in bf16 is slow where the CPU has no bf16 units (~0.2 s a token)
        prompt = build_apply_prompt(case["original"], case["update_snippet"], case["instruction"], case["language"])
        ids, params = prompt.prompt_ids(tok), SamplingParams(max_tokens=96)
        plain = [t for ev in engine.generate(Request(ids, params, drafter="none", verify_tokens=1)) for t in ev.token_ids]
        sources = {"prediction": prompt.prediction_ids(tok, case["expected"]), "original": tok.encode(case["original"])}
        spec = [t for ev in engine.generate(Request(ids, params, sources=sources, drafter="lookup")) for t in ev.token_ids]
        assert spec == plain
