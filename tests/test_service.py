"""EngineService: the background-thread engine every front end shares (real CI model)."""

import asyncio

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.types import RequestError
from engine.types import SamplingParams
from engine.types import Request
from engine.service import EngineService


@pytest.fixture(scope="module")
def service(ci_model_dir):
    svc = EngineService(LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=2048, max_num_seqs=4)))
    yield svc
    svc.shutdown()


def prompt(service, text):
    return service.tokenizer.encode_chat([{"role": "user", "content": text}])


def test_concurrent_streams_equal_one_at_a_time(service):
    prompts = [prompt(service, f"Name {n} fruits.") for n in (2, 3, 4)]
    alone = []
    for ids in prompts:
        alone.append([t for ev in service.generate(Request(ids, SamplingParams(max_tokens=24))) for t in ev.token_ids])
    handles = [service.submit(Request(ids, SamplingParams(max_tokens=24))) for ids in prompts]
    together = [[t for ev in service.stream(h) for t in ev.token_ids] for h in handles]
    assert together == alone


def test_async_stream_and_final_stats(service):
    async def run():
        h = service.submit(Request(prompt(service, "Say hi."), SamplingParams(max_tokens=8)), loop=asyncio.get_running_loop())
        return [ev async for ev in service.astream(h)]

    events = asyncio.run(run())
    assert events[-1].finished and events[-1].stats.generated_tokens == sum(len(e.token_ids) for e in events)


def test_cancel_frees_blocks(service):
    free = service.engine.kv.allocator.num_free
    h = service.submit(Request(prompt(service, "Count to one thousand."), SamplingParams(max_tokens=500)))
    stream = service.stream(h)
    next(stream)
    service.cancel(h)
    last = list(stream)[-1]
    assert last.finished and last.finish_reason == "cancelled"
    assert service.engine.kv.allocator.num_free == free


def test_bad_request_is_refused_at_submit(service):
    with pytest.raises(RequestError, match="context limit"):
        service.submit(Request([1] * 5000))
    with pytest.raises(RequestError, match="empty prompt"):
        service.submit(Request([]))


def test_engine_failures_end_the_stream_with_their_error(service, monkeypatch):
    """A failed admission or step ends the request with finish_reason "error" and `Event.error`."""
    ids = prompt(service, "Say hi.")

    def fail(*_):
        raise RuntimeError("boom")

    with monkeypatch.context() as m:
        m.setattr(service.engine, "add_request", fail)
        last = list(service.generate(Request(ids, SamplingParams(max_tokens=4))))[-1]
    assert last.finish_reason == "error" and last.error == "boom" and last.stats.generated_tokens == 0
    with monkeypatch.context() as m:
        m.setattr(service.engine, "step", fail)
        last = list(service.generate(Request(ids, SamplingParams(max_tokens=4))))[-1]
    assert last.finish_reason == "error" and last.error == "RuntimeError: boom"
    assert last.stats.prompt_tokens == len(ids)
    ok = list(service.generate(Request(ids, SamplingParams(max_tokens=4))))[-1]
    assert ok.error is None and ok.stats.generated_tokens > 0
