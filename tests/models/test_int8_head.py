"""The engine with int8 embeddings and lm_head (EDITAPPLY_INT8_HEAD=1) on the CI model (fp32, CPU).

Quantization changes the model a little, so greedy output may drift from the float model's, but
only slightly; speculation must still give exactly what plain decoding gives with the same switch,
since verification compares against the same (quantized) model.
"""

import json

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.models.layers import Int8Table
from engine.types import Request, SamplingParams
from prompts.apply import build_apply_prompt

DEV = "bench/data/dev.jsonl"


def generate(engine, request):
    return [t for ev in engine.generate(request) for t in ev.token_ids]


@pytest.fixture(scope="module")
def engines(ci_model_dir):
    make = lambda int8: LLMEngine(EngineConfig(model=str(ci_model_dir), device="cpu", dtype="fp32", max_model_len=4096,
                                               max_num_seqs=2, int8_head=int8))
    return make(False), make(True)


@pytest.fixture(scope="module")
def case(engines):
    with open(DEV) as f:
        row = min((json.loads(line) for line in f), key=lambda r: len(r["original"]))
    tok = engines[0].tokenizer
    prompt = build_apply_prompt(row["original"], row["update_snippet"], row["instruction"], row["language"])
    sources = {"original": tok.encode(row["original"]), "snippet": tok.encode(row["update_snippet"])}
    return prompt.prompt_ids(tok), sources


def test_switch_stores_one_int8_table_for_tied_embeddings(engines):
    model = engines[1].runner.model
    assert model.config.tie_word_embeddings  # SmolLM2 ties lm_head to embed_tokens
    assert isinstance(model.embed_tokens, Int8Table) and model.lm_head is None
    assert not isinstance(engines[0].runner.model.embed_tokens, Int8Table)


def test_greedy_output_is_mostly_unchanged(engines, case):
    ids, _ = case
    params = SamplingParams(max_tokens=80)
    plain_float = generate(engines[0], Request(ids, params, drafter="none"))
    plain_int8 = generate(engines[1], Request(ids, params, drafter="none"))
    same = next((i for i, (a, b) in enumerate(zip(plain_float, plain_int8)) if a != b), len(plain_float))
    assert same >= 40, f"int8 output leaves the float model's after {same} tokens"


def test_speculation_equals_plain_decoding_with_the_switch_on(engines, case):
    ids, sources = case
    params = SamplingParams(max_tokens=80)
    plain = generate(engines[1], Request(ids, params, drafter="none", verify_tokens=1))
    spec = generate(engines[1], Request(ids, params, sources=sources, drafter="lookup", verify_tokens=16))
    assert spec == plain
