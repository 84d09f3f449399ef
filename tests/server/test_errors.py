"""Every error path: its status, and a JSON body {"error": {message, type, param, code}} saying what and why."""

import httpx
import pytest

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]


def error_of(r, status, code):
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code and error["message"] and error["type"] in ("invalid_request_error", "server_error")
    return error


def post_raw(client, path, content, content_type="application/json"):
    return client.post(path, content=content, headers={"content-type": content_type})


def test_malformed_json_is_400(client):
    e = error_of(post_raw(client, CHAT, b'{"messages": [}'), 400, "invalid_json")
    assert "malformed JSON" in e["message"] and "character 14" in e["message"]


def test_invalid_utf8_is_400_naming_the_byte(client):
    e = error_of(post_raw(client, CHAT, b'{"messages": [{"role": "user", "content": "caf\xe9"}]}'), 400, "invalid_encoding")
    assert "not valid UTF-8" in e["message"] and "0xe9" in e["message"]


def test_unpaired_surrogate_is_422(client):
    e = error_of(post_raw(client, CHAT, b'{"messages": [{"role": "user", "content": "\\ud800"}]}'), 422, "invalid_value")
    assert e["param"] == "messages[0].content" and "unpaired surrogate" in e["message"]


def test_body_over_the_limit_is_413(live, client):
    limit = live.settings.max_body_bytes
    e = error_of(post_raw(client, CHAT, b" " * (limit + 1)), 413, "request_too_large")
    assert f"limit is {limit} bytes" in e["message"]

    def chunked():  # no Content-Length: refused once the bytes received pass the limit
        for _ in range(limit // 65536 + 2):
            yield b" " * 65536

    e = error_of(client.post(CHAT, content=chunked(), headers={"content-type": "application/json"}), 413, "request_too_large")
    assert "at least" in e["message"]


def test_non_json_content_type_is_415(client):
    e = error_of(post_raw(client, CHAT, b"messages=hi", "application/x-www-form-urlencoded"), 415, "unsupported_media_type")
    assert "application/json" in e["message"]


@pytest.mark.parametrize("payload, param, words", [
    ({"messages": HI, "temperature": 2.5}, "temperature", "less than or equal to 2"),
    ({"messages": HI, "top_p": 0}, "top_p", "greater than 0"),
    ({"messages": HI, "max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
    ({"messages": HI, "max_tokens": "8"}, "max_tokens", "valid integer"),
    ({"messages": []}, "messages", "at least 1 item"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role", "'system', 'developer', 'user' or 'assistant'"),
    ({"messages": HI, "stop": ""}, "stop", "at least 1 character"),
    ({"messages": HI, "n": 2}, "n", "less than or equal to 1"),
    ({"temperature": 0}, "messages", "field required"),
])
def test_field_validation_is_422_naming_the_field(client, payload, param, words):
    e = error_of(client.post(CHAT, json=payload), 422, "missing_field" if words == "field required" else "invalid_value")
    assert e["param"] == param and words in e["message"], e


def test_body_that_is_not_an_object_is_422(client):
    e = error_of(client.post(CHAT, json=[1, 2]), 422, "invalid_value")
    assert "must be a JSON object" in e["message"]


@pytest.mark.parametrize("path, payload", [
    (CHAT, {"model": "gpt-4o", "messages": HI}),
    ("/v1/apply", {"model": "gpt-4o", "initial_code": "a\n", "edit_snippet": "b\n"}),
    ("/v1/rag", {"model": "gpt-4o", "documents": [{"text": "d"}], "question": "q"}),
])
def test_unknown_model_is_404(client, path, payload):
    e = error_of(client.post(path, json=payload), 404, "model_not_found")
    assert e["param"] == "model" and "'gpt-4o' does not exist" in e["message"]
    assert error_of(client.get("/v1/models/gpt-4o"), 404, "model_not_found")


def test_unknown_route_is_404_and_wrong_method_405(client):
    assert "no route POST /v1/nope" in error_of(client.post("/v1/nope", json={}), 404, "not_found")["message"]
    assert "GET is not allowed" in error_of(client.get(CHAT), 405, "method_not_allowed")["message"]


def test_prompt_over_the_context_is_400_with_tokens_and_limit(client, live):
    limit = live.service.cfg.max_model_len
    e = error_of(client.post(CHAT, json={"messages": [{"role": "user", "content": "word " * limit}]}), 400,
                 "context_length_exceeded")
    assert f"context limit is {limit} tokens" in e["message"] and "the prompt is" in e["message"]
    e = error_of(client.post(CHAT, json={"messages": HI, "max_tokens": limit}), 400, "context_length_exceeded")
    assert e["param"] == "max_tokens" and f"context limit of {limit} tokens" in e["message"]
    documents = [{"id": "big", "text": "word " * limit}]
    error_of(client.post("/v1/rag", json={"documents": documents, "question": "q"}), 400, "context_length_exceeded")
    e = error_of(client.post("/v1/apply", json={"initial_code": "x = 1\n" * limit, "edit_snippet": "y = 2\n", "mode": "model"}),
                 400, "context_length_exceeded")
    assert "context" in e["message"]


def test_max_tokens_over_the_server_limit_is_422(client, live):
    with live.settings_changed(max_tokens_limit=16):
        e = error_of(client.post(CHAT, json={"messages": HI, "max_tokens": 17}), 422, "invalid_value")
        assert e["param"] == "max_tokens" and "limit of 16" in e["message"]
        e = error_of(client.post(CHAT, json={"messages": HI, "max_completion_tokens": 17}), 422, "invalid_value")
        assert e["param"] == "max_completion_tokens"
        schema = client.get("/openapi.json").json()["components"]["schemas"]["ChatCompletionRequest"]
        assert {"type": "integer", "minimum": 1, "maximum": 16} in schema["properties"]["max_tokens"]["anyOf"]


@pytest.mark.parametrize("field, value", [("logprobs", True), ("tool_choice", "required"),
                                          ("tool_choice", {"type": "function", "function": {"name": "f"}})])
def test_an_option_the_server_cannot_honour_fails_validation(client, field, value):
    """Issue 31, items 10 and 14: the schema refuses what the server cannot do (422 naming the
    field), instead of a body it accepts and then refuses (logprobs) or answers as if the option
    were not there (tool_choice "required" answered 200 with text)."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    e = error_of(client.post(CHAT, json={"messages": HI, "tools": tools, field: value}), 422, "invalid_value")
    assert e["param"] == field


@pytest.mark.parametrize("choice", [None, "auto", "none"])
def test_tools_with_a_choice_that_allows_text_are_answered_with_text(client, choice):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    extra = {} if choice is None else {"tool_choice": choice}
    r = client.post(CHAT, json={"messages": HI, "tools": tools, "max_tokens": 2, **extra})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None


def test_overload_is_503_with_retry_after(client, live):
    with live.settings_changed(max_queue=0, retry_after_s=3):
        for path, payload in ((CHAT, {"messages": HI}), ("/v1/rag", {"documents": [{"text": "d"}], "question": "q"}),
                              ("/v1/apply", {"initial_code": "x = 1\n", "edit_snippet": "y = 2\n", "mode": "model"})):
            r = client.post(path, json=payload)
            e = error_of(r, 503, "overloaded")
            assert r.headers["retry-after"] == "3" and "overloaded" in e["message"] and e["type"] == "server_error"
        # The deterministic path needs no engine and is still served.
        r = client.post("/v1/apply", json={"initial_code": "x = 1\ny = 1\n", "edit_snippet": "x = 2\ny = 1\n", "path": "a.py",
                                           "mode": "deterministic"})
        assert r.status_code == 200
    assert client.get("/health").json()["queue_depth"] == 0


def test_errors_are_counted_in_metrics(client):
    client.post("/v1/nope", json={})
    text = client.get("/metrics").text
    assert 'editapply_http_requests_total{method="POST",route="unmatched",status="404"}' in text
    assert 'route="/v1/chat/completions",status="422"' in text


def counted(client, route: str, status: str) -> float:
    import re

    text = client.get("/metrics").text
    m = re.search(rf'editapply_http_requests_total{{method="POST",route="{re.escape(route)}",status="{status}"}} (\S+)', text)
    return float(m.group(1)) if m else 0.0


def test_answers_sent_before_routing_are_counted_under_their_route(client, live):
    """Issue 31, item 13: 401, 413 and 415 are sent by middleware before routing; they were all
    labelled route="unmatched"."""
    before = {s: counted(client, "/v1/apply", s) for s in ("401", "413", "415")}
    with live.settings_changed(api_key="k"):
        assert client.post("/v1/apply", json={}).status_code == 401
    assert client.post("/v1/apply", content=b"x" * (live.settings.max_body_bytes + 1),
                       headers={"content-type": "application/json"}).status_code == 413
    assert client.post("/v1/apply", content=b"x", headers={"content-type": "text/plain"}).status_code == 415
    assert {s: counted(client, "/v1/apply", s) - before[s] for s in before} == {"401": 1, "413": 1, "415": 1}


def test_a_client_that_leaves_mid_body_is_not_counted_as_a_server_error(client, live):
    """Issue 31, item 13: it was a 500; nothing was answered, so it is 499 (client closed)."""
    import socket
    import time

    before = counted(client, "/v1/apply", "499"), counted(client, "/v1/apply", "500")
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/apply HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"initial_code\": ")
        time.sleep(0.2)  # let the server start reading the body (no figure is asserted on)
    deadline = time.monotonic() + 60
    while counted(client, "/v1/apply", "499") == before[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (counted(client, "/v1/apply", "499"), counted(client, "/v1/apply", "500")) == (before[0] + 1, before[1])


def test_health_and_models(client, live):
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["model_loaded"] and health["model"] == "smollm2-135m"
    assert health["kv_blocks_free"] == health["kv_blocks_total"] > 0
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["max_model_len"] == live.service.cfg.max_model_len


def test_connection_reuse_after_errors(live):
    # Errors sent before the body was read must not poison a kept-alive connection.
    with httpx.Client(base_url=live.url, timeout=30) as c:
        assert c.post(CHAT, content=b"x" * (live.settings.max_body_bytes + 10),
                      headers={"content-type": "application/json"}).status_code == 413
        assert c.get("/v1/models").status_code == 200


def test_blank_rag_question_is_400(client):
    e = error_of(client.post("/v1/rag", json={"documents": [{"text": "d"}], "question": "   "}), 400, "bad_request")
    assert e["param"] == "question" and "empty question" in e["message"]
