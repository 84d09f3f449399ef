"""The model's whole context: max_model_len taken from the model's config, and a RAG request
that fills the CI model's context (SmolLM2-135M: 8192 tokens)."""

import pytest

from bench.needle import QUESTION, cut, make_facts, plant
from bench.rag import build_document
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.rag import rag_request
from engine.service import config_for
from engine.types import SamplingParams

CI_CONTEXT = 8192  # SmolLM2-135M's max_position_embeddings


@pytest.fixture(scope="module")
def engine(ci_model_dir):
    return LLMEngine(EngineConfig(model=str(ci_model_dir), max_num_seqs=1))


def test_default_context_is_the_models(engine, ci_model_dir):
    assert EngineConfig().max_model_len == 0
    assert engine.cfg.max_model_len == CI_CONTEXT
    assert engine.kv.num_blocks * engine.kv.block_size >= CI_CONTEXT + 64  # one full sequence fits
    # Front ends that check a prompt before the weights load resolve it the same way.
    assert config_for(EngineConfig(model=str(ci_model_dir))).max_model_len == CI_CONTEXT
    env = {"EDITAPPLY_MODEL": str(ci_model_dir), "EDITAPPLY_MAX_MODEL_LEN": "1024"}
    assert config_for(EngineConfig.from_env(env)).max_model_len == 1024  # less is allowed


def test_context_over_the_models_is_refused(ci_model_dir):
    cfg = EngineConfig(model=str(ci_model_dir), max_model_len=CI_CONTEXT + 1)
    with pytest.raises(ValueError, match="max_model_len=8193 is over the model's context of 8192 tokens"):
        config_for(cfg)
    with pytest.raises(ValueError, match="over the model's context"):
        LLMEngine(cfg)
    with pytest.raises(ValueError, match="max_model_len=-1: input should be greater than or equal to 0"):
        EngineConfig(max_model_len=-1)


def test_rag_request_at_the_full_context(engine):
    """A document that fills the context but for the question and answer (real files from the dev
    set, a fact planted at 90% of it): prefilled in chunks of max_batch_tokens, answered, and the
    answer quotes the fact, some 800 tokens back. (The 135M model copies the nearest such fact,
    so a deeper one would test the model, not the engine. Some 45 s on two CPU cores, most of it
    attention over 8k tokens.)"""
    tok = engine.tokenizer
    (name, key), = make_facts(1, seed=0)
    doc = plant(cut(tok, build_document(tok, CI_CONTEXT)[0], CI_CONTEXT - 250), [(name, key)], [0.9])
    req = rag_request(tok, [{"id": "code", "text": doc}], QUESTION.format(name=name), SamplingParams(max_tokens=32))
    assert CI_CONTEXT - 300 < len(req.prompt_ids) < CI_CONTEXT - 32
    ids = []
    for ev in engine.generate(req):
        ids.extend(ev.token_ids)
    assert ev.finished and ev.finish_reason in ("stop", "length")
    assert ev.stats.prompt_tokens == len(req.prompt_ids) and ev.stats.generated_tokens == len(ids)
    assert key in tok.decode(ids)
