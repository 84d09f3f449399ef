"""EngineProcess: the engine in a spawned process of its own, behind the Engine protocol (real CI
model, a real child process and pipe)."""

import asyncio
import os
import signal

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.engine_process import EngineProcess
from engine.service import EngineService
from engine.types import EngineUnavailable, Request, RequestError, SamplingParams


def config(ci_model_dir) -> EngineConfig:
    return EngineConfig(model=str(ci_model_dir), max_model_len=2048, max_num_seqs=4)


@pytest.fixture(scope="module")
def engine(ci_model_dir):
    proc = EngineProcess(config(ci_model_dir))
    yield proc
    proc.shutdown()


def prompt(engine, text):
    return engine.tokenizer.encode_chat([{"role": "user", "content": text}])


def test_streams_equal_the_in_process_engine(engine, ci_model_dir):
    prompts = [prompt(engine, f"Name {n} fruits.") for n in (2, 3, 4)]
    handles = [engine.submit(Request(ids, SamplingParams(max_tokens=24))) for ids in prompts]
    apart = [[t for ev in engine.stream(h) for t in ev.token_ids] for h in handles]
    scored = [ev.logprob for ev in engine.generate(Request(prompts[0], SamplingParams(max_tokens=1), score_from=5))]
    local = EngineService(LLMEngine(config(ci_model_dir)))
    try:
        here = [[t for ev in local.generate(Request(ids, SamplingParams(max_tokens=24))) for t in ev.token_ids]
                for ids in prompts]
        scored_here = [ev.logprob for ev in local.generate(Request(prompts[0], SamplingParams(max_tokens=1),
                                                                   score_from=5))]
    finally:
        local.shutdown()
    assert apart == here and all(apart)
    assert scored[-1] is not None and scored[-1] == pytest.approx(scored_here[-1], abs=1e-4)  # the ranking's requests
    assert engine.cfg.max_model_len == 2048 and engine.load().steps > 0
    assert engine.load().kv_blocks_free == engine.load().kv_blocks_total


def test_async_stream_cancel_and_refusal(engine):
    async def run():
        h = engine.submit(Request(prompt(engine, "Count to one thousand."), SamplingParams(max_tokens=500)),
                          loop=asyncio.get_running_loop())
        events = []
        async for ev in engine.astream(h):
            events.append(ev)
            if len(events) == 1:
                engine.cancel(h)
        return events

    events = asyncio.run(run())
    assert events[-1].finished and events[-1].finish_reason == "cancelled"
    with pytest.raises(RequestError, match="context limit"):
        engine.submit(Request([1] * 5000))
    with pytest.raises(RequestError, match="outside the vocabulary"):
        engine.submit(Request([10**9]))


def test_a_model_that_cannot_load_raises_the_childs_error(tmp_path, ci_model_dir):
    """The parent reads the tokenizer; the weights, cut short here, fail in the child."""
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        (tmp_path / name).write_bytes((ci_model_dir / name).read_bytes())
    (tmp_path / "model.safetensors").write_bytes((ci_model_dir / "model.safetensors").read_bytes()[:4096])
    with pytest.raises((ValueError, OSError, RuntimeError)) as info:
        EngineProcess(EngineConfig(model=str(tmp_path), max_model_len=2048))
    assert "SafetensorError" in str(info.value)


def test_a_dead_engine_process_fails_what_runs_and_what_comes(ci_model_dir):
    proc = EngineProcess(config(ci_model_dir))
    h = proc.submit(Request(prompt(proc, "Count to one thousand."), SamplingParams(max_tokens=1000)))
    stream = proc.stream(h)
    next(stream)
    os.kill(proc._proc.pid, signal.SIGKILL)
    with pytest.raises(EngineUnavailable, match="exit code -9"):
        list(stream)
    with pytest.raises(EngineUnavailable):
        proc.submit(Request(prompt(proc, "Hi."), SamplingParams(max_tokens=4)))
    assert proc.shutdown()


def test_on_a_gpu_the_child_steps_as_the_thread_does(tmp_path):
    """The child initialises CUDA itself (spawned, never forked); greedy outputs equal the in-thread
    engine's on a 2-layer random model. Runs where CUDA is (the device machine), skipped in CI."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from tokenizers import Tokenizer, models

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(tmp_path)
    Tokenizer(models.WordLevel({f"t{i}": i for i in range(256)}, unk_token="t0")).save(str(tmp_path / "tokenizer.json"))
    engine_cfg = EngineConfig(model=str(tmp_path), max_model_len=512, max_num_seqs=4, device="cuda", dtype="fp32")
    prompts = [[(7 * i + j) % 256 for j in range(40)] * 3 for i in range(3)]

    def outputs(engine):
        handles = [engine.submit(Request(p, SamplingParams(max_tokens=48, ignore_eos=True))) for p in prompts]
        return [[t for ev in engine.stream(h) for t in ev.token_ids] for h in handles]

    local = EngineService(LLMEngine(engine_cfg))
    try:
        here = outputs(local)
    finally:
        local.shutdown()
    proc = EngineProcess(engine_cfg)
    try:
        apart = outputs(proc)
    finally:
        assert proc.shutdown()
    assert apart == here and all(len(a) == 48 for a in apart)


def test_a_server_whose_engine_process_died_answers_503_and_says_so(tmp_path, ci_model_dir):
    """The real `editapply serve` (the engine in its own process by default): its engine killed,
    /health answers 503 and every route that needs the engine 503 `engine_unavailable`; the
    server itself stays up."""
    import subprocess
    import sys
    import time

    import httpx
    import psutil

    from tests.server.conftest import free_port

    port = free_port()
    env = {**os.environ, "EDITAPPLY_MAX_MODEL_LEN": "2048", "EDITAPPLY_MERGE_WORKERS": "0"}
    server = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--model", str(ci_model_dir),
                               "--port", str(port)], env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                health = httpx.get(url + "/health")
                break
            except httpx.ConnectError:
                time.sleep(0.2)
        assert health.status_code == 200 and health.json()["kv_blocks_total"] > 0
        engines = [p for p in psutil.Process(server.pid).children() if "spawn_main" in " ".join(p.cmdline())]
        assert len(engines) == 1
        engines[0].kill()
        engines[0].wait(10)
        for _ in range(50):
            health = httpx.get(url + "/health")
            if health.status_code == 503:
                break
            time.sleep(0.1)
        assert health.status_code == 503 and "exit code -9" in health.json()["error"]
        chat = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                               "max_tokens": 4})
        assert chat.status_code == 503 and chat.json()["error"]["code"] == "engine_unavailable"
        assert chat.headers["retry-after"]
        assert "editapply_engine_up 0.0" in httpx.get(url + "/metrics").text
    finally:
        server.terminate()
        assert server.wait(30) == -signal.SIGTERM  # uvicorn re-raises the signal it shut down for


def test_streams_of_one_event_loop_read_together(engine):
    """A pass's events for several streams of one loop arrive in one wake-up of it: each stream
    still gets all its tokens, in order, as the blocking reader does."""
    prompts = [prompt(engine, f"Name {n} animals.") for n in (2, 3, 4)]
    alone = [[t for ev in engine.generate(Request(ids, SamplingParams(max_tokens=16))) for t in ev.token_ids]
             for ids in prompts]

    async def run():
        loop = asyncio.get_running_loop()
        handles = [engine.submit(Request(ids, SamplingParams(max_tokens=16)), loop=loop) for ids in prompts]

        async def read(h):
            return [t async for ev in engine.astream(h) for t in ev.token_ids]
        return await asyncio.gather(*(read(h) for h in handles))

    assert asyncio.run(run()) == alone
