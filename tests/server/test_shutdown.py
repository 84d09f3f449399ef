"""SIGTERM while requests run (issue 31, item 6): the real `editapply serve` process with the CI
model, signalled while a non-streaming chat, a streamed chat, a streamed RAG answer and a model
apply are in flight. Each gets an answer: a whole one, or 503 `shutting_down` in the JSON error
shape; a stream ends with its error event and `[DONE]`, never cut short. (A subprocess: the
tests' shared server runs in a thread, which cannot be sent a signal of its own.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from engine.server.events import CHAT_EVENTS, RAG_EVENTS, validate_event
from tests.server.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120
LONG = [{"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}]
SHUTTING_DOWN = {"message", "type", "param", "code"}


@pytest.fixture
def server(ci_model_dir):
    port = free_port()
    env = {**os.environ, "EDITAPPLY_MAX_MODEL_LEN": "4096", "EDITAPPLY_MAX_NUM_SEQS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--model", str(ci_model_dir), "--port", str(port),
                             "--log-level", "warning"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            httpx.get(url + "/health", timeout=5)
            break
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the server did not start: {proc.stderr.read()}")
            time.sleep(0.2)
    yield proc, url
    proc.kill()
    proc.wait()


def plain(url: str, path: str, body: dict) -> tuple[int, str, dict]:
    r = httpx.post(url + path, json=body, timeout=TIMEOUT)
    return r.status_code, r.headers["content-type"], r.json()


def streamed(url: str, path: str, body: dict, started) -> list:
    events = []
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=TIMEOUT) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
                started()
    return events


def test_sigterm_answers_every_request_in_flight(server, tmp_path):
    proc, url = server
    first_delta = []
    with ThreadPoolExecutor(4) as pool:
        # One sequence at a time (EDITAPPLY_MAX_NUM_SEQS=1): the stream runs, the others wait.
        chat_stream = pool.submit(streamed, url, "/v1/chat/completions", {"messages": LONG, "max_tokens": 1000},
                                  lambda: first_delta.append(1))
        while not first_delta:
            assert not chat_stream.done(), chat_stream.result()
            time.sleep(0.01)
        chat = pool.submit(plain, url, "/v1/chat/completions", {"messages": LONG, "max_tokens": 1000})
        rag = pool.submit(streamed, url, "/v1/rag", {"documents": [{"text": "The sea is large."}], "question": "Why?",
                                                     "max_tokens": 1000}, lambda: None)
        apply = pool.submit(plain, url, "/v1/apply", {"initial_code": "x = 1\n" * 50, "edit_snippet": "x = 2\n",
                                                      "mode": "model", "path": "a.py"})
        while sum(json.loads(httpx.get(url + "/health").text)[k] for k in ("queue_depth", "running")) < 3:
            time.sleep(0.01)  # all three queued behind the stream (or running)
        proc.send_signal(signal.SIGTERM)
        outcomes = {"chat": chat.result(), "apply": apply.result(), "chat stream": chat_stream.result(),
                    "rag stream": rag.result()}
    refused = 0
    for name in ("chat", "apply"):
        status, ctype, body = outcomes[name]
        assert ctype == "application/json" and status in (200, 503), (name, status, body)
        if status == 503:
            assert set(body["error"]) == SHUTTING_DOWN and body["error"]["code"] == "shutting_down"
            refused += 1
    for name, models in (("chat stream", CHAT_EVENTS), ("rag stream", RAG_EVENTS)):
        events = outcomes[name]
        assert events[-1] == "[DONE]", (name, events[-3:])
        for event in events[:-1]:
            validate_event(models, event)
        error = events[-2].get("error")
        if error is not None:
            assert set(error) == SHUTTING_DOWN and error["code"] == "shutting_down"
            refused += 1
    assert refused >= 3  # the waiting requests at least were not finished
    assert proc.wait(TIMEOUT) == -signal.SIGTERM
