"""The engine's CUDA graph steps against its eager steps, on a GPU: the same tokens after short
prompts prefilled in verify blocks and from verify and decode steps, and the same scores from
short prefills run in verify blocks, several blocks of one sequence a replay. The
graphs run only on CUDA; their inputs' layout is checked on the CPU by tests/test_graph_inputs.py
and the short prefill's blocks by tests/speculative/test_scoring.py."""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs run only on CUDA")


@pytest.mark.parametrize("pdl", [False, True])
def test_graph_steps_write_the_eager_steps_tokens_and_scores(tiny_model, pdl):
    from engine.config import EngineConfig
    from engine.engine import LLMEngine
    from engine.types import Request, SamplingParams

    prompts = [[(7 * i) % 200 + 1 for i in range(70)], [(5 * i) % 190 + 3 for i in range(23)],
               [(3 * i) % 150 + 5 for i in range(41)]]
    outs = {}
    for eager in (True, False):
        eng = LLMEngine(EngineConfig(model=str(tiny_model), device="cuda", dtype="float32", max_model_len=256,
                                     max_num_seqs=4, enforce_eager=eager, pdl=pdl))
        assert (eng.runner.graphs is None) == eager
        seqs = [eng.add_request(Request(p, SamplingParams(max_tokens=40, ignore_eos=True),
                                        sources={"prediction": p[-30:] * 2}, drafter=d))
                for p, d in zip(prompts, ("lookup", "none", "lookup"))]
        while eng.has_work():
            eng.step()
        head = prompts[0]
        scored = [eng.add_request(Request(head + tail, SamplingParams(max_tokens=1), score_from=len(head)))
                  for tail in ([9] * 20, [11, 12, 13], list(range(20, 80)))]
        while eng.has_work():
            eng.step()
        outs[eager] = [s.output_ids for s in seqs], [s.logprob for s in scored]
    assert outs[False][0] == outs[True][0]
    assert outs[False][1] == pytest.approx(outs[True][1], abs=1e-3)
