"""Every server-sent event of every stream matches a type the OpenAPI schema declares for its
route (issue 31, item 14): events.py's models, with undeclared fields refused. The real server
with the CI model; the error events of chat and RAG streams are checked in test_shutdown.py."""

from __future__ import annotations

import json

import pytest

from engine.server.events import APPLY_EVENTS, CHAT_EVENTS, RAG_EVENTS, ApplyResponse, validate_event
from tests.server.test_apply import CASES, DETERMINISTIC, MODEL, body
from tests.server.test_errors import CHAT, HI


def events_of(client, path: str, payload: dict) -> list:
    with client.stream("POST", path, json={**payload, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


STREAMS = {
    "apply, deterministic": ("/v1/apply", body(CASES[DETERMINISTIC[0]], mode="deterministic"), APPLY_EVENTS),
    "apply, model": ("/v1/apply", body(CASES[MODEL], mode="model", max_tokens=8), APPLY_EVENTS),
    "rag": ("/v1/rag", {"documents": [{"id": "a", "text": "The sea is blue."}], "question": "What colour?",
                        "max_tokens": 6}, RAG_EVENTS),
    "chat": (CHAT, {"messages": HI, "max_tokens": 6, "stream_options": {"include_usage": True}}, CHAT_EVENTS),
    "chat, apply form": (CHAT, {"messages": [{"role": "user", "content": f"<code>{CASES[DETERMINISTIC[0]]['original']}</code>"
                                              f"<update>{CASES[DETERMINISTIC[0]]['update_snippet']}</update>"}],
                                "stream_options": {"include_usage": True}}, CHAT_EVENTS),
}


@pytest.mark.parametrize("name", STREAMS)
def test_every_event_matches_a_declared_type(client, name):
    path, payload, models = STREAMS[name]
    events = [validate_event(models, e) for e in events_of(client, path, payload)]
    assert events
    if models != CHAT_EVENTS:
        assert events[-1].type == "result"


def test_the_rag_result_event_carries_the_whole_answer(client):
    payload = STREAMS["rag"][1]
    events = events_of(client, "/v1/rag", payload)
    answer = "".join(e["text"] for e in events if e["type"] == "delta")
    assert events[-1]["answer"] == answer == client.post("/v1/rag", json=payload).json()["answer"]


@pytest.mark.parametrize("mode", ["deterministic", "model"])
def test_the_apply_answer_is_the_declared_response(client, mode):
    """The JSON answer of /v1/apply is `ApplyResponse` (the result's own dataclasses, extra fields
    refused), and the OpenAPI schema declares it as the route's 200 JSON."""
    case = CASES[DETERMINISTIC[0]] if mode == "deterministic" else CASES[MODEL]
    answer = client.post("/v1/apply", json=body(case, mode=mode, max_tokens=8)).json()
    typed = ApplyResponse.model_validate(answer)
    assert typed.stats.path == mode and typed.usage.completion_tokens == (0 if mode == "deterministic" else 8)
    declared = client.get("/openapi.json").json()
    json_answer = declared["paths"]["/v1/apply"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert json_answer == {"$ref": "#/components/schemas/ApplyResponse"}
    assert {"ApplyResponse", "ApplyStats", "Usage"} <= set(declared["components"]["schemas"])
