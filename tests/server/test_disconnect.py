"""A client that hangs up mid-generation cancels it: the engine frees its KV blocks at once."""

import json
import re
import socket
import time

import httpx
import pytest

CHAT = "/v1/chat/completions"
LONG = {"messages": [{"role": "user", "content": "Write a long story about a dragon."}], "max_tokens": 400,
        "temperature": 0}


def disconnects(client, route):
    text = client.get("/metrics").text
    m = re.search(rf'editapply_requests_finished_total{{reason="disconnect",route="{re.escape(route)}"}} (\S+)', text)
    return float(m.group(1)) if m else 0.0


def wait_freed(live, started: float, within: float = 15):
    load = live.wait_idle(timeout=within)
    assert load.kv_blocks_free == load.kv_blocks_total, load
    # 400 tokens take far longer than this on a CPU: the request was cut short, not finished.
    assert time.monotonic() - started < within


def wait_running(live, timeout=30):
    deadline = time.monotonic() + timeout
    while live.service.load().running == 0:
        assert time.monotonic() < deadline, "the request never started"
        time.sleep(0.02)


APPLY_FILE = "".join(f"def function_{i}(x):\n    return x * {i} + {i * i}\n\n\n" for i in range(15))
APPLY_SNIPPET = "# ... existing code ...\ndef function_7(x):\n    return x * 700\n# ... existing code ...\n"


@pytest.mark.parametrize("path, payload, route", [
    (CHAT, {**LONG, "stream": True}, CHAT),
    ("/v1/rag", {"documents": [{"text": "Dragons breathe fire."}], "question": "Tell me all about dragons, at length.",
                 "max_tokens": 400, "stream": True}, "/v1/rag"),
    ("/v1/apply", {"initial_code": APPLY_FILE, "edit_snippet": APPLY_SNIPPET, "path": "f.py", "mode": "model",
                   "stream": True}, "/v1/apply"),
], ids=["chat", "rag", "apply"])
def test_stream_disconnect_frees_the_request(live, client, path, payload, route):
    before = disconnects(client, route)
    with httpx.Client(base_url=live.url, timeout=60) as c, c.stream("POST", path, json=payload) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if '"type": "delta"' in line or ('"content": "' in line and '"content": ""' not in line):
                break  # generation is under way
        wait_running(live)  # polled, as below (once failed under heavy load with running == 0; cause not found)
        started = time.monotonic()
    # The connection is closed here, mid-stream.
    wait_freed(live, started)
    assert disconnects(client, route) == before + 1


def test_non_streaming_disconnect_frees_the_request(live, client):
    before = disconnects(client, CHAT)
    body = json.dumps(LONG).encode()
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        wait_running(live)
        started = time.monotonic()
    # The socket is closed here, before any answer.
    wait_freed(live, started)
    assert disconnects(client, CHAT) == before + 1
