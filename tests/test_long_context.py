"""The model's whole context: max_model_len taken from the model's config."""

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.service import config_for

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
    with pytest.raises(ValueError, match="max_model_len must be positive"):
        EngineConfig(max_model_len=-1)
