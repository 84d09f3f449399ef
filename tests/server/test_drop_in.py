"""editapply as the apply model of assistants built for hosted ones (issue 34): Relace's
`POST /v1/code/apply` and Morph's chat form under any model name, against the real server, and a
merge that does not validate, which both answer with an error, never a file. Continue's own
adapters drive the same routes in tests/server/test_continue.py."""

from __future__ import annotations

import openai
import pytest

from tests.lsp.test_apply import SHAPES
from tests.server.test_apply import CASES, DETERMINISTIC, sse_events
from tests.server.test_errors import CHAT, error_of

# Matches nowhere: auto hands it to the model (the CI model), whose file does not validate.
NOWHERE = "# ... existing code ...\ndef zzz():\n    qqq = 1\n# ... existing code ...\ndef yyy():\n    ppp = 2\n" \
          "# ... existing code ...\n"


def morph(code: str, update: str) -> list[dict]:
    return [{"role": "user", "content": f"<code>{code}</code>\n<update>{update}</update>"}]


@pytest.mark.parametrize("case_id", DETERMINISTIC)
def test_the_relace_route_answers_the_merged_file(client, case_id):
    """Relace's body (camelCase, a model name of theirs, metadata of the client's own) and answer."""
    case = CASES[case_id]
    r = client.post("/v1/code/apply", json={"initialCode": case["original"], "editSnippet": case["update_snippet"],
                                            "model": "relace-apply-3", "relaceMetadata": {"source": "test"}})
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"mergedCode", "usage"} and r.json()["mergedCode"] == case["expected"]
    assert {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(r.json()["usage"])


def test_the_chat_apply_form_takes_any_model_name(live):
    """Morph's form: `<code>`/`<update>` under the names assistants' configs carry."""
    case = CASES[DETERMINISTIC[0]]
    oai = openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)
    for model in ("morph-v3-fast", "morph-v2", "anything"):
        r = oai.chat.completions.create(model=model, messages=morph(case["original"], case["update_snippet"]))
        assert r.choices[0].message.content == case["expected"]
    with pytest.raises(openai.NotFoundError):  # any other chat still names the served model
        oai.chat.completions.create(model="morph-v3-fast", messages=[{"role": "user", "content": "hi"}])


def test_a_refusal_is_an_error_with_the_reasons_never_a_file(client, live):
    e = error_of(client.post("/v1/code/apply", json={"initialCode": SHAPES, "editSnippet": NOWHERE}), 422,
                 "validation_failed")
    assert "no file is returned" in e["message"] and "def zzz()" in e["message"]
    e = error_of(client.post(CHAT, json={"model": "morph-v3-fast", "messages": morph(SHAPES, NOWHERE)}), 422,
                 "validation_failed")
    assert "snippet's change was not (fully) applied" in e["message"]
    with client.stream("POST", CHAT, json={"messages": morph(SHAPES, NOWHERE), "stream": True}) as r:
        events = sse_events(r)
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "validation_failed"
    assert not any(e["choices"][0]["delta"].get("content") for e in events[:-2] if "choices" in e)


def test_the_relace_route_refuses_stream(client):
    e = error_of(client.post("/v1/code/apply", json={"initialCode": "x = 1\n", "editSnippet": "x = 2\n",
                                                     "stream": True}), 400, "bad_request")
    assert "POST /v1/apply with stream" in e["message"]


def test_a_result_lists_its_hunks(client):
    """Each change one by one (what editors accept or reject): rows of the file and of the merged
    text, and the rows of the diff that show it."""
    original = "".join(f"x{i} = {i}\n" for i in range(20))
    snippet = "x0 = 0\nx1 = 'one'\n# ... existing code ...\nx14 = 14\nx15 = 'fifteen'\n# ... existing code ...\n"
    r = client.post("/v1/apply", json={"initial_code": original, "edit_snippet": snippet, "path": "v.py"}).json()
    assert [(h["start"], h["end"], h["newStart"], h["newEnd"]) for h in r["hunks"]] == [(1, 2, 1, 2), (15, 16, 15, 16)]
    diff = r["diff"].split("\n")
    assert [diff[h["diffRows"][1]] for h in r["hunks"]] == ["+x1 = 'one'", "+x15 = 'fifteen'"]


def test_v1_apply_takes_search_replace_blocks_and_names_the_one_that_does_not_match(client):
    """Every edit format through one entry point: the format is detected from the text."""
    edit = "<<<<<<< SEARCH\n        return self.w * self.h\n=======\n        return abs(self.w * self.h)\n>>>>>>> REPLACE\n"
    r = client.post("/v1/apply", json={"initial_code": SHAPES, "edit_snippet": edit, "path": "shapes.py"})
    assert r.status_code == 200 and r.json()["stats"]["kind"] == "search_replace"
    assert r.json()["merged_code"] == SHAPES.replace("self.w * self.h", "abs(self.w * self.h)")
    e = error_of(client.post("/v1/apply", json={"initial_code": SHAPES, "edit_snippet": edit.replace("self.h\n=", "self.d\n="),
                                                "path": "shapes.py"}), 400, "search_block")
    assert "block 1 (SEARCH 'return self.w * self.d') matches nowhere" in e["message"]
