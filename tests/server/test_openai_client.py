"""The official `openai` client, unchanged, against the real server: chat, streaming, predicted outputs."""

import openai
import pytest

from tests.server.conftest import MODEL_ID


@pytest.fixture(scope="module")
def oai(live):
    return openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def ask(oai, content, **kwargs):
    kwargs.setdefault("max_tokens", 8)
    kwargs.setdefault("temperature", 0)
    return oai.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": content}], **kwargs)


def stream_text(oai, content, **kwargs):
    chunks = list(ask(oai, content, stream=True, stream_options={"include_usage": True}, **kwargs))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return text, finish, chunks


def test_models_list_and_retrieve(oai):
    assert [m.id for m in oai.models.list().data] == [MODEL_ID]
    assert oai.models.retrieve(MODEL_ID).id == MODEL_ID


def test_chat_completion(oai):
    r = ask(oai, "Name a fruit.", max_tokens=6)
    assert r.object == "chat.completion" and r.model == MODEL_ID
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 6 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_streaming_equals_non_streaming_and_reports_usage(oai):
    whole = ask(oai, "Count from one to five.", max_tokens=10)
    text, finish, chunks = stream_text(oai, "Count from one to five.", max_tokens=10)
    assert text == whole.choices[0].message.content
    assert finish == [whole.choices[0].finish_reason]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_prediction_is_drafted_and_accepted_without_changing_the_answer(oai):
    text = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    prompt = f"Repeat this code exactly, with no other text:\n{text}"
    plain = ask(oai, prompt, max_tokens=24)
    predicted = ask(oai, prompt, max_tokens=24, prediction={"type": "content", "content": text})
    # Greedy verification is exact: the prediction changes the speed, never the answer.
    assert predicted.choices[0].message.content == plain.choices[0].message.content
    details = predicted.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0 and details.rejected_prediction_tokens >= 0
    assert predicted.stats["accepted"] == details.accepted_prediction_tokens  # extra field, kept by the client
    assert predicted.stats["steps"] < predicted.usage.completion_tokens  # several tokens per step


def test_stop_string_truncates_the_text(oai):
    full = ask(oai, "Count from one to ten, separated by commas.", max_tokens=16).choices[0].message.content
    stop = full[6:9]
    assert stop.strip(), full
    cut = full[: full.index(stop)]
    r = ask(oai, "Count from one to ten, separated by commas.", max_tokens=16, stop=[stop, "never-generated"])
    assert r.choices[0].message.content == cut and r.choices[0].finish_reason == "stop"
    text, finish, _ = stream_text(oai, "Count from one to ten, separated by commas.", max_tokens=16, stop=stop)
    assert text == cut and finish == ["stop"]


def test_unknown_model_is_a_404_the_client_understands(oai):
    with pytest.raises(openai.NotFoundError) as e:
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert e.value.body["code"] == "model_not_found" and MODEL_ID in e.value.body["message"]


def test_invalid_field_is_a_422_the_client_understands(oai):
    with pytest.raises(openai.UnprocessableEntityError) as e:
        ask(oai, "hi", temperature=5)
    assert e.value.body["param"] == "temperature" and "less than or equal to 2" in e.value.body["message"]
