"""The default model (Qwen2.5-Coder-0.5B) loads and generates on CPU. Slow: `make test-slow`."""

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.loader import registry
from engine.types import SamplingParams
from engine.types import Request


@pytest.mark.slow
def test_default_model_loads_and_generates_code():
    if not registry.is_installed(registry.DEFAULT_MODEL):
        registry.pull(registry.DEFAULT_MODEL)
    engine = LLMEngine(EngineConfig(model=registry.DEFAULT_MODEL, max_model_len=1024))
    ids = engine.tokenizer.encode_chat([{"role": "user", "content": "Write a Python function add(a, b) that returns a + b. Only code."}])
    text = "".join(ev.text for ev in engine.generate(Request(ids, SamplingParams(max_tokens=40))))
    assert "def add" in text
