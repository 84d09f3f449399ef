"""POST /v1/apply on dev-set cases (deterministic and model mode), streamed and not, and the chat
completion apply form (<instruction>/<code>/<update>)."""

import json

import openai
import pytest

from bench.common import load_dev
from engine.apply.diff import apply_unified_diff
from tests.server.conftest import MODEL_ID

DETERMINISTIC = ["golang/groupcache@e2abff3bea:peers.go", "pallets/flask@e8020e2c5c:flask/ext/__init__.py"]
MODEL = "encode/httpx@e51b2125c9:noxfile.py"  # the smallest case
CASES = {c["id"]: c for c in load_dev(ids=DETERMINISTIC + [MODEL])}


def body(case, **extra):
    return {"initial_code": case["original"], "edit_snippet": case["update_snippet"],
            "instruction": case["instruction"], "path": case["path"], **extra}


def sse_events(response):
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


@pytest.mark.parametrize("case_id", DETERMINISTIC)
def test_deterministic_mode_reproduces_the_expected_file(client, case_id):
    case = CASES[case_id]
    r = client.post("/v1/apply", json=body(case, mode="deterministic"))
    assert r.status_code == 200, r.text
    result = r.json()
    assert set(result) == {"merged_code", "diff", "validation", "usage", "stats", "readings", "hunks", "candidate"}
    assert result["merged_code"] == case["expected"]
    assert apply_unified_diff(case["original"], result["diff"]) == case["expected"]
    assert result["validation"] == {"ok": True, "problems": []}
    assert result["stats"]["path"] == "deterministic" and result["usage"]["completion_tokens"] == 0


def test_model_mode_streams_deltas_then_the_result(live):
    case = CASES[MODEL]
    with live.client() as c, c.stream("POST", "/v1/apply", json=body(case, mode="model", max_tokens=24, stream=True)) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    deltas = [e["text"] for e in events[:-2]]
    assert deltas and all(e["type"] == "delta" for e in events[:-2])
    result = events[-2]
    assert result["type"] == "result"
    assert result["stats"]["path"] == "model" and result["stats"]["prompt_form"] == "draft"
    usage = result["usage"]
    assert usage["completion_tokens"] == 24 and usage["prompt_tokens"] > 0
    # Drafts from the predicted merge are accepted: fewer steps than tokens (smollm2 is too weak to
    # merge well, so only the mechanics are checked here).
    assert usage["accepted_prediction_tokens"] > 0 and result["stats"]["steps"] < 24
    assert [p["name"] for p in result["validation"]["problems"]][0] == "truncated"
    assert result["candidate"] is None  # the snippet has two readings: no one merge to offer


def test_chat_completion_apply_form_answers_with_the_merged_file(live):
    case = CASES[DETERMINISTIC[0]]
    content = (f"<instruction>{case['instruction']}</instruction>\n<code>{case['original']}</code>\n"
               f"<update>{case['update_snippet']}</update>")
    oai = openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)
    r = oai.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": content}])
    assert r.choices[0].message.content == case["expected"] and r.choices[0].finish_reason == "stop"
    assert r.stats["path"] == "deterministic"
    chunks = list(oai.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": content}], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == case["expected"]


@pytest.mark.parametrize("extra, code, words", [
    ({"edit_snippet": "# ... existing code ...\n"}, "marker_only_snippet", "only elision markers"),
    ({"edit_snippet": "# ... existing code ...\ndef zzz():\n    qqq = 1\n# ... existing code ...\n",
      "mode": "deterministic", "initial_code": "import os\n\n\ndef a():\n    return 1\n"}, "no_match", "matches nowhere"),
    ({"initial_code": "a\0b"}, "binary_file", "binary"),
])
def test_bad_apply_input_is_a_400_saying_why(client, extra, code, words):
    r = client.post("/v1/apply", json={"initial_code": "x = 1\n", "edit_snippet": "x = 2\n", "path": "a.py", **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == code and words in error["message"], error


def test_the_cli_remote_client_round_trips(live):
    from engine.apply.client import RemoteInputError, remote_apply
    from engine.apply.pipeline import ApplyRequest

    case = CASES[DETERMINISTIC[1]]
    result = remote_apply(live.url, ApplyRequest(case["original"], case["update_snippet"], path=case["path"],
                                                 mode="deterministic", prompt_form="rewrite", max_tokens=64))
    assert result.merged_code == case["expected"] and result.ok and result.path == "deterministic"
    with pytest.raises(RemoteInputError, match="nothing to apply"):
        remote_apply(live.url, ApplyRequest(case["original"], "  ", path=case["path"]))


@pytest.mark.parametrize("path", [None, "notes.txt"])
def test_an_edit_to_an_empty_file_of_no_known_language_is_never_a_silent_success(live, path):
    """Issue 10, item 5, against the real server with the CI model (model mode): whatever the
    model writes, the answer is either a file holding the snippet's lines or a refusal -- never
    'ok' with the edit dropped."""
    extra = {"path": path} if path else {}
    with live.client() as c:
        r = c.post("/v1/apply", json={"initial_code": "", "edit_snippet": "first line\nsecond line\n", "mode": "model",
                                      "max_tokens": 32, **extra})
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["stats"]["path"] == "model"
    applied = "first line" in result["merged_code"] and "second line" in result["merged_code"]
    assert applied or not result["validation"]["ok"]


AMBIGUOUS = "class MyError(Exception):\n    \"\"\"Raised when it fails.\"\"\"\n    pass\n\n\nclass Other:\n    x = 1\n"
ENDS_AT_DOCSTRING = "class MyError(Exception):\n    \"\"\"Raised when it fails.\"\"\"\n"


def test_an_ambiguous_snippet_is_ranked_by_the_model_or_refused_with_its_readings(live):
    """auto: the model scores both readings (keep `pass`, or end the class at its docstring); the
    CI model is weak, so either it prefers one by the margin (path `ranked`) or the answer is a
    refusal offering both -- with their log-probabilities either way. `reading: 2` takes the
    second without the model."""
    with live.client() as c:
        result = c.post("/v1/apply", json={"initial_code": AMBIGUOUS, "edit_snippet": ENDS_AT_DOCSTRING,
                                           "path": "errors.py"}).json()
        ranking = result["stats"]["ranking"]
        assert ranking["readings"] == 2 and ranking["prompt_tokens"] > 0 and ranking["scored_tokens"] > 0
        scores = [r["logprob"] for r in result["readings"]]
        assert len(scores) == 2 and all(s < 0 for s in scores) and scores == sorted(scores, reverse=True)
        assert ranking["margin"] == pytest.approx(scores[0] - scores[1], abs=1e-3)
        if result["validation"]["ok"]:
            assert result["stats"]["path"] == "ranked" and result["merged_code"] == result["readings"][0]["merged_code"]
        else:
            assert result["stats"]["path"] == "deterministic"
            assert "ranking_unsure" in [p["name"] for p in result["validation"]["problems"]]
        second = c.post("/v1/apply", json={"initial_code": AMBIGUOUS, "edit_snippet": ENDS_AT_DOCSTRING,
                                           "path": "errors.py", "reading": 2}).json()
    assert second["validation"]["ok"] and second["merged_code"] == AMBIGUOUS.replace("    pass\n", "")


@pytest.mark.parametrize("snippet", ["# ... existing code ...\nzzz = qqq(1)\n# ... existing code ...\n",
                                     "# ... existing code ...\nzzz = qqq(1)\n# ... existing code ...\nyyy = www(2)\n"],
                         ids=["one segment", "two segments"])
def test_a_snippet_matching_nowhere_is_no_match_for_one_segment_or_two(client, snippet):
    """Issue 31, item 11: the same input gets the same answer, 400 no_match, not a 200 with a
    partial merge for two segments."""
    r = client.post("/v1/apply", json={"initial_code": "import os\n\n\ndef a():\n    return 1\n", "edit_snippet": snippet,
                                       "path": "a.py", "mode": "deterministic"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "no_match", r.text


def test_a_snippet_with_a_byte_order_mark_is_merged(client):
    """Issue 31, item 12: a BOM before the first marker is not code."""
    case = CASES[DETERMINISTIC[0]]
    r = client.post("/v1/apply", json=body(case, mode="deterministic", edit_snippet="\ufeff" + case["update_snippet"]))
    assert r.status_code == 200 and r.json()["merged_code"] == case["expected"], r.text
