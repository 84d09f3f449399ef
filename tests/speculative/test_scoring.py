"""Score requests (`Request.score_from`): the engine's teacher-forced log-probability of a prompt's
tail equals a plain forward's, with or without the head read from the prefix cache, in a batch
or alone. The real CI model on the CPU, against transformers' forward of the same weights."""

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.service import EngineService
from engine.types import Request, RequestError, SamplingParams
from tests.conftest import EagerBlocks

transformers = pytest.importorskip("transformers")

TOLERANCE = 2e-3  # nats summed over a few dozen tokens: fp32 on both sides, different kernels


@pytest.fixture(scope="module")
def engine(ci_model_dir):
    return LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=2048, max_num_seqs=4, block_size=16))


@pytest.fixture(scope="module")
def reference(ci_model_dir):
    model = transformers.AutoModelForCausalLM.from_pretrained(str(ci_model_dir), torch_dtype=torch.float32)
    model.eval()

    def logprob(ids: list[int], score_from: int) -> float:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        return sum(lp[p - 1, ids[p]].item() for p in range(score_from, len(ids)))

    return logprob


def score(engine, prompts: list[list[int]], score_from: list[int]) -> list[float]:
    """Submit every prompt at once and drive the engine until all are scored."""
    seqs = [engine.add_request(Request(ids, SamplingParams(max_tokens=1), score_from=s))
            for ids, s in zip(prompts, score_from)]
    while not all(seq.is_finished for seq in seqs):
        engine.step()
    assert all(seq.num_generated == 0 and seq.finish_reason == "stop" for seq in seqs)
    return [seq.logprob for seq in seqs]


def texts(engine):
    tok = engine.tokenizer
    head = tok.encode("def area(self):\n    \"\"\"The rectangle's area.\"\"\"\n" * 4)
    tails = [tok.encode("    return self.w * self.h\n"), tok.encode("    pass\n"), tok.encode("    return 0\n\n\n")]
    return head, tails


def test_a_score_equals_a_plain_forward(engine, reference):
    head, tails = texts(engine)
    ids = head + tails[0]
    assert score(engine, [ids], [len(head)]) == pytest.approx([reference(ids, len(head))], abs=TOLERANCE)


def test_candidates_after_a_cached_head_score_as_alone(engine, reference):
    head, tails = texts(engine)
    score(engine, [head], [len(head)])  # a prefill only: publishes the head's blocks
    hits = engine.kv.blocks.hits
    got = score(engine, [head + t for t in tails], [len(head)] * len(tails))
    assert engine.kv.blocks.hits - hits >= len(tails) * (len(head) // 16 - 1)  # the head came from the cache
    assert got == pytest.approx([reference(head + t, len(head)) for t in tails], abs=TOLERANCE)


def test_scores_after_a_cached_head_run_in_verify_blocks(ci_model_dir, reference):
    """A ranking's scoring step: the candidates' uncached tails are short prefills, which run in
    verify-shaped blocks where CUDA graphs are (`ModelRunner._graph_prefill`; EagerBlocks stands in
    for the graphs on the CPU), a sequence's blocks side by side in one replay, and their rows come
    back out of the replays in the picks' order."""
    blocks = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=2048, max_num_seqs=4, block_size=16,
                                    verify_tokens=16))
    stand_in = blocks.runner.graphs = EagerBlocks(blocks.runner)
    head, tails = texts(blocks)
    tails = [tails[0] * 3, tails[1], tails[2] * 2]  # one tail longer than a block of 16
    score(blocks, [head], [len(head)])
    stand_in.calls.clear()
    got = score(blocks, [head + t for t in tails], [len(head)] * len(tails))
    assert got == pytest.approx([reference(head + t, len(head)) for t in tails], abs=TOLERANCE)
    lengths, starts = stand_in.calls[0]  # the long tail's three blocks, then the next tail's, in one replay
    assert starts[:3] == [starts[0] + 16 * n for n in range(3)] and lengths[:2] == [16, 16] and len(lengths) == 4


def test_scoring_from_the_second_token_covers_the_whole_prompt(engine, reference):
    head, tails = texts(engine)
    ids = head[:40]
    assert score(engine, [ids], [1]) == pytest.approx([reference(ids, 1)], abs=TOLERANCE)


def test_the_service_returns_the_score_on_the_last_event(engine, reference):
    head, tails = texts(engine)
    service = EngineService(engine)
    try:
        events = list(service.stream(service.submit(Request(head + tails[1], score_from=len(head)))))
    finally:
        service.shutdown()
    assert events[-1].finished and events[-1].finish_reason == "stop"
    assert events[-1].logprob == pytest.approx(reference(head + tails[1], len(head)), abs=TOLERANCE)
    assert sum(len(e.token_ids) for e in events) == 0


@pytest.mark.parametrize("bad", [0, -1, 10_000, True, 1.5])
def test_a_score_from_outside_the_prompt_is_refused(engine, bad):
    with pytest.raises(RequestError, match="score_from"):
        engine.check_request(Request([1, 2, 3], score_from=bad))
