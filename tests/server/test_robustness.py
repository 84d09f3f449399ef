"""Issue 10 against the real server: oversized requests refused by the cheap limits while other
requests are served, merges in worker processes with their own admission, a merge worker that
dies, and the small items (empty request, exact seed bound, streams in the schema, default answer
length, paths in diff headers). No test asserts on time: the timings are in bench/RESULTS.md
("Robustness under load")."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import psutil
import pytest

from engine.server.workers import HEAVY_LINES, HEAVY_WORKERS, NICENESS
from tests.server.test_errors import CHAT, HI, error_of

BIG = 3_000_000
SNIPPET = "def area(self):\n    return 2\n"
HAIKU = [{"role": "user", "content": "Write a long poem about the sea."}]


def big_code() -> str:
    line = "def f(x):\n    return x + 1\n"
    return (line * (BIG // len(line) + 1))[:BIG]


@pytest.fixture
def large_bodies(live):
    with live.settings_changed(max_body_bytes=8 * 2**20):
        yield


def merge_workers() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.nice() == NICENESS]


# ---- 1. an oversized request is refused by the cheap limits; the others are served -------------------

@pytest.mark.parametrize("mode", ["auto", "deterministic", "model"])
def test_a_3_mb_apply_is_refused_while_a_chat_request_is_served(live, large_bodies, mode):
    body = {"initial_code": big_code(), "edit_snippet": SNIPPET, "path": "big.py", "mode": mode}
    with live.client() as big, live.client() as small, ThreadPoolExecutor(2) as pool:
        oversized = pool.submit(big.post, "/v1/apply", json=body)
        chat = pool.submit(small.post, CHAT, json={"messages": HI, "max_tokens": 4})
        r, c = oversized.result(), chat.result()
    e = error_of(r, 413, "input_too_large")
    assert e["param"] == "initial_code" and "3,000,000 bytes; the limit is 2,097,152 bytes" in e["message"]
    assert c.status_code == 200 and c.json()["usage"]["completion_tokens"] <= 4


def test_a_file_over_the_context_in_model_mode_is_refused_before_the_merge(client, large_bodies):
    code = big_code()[:300_000]  # within the input limits, far over the 4096-token context
    e = error_of(client.post("/v1/apply", json={"initial_code": code, "edit_snippet": SNIPPET, "mode": "model"}), 400,
                 "context_length_exceeded")
    assert e["param"] == "initial_code" and "the file alone is at least" in e["message"]


def test_a_3_mb_chat_message_or_document_is_refused_before_tokenizing(client, large_bodies):
    e = error_of(client.post(CHAT, json={"messages": [{"role": "user", "content": big_code()}]}), 400,
                 "context_length_exceeded")
    assert e["param"] == "messages" and "at least" in e["message"]
    e = error_of(client.post("/v1/rag", json={"documents": [{"text": big_code()}], "question": "q"}), 400,
                 "context_length_exceeded")
    assert e["param"] == "documents"
    e = error_of(client.post(CHAT, json={"messages": HI, "prediction": {"type": "content", "content": big_code()}}), 400,
                 "context_length_exceeded")
    assert e["param"] == "prediction"


# ---- 2. merges run in worker processes, admitted apart from generation ------------------------------

def test_merges_run_in_niced_worker_processes(client, live):
    assert live.settings.merge_workers >= 1
    r = client.post("/v1/apply", json={"initial_code": "x = 1\ny = 1\n", "edit_snippet": "x = 2\ny = 1\n",
                                       "path": "a.py", "mode": "deterministic"})
    assert r.status_code == 200 and r.json()["merged_code"] == "x = 2\ny = 1\n"
    assert len(merge_workers()) == live.settings.merge_workers + HEAVY_WORKERS
    assert f"editapply_merge_workers {live.settings.merge_workers + HEAVY_WORKERS:.1f}" in client.get("/metrics").text


def test_a_full_merge_pool_is_503_while_chat_is_served(client, live):
    merges = live.app.state.editapply.merges
    apply = {"initial_code": "x = 1\ny = 1\n", "edit_snippet": "x = 2\ny = 1\n", "path": "a.py", "mode": "deterministic"}
    with live.settings_changed(merge_queue=0, retry_after_s=3):
        with merges.slot():  # the only worker is busy
            r = client.post("/v1/apply", json=apply)
            e = error_of(r, 503, "overloaded")
            assert r.headers["retry-after"] == "3" and "merge pool is full" in e["message"]
            assert client.post(CHAT, json={"messages": HI, "max_tokens": 2}).status_code == 200
        assert client.post("/v1/apply", json=apply).status_code == 200


def test_a_killed_merge_worker_is_replaced(client, live):
    apply = {"initial_code": "x = 1\ny = 1\n", "edit_snippet": "x = 2\ny = 1\n", "path": "a.py", "mode": "deterministic"}
    assert client.post("/v1/apply", json=apply).status_code == 200
    light = live.app.state.editapply.merges.light
    killed = [w.process.pid for w in light.workers]
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    r = client.post("/v1/apply", json=apply)
    assert r.status_code == 200 and r.json()["merged_code"] == "x = 2\ny = 1\n"
    assert {w.process.pid for w in light.workers}.isdisjoint(killed)


# ---- issue 31, item 1: a long merge neither holds up a short one nor outlives its client ----------

SMALL = {"initial_code": "x = 1\ny = 1\n", "edit_snippet": "x = 2\ny = 1\n", "path": "a.py", "mode": "deterministic"}


def long_apply() -> tuple[dict, str]:
    """A whole-file answer over HEAVY_LINES lines with one line changed, and the file it gives."""
    code = "".join(f"v{i} = {i}\n" for i in range(HEAVY_LINES + 500))
    merged = code.replace("v7 = 7\n", "v7 = 8\n")
    return {"initial_code": code, "edit_snippet": merged, "path": "long.py", "mode": "deterministic"}, merged


@contextmanager
def stopped(pid: int):
    """The process stopped (SIGSTOP) for the block: a merge sent to it cannot end meanwhile."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGCONT)


def wait_for(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what} after {timeout} s")
        time.sleep(0.02)


def test_a_short_merge_is_served_while_a_long_one_runs(client, live):
    """The long apply's worker is held (stopped) so that it is still running whatever the
    machine's speed; the two-line apply sent after it is served meanwhile, from the other lane."""
    merges = live.app.state.editapply.merges
    body, merged = long_apply()
    with live.client() as other, ThreadPoolExecutor(1) as pool:
        with stopped(merges.heavy.workers[0].process.pid):
            long = pool.submit(other.post, "/v1/apply", json=body)
            wait_for(lambda: merges.in_flight == 1, "the long merge to be admitted")
            r = client.post("/v1/apply", json=SMALL)
            assert r.status_code == 200 and r.json()["merged_code"] == "x = 2\ny = 1\n"
            assert not long.done()
        r = long.result()
    assert r.status_code == 200 and r.json()["merged_code"] == merged


def test_a_client_that_leaves_during_a_merge_frees_its_worker(live):
    """The client gives up (a 1 s timeout) while its merge is held: past `ABANDON_S` the worker
    is killed and replaced, and the next long apply is served by the new one."""
    merges = live.app.state.editapply.merges
    body, merged = long_apply()
    pid = merges.heavy.workers[0].process.pid
    with stopped(pid), httpx.Client(base_url=live.url, timeout=1) as impatient:
        with pytest.raises(httpx.TimeoutException):
            impatient.post("/v1/apply", json=body)
        wait_for(lambda: not psutil.pid_exists(pid), "the abandoned merge's worker to be killed")
    wait_for(lambda: merges.in_flight == 0, "the abandoned merge to leave the pool")
    assert merges.heavy.workers[0].process.pid != pid
    with live.client() as client:
        r = client.post("/v1/apply", json=body)
    assert r.status_code == 200 and r.json()["merged_code"] == merged


# ---- 6. the small items -------------------------------------------------------------------------------

def test_a_request_with_neither_snippet_nor_instruction_says_what_to_give(client):
    for extra in ({}, {"edit_snippet": "  \n"}, {"edit_snippet": "", "instruction": " "}):
        # A body the schema refuses (issue 31, item 14: it is no longer valid-but-refused): 422.
        e = error_of(client.post("/v1/apply", json={"initial_code": "x = 1\n", **extra}), 422, "empty_snippet")
        assert "give edit_snippet or instruction" in e["message"] and e["param"] is None


def test_the_schema_has_the_exact_seed_bound_and_the_streams(client):
    text = client.get("/openapi.json").text
    schema = json.loads(text)
    seed = schema["components"]["schemas"]["ChatCompletionRequest"]["properties"]["seed"]["anyOf"][0]
    assert seed == {"type": "integer", "minimum": 0, "exclusiveMaximum": 2**63}
    assert '"exclusiveMaximum":9223372036854775808' in text.replace(" ", "")
    for path in ("/v1/apply", "/v1/chat/completions", "/v1/rag"):
        content = schema["paths"][path]["post"]["responses"]["200"]["content"]
        assert set(content) == {"application/json", "text/event-stream"}
        assert content["text/event-stream"]["schema"]["type"] == "string"
        for ref in content["text/event-stream"]["x-events"]["oneOf"]:
            assert ref["$ref"].removeprefix("#/components/schemas/") in schema["components"]["schemas"]


def test_chat_and_rag_without_max_tokens_stop_at_the_default(client, live):
    with live.settings_changed(default_max_tokens=3):
        r = client.post(CHAT, json={"messages": HAIKU, "temperature": 0}).json()
        assert r["usage"]["completion_tokens"] == 3 and r["choices"][0]["finish_reason"] == "length"
        r = client.post("/v1/rag", json={"documents": [{"text": "The sea is blue."}], "question": "Describe the sea at length."}).json()
        assert r["usage"]["completion_tokens"] == 3 and r["finish_reason"] == "length"
        # A request may still ask for more than the default.
        r = client.post(CHAT, json={"messages": HAIKU, "temperature": 0, "max_tokens": 5}).json()
        assert r["usage"]["completion_tokens"] == 5


def test_a_path_cannot_escape_the_diff_headers(client):
    apply = {"initial_code": "x = 1\ny = 1\n", "edit_snippet": "x = 2\ny = 1\n", "mode": "deterministic"}
    r = client.post("/v1/apply", json={**apply, "path": "../../../../etc/passwd.py"})
    assert r.status_code == 200 and r.json()["diff"].startswith("--- a/etc/passwd.py\n+++ b/etc/passwd.py\n")
    r = client.post("/v1/apply", json={**apply, "path": "/abs/./x.py"})
    assert r.json()["diff"].startswith("--- a/abs/x.py\n")
    for bad in ("a\0b.py", "a\nb.py", "a\x7f.py"):
        e = error_of(client.post("/v1/apply", json={**apply, "path": bad}), 422, "invalid_value")
        assert e["param"] == "path" and "control characters" in e["message"]
