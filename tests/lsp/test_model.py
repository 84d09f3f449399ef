"""`editapply lsp` end to end with the model: ask, model-path applies, progress, cancellation.

One real server process for the module, its engine in-process: the CI model (smollm2-135m)
through EngineService, loaded on the first request that needs it. The CI model is too weak to
merge edits well, so these tests assert behaviour (what is sent, when, what stops), not quality.
"""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from tests.lsp.conftest import (CI_ENGINE_ENV, Editor, fresh_editor, initialize, open_case, server_config,
                                wait_for)

pytestmark = pytest.mark.asyncio(loop_scope="module")

CI_MODEL = "smollm2-135m"


@pytest_lsp.fixture(scope="module", config=server_config(CI_ENGINE_ENV))
async def client(lsp_client: LanguageClient, tmp_path_factory, ci_model_dir):
    lsp_client.root = tmp_path_factory.mktemp("workspace")
    await initialize(lsp_client, lsp_client.root, {"engine": "local", "model": CI_MODEL})
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def editor(client: LanguageClient) -> Editor:
    return fresh_editor(client)


def progress_of(client: LanguageClient, title_part: str) -> list:
    """The begin/report/end values of the one progress whose title holds `title_part`."""
    [values] = [v for v in client.progress_reports.values() if v and title_part in getattr(v[0], "title", "")]
    return values


async def first_report(client: LanguageClient, command: asyncio.Future) -> str:
    """Wait for a progress report with token counts while `command` runs; return its token."""
    async def seen():
        if command.done():
            pytest.fail(f"the command ended before any progress report: {command.exception() or command.result()}")
        return any(isinstance(v, types.WorkDoneProgressReport) and "tok/s" in (v.message or "")
                   for values in client.progress_reports.values() for v in values)
    await wait_for(seen, "a progress report with token counts", timeout=120)
    return next(token for token, values in client.progress_reports.items()
                if any(isinstance(v, types.WorkDoneProgressReport) and "tok/s" in (v.message or "") for v in values))


async def engine_idle(editor: Editor) -> dict:
    """Wait until the engine runs nothing; then check that it takes no further steps."""
    async def idle():
        engine = (await editor.execute("editapply.status", {}))["engine"]
        return engine["loaded"] and engine["running"] == 0 and engine["waiting"] == 0
    await wait_for(idle, "the engine to stop", timeout=30)
    before = (await editor.execute("editapply.status", {}))["engine"]
    await asyncio.sleep(0.5)
    after = (await editor.execute("editapply.status", {}))["engine"]
    assert after["steps"] == before["steps"] and after["running"] == 0
    return after


async def test_status_before_any_model_request(client: LanguageClient, editor: Editor):
    """The model is not loaded until a request needs it; a deterministic apply does not load it.
    Engine: local CI model (not loaded)."""
    case, uri = open_case(client, editor, "pallets/flask@e8020e2c5c", "ext_init.py")
    result = await editor.execute("editapply.apply", {"uri": uri, "snippet": case["update_snippet"]})
    assert result["applied"] and result["path"] == "deterministic" and editor.text(uri) == case["expected"]
    status = await editor.execute("editapply.status", {})
    assert status["engine"] == {"reachable": True, "engine": "local", "model": CI_MODEL, "installed": True,
                                "loaded": False}
    assert client.progress_reports == {}  # the deterministic path runs no model and shows no progress


async def test_ask_streams_progress_and_answers(client: LanguageClient, editor: Editor):
    """editapply.ask over the open document: the answer is streamed as work-done progress and
    returned at the end with its figures. Engine: local CI model in-process."""
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"maxTokens": 48}))
    case, uri = open_case(client, editor, "golang/groupcache@e2abff3bea", "peers.go")
    result = await editor.execute("editapply.ask", {"question": "What does this file define?", "uri": uri})
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"maxTokens": None}))
    assert isinstance(result["answer"], str) and result["answer"].strip()
    assert result["documents"] == ["peers.go"] and result["finish_reason"] in ("stop", "length")
    assert result["stats"]["completion_tokens"] > 0 and result["stats"]["steps"] > 0
    values = progress_of(client, "ask")
    assert isinstance(values[0], types.WorkDoneProgressBegin) and values[0].cancellable
    assert isinstance(values[-1], types.WorkDoneProgressEnd) and "tokens/step" in values[-1].message
    reports = [v.message for v in values if isinstance(v, types.WorkDoneProgressReport) and "tok/s" in (v.message or "")]
    assert reports, "no progress report with token counts"
    # Each report: the figures line, then the answer so far (a prefix of the final answer).
    figures, _, text = reports[-1].partition("\n")
    assert "tokens ·" in figures and result["answer"].startswith(text)
    assert editor.edits == []


async def test_model_apply_reports_progress_and_applies_or_asks(client: LanguageClient, editor: Editor):
    """An apply in mode model: work-done progress (loading/prefill stages, then tokens, tok/s and
    tokens per step), and the result is either applied as versioned edits or, when it fails
    validation, offered and not applied on "Cancel". Engine: local CI model in-process."""
    case, uri = open_case(client, editor, "encode/httpx@e51b2125c9", "noxfile.py")
    result = await editor.execute("editapply.apply", {"uri": uri, "snippet": case["update_snippet"], "mode": "model"})
    assert result["path"] == "model" and result["stats"]["steps"] > 0 and result["usage"]["completion_tokens"] > 0
    values = progress_of(client, "apply noxfile.py")
    assert any("prefilling" in (v.message or "") for v in values if isinstance(v, types.WorkDoneProgressReport))
    assert any("tokens/step" in (v.message or "") for v in values if isinstance(v, types.WorkDoneProgressReport))
    # The snippet has two readings: a refusal offers them, a file that is the ranked one validates.
    assert isinstance(values[-1], types.WorkDoneProgressEnd)
    assert ("validation ok" if result["validation"]["ok"] else "2 readings to choose from") in values[-1].message
    if result["validation"]["ok"]:
        assert result["applied"] and editor.edits and editor.edits[0][1] == 1
    else:
        assert not result["applied"] and len(editor.requests) == 1 and editor.edits == []
        assert editor.text(uri) == case["original"]


async def test_a_refused_model_file_offers_the_merge_for_review(client: LanguageClient, editor: Editor):
    """Issue 32 item 4: mode model, the model's file fails validation (maxTokens 8 cannot hold
    it) where the deterministic merge validated. A `pickReadings` client gets the result back
    unapplied, with the merge as `candidate` and the model's text as `merged`, and no question; a
    client without it is asked about the model's text, told that the merge validates. Nothing is
    applied either way. Engine: local CI model in-process."""
    case, uri = open_case(client, editor, "golang/groupcache@e2abff3bea", "peers.go")
    settings = {"maxTokens": 8, "pickReadings": True}
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=settings))
    try:
        result = await editor.execute("editapply.apply", {"uri": uri, "snippet": case["update_snippet"], "mode": "model"})
        assert not result["applied"] and not result["validation"]["ok"] and editor.requests == []
        assert result["validation"]["problems"][0]["name"] == "truncated" and result["merged"] != case["expected"]
        candidate = result["candidate"]
        assert candidate["merged"] == case["expected"] and "the model did not confirm it" in candidate["label"]
        assert candidate["diff"].startswith("--- a/peers.go")
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"pickReadings": None}))
        result = await editor.execute("editapply.apply", {"uri": uri, "snippet": case["update_snippet"], "mode": "model"})
        [question] = editor.requests
        assert "failed validation" in question.message and "The deterministic merge (exact, confidence 1.00) validates" in question.message
        assert not result["applied"] and result["candidate"]["merged"] == case["expected"]
        assert editor.edits == [] and editor.text(uri) == case["original"]
    finally:
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"maxTokens": None, "pickReadings": None}))


async def test_typing_during_a_model_apply_makes_it_stale(client: LanguageClient, editor: Editor):
    """The user types while the model writes: the apply is stopped at once, fails with
    stale_version, and nothing is applied. Engine: local CI model in-process."""
    editor.answer = "Apply anyway"  # even a result that failed validation would be applied if not stale
    case, uri = open_case(client, editor, "urfave/cli@6c50b15a27", "errors.go")
    command = asyncio.ensure_future(editor.execute("editapply.apply", {"uri": uri, "snippet": case["update_snippet"],
                                                                       "mode": "model"}))
    await first_report(client, command)
    editor.type(uri, case["original"] + "// typed meanwhile\n")
    with pytest.raises(JsonRpcException) as info:
        await command
    assert info.value.data == {"reason": "stale_version"} and "changed while the apply ran" in info.value.message
    assert "(version 1 -> 2)" in info.value.message
    assert editor.edits == [] and editor.text(uri).endswith("// typed meanwhile\n")
    await engine_idle(editor)


async def test_progress_cancel_stops_the_engine(client: LanguageClient, editor: Editor):
    """window/workDoneProgress/cancel during a model apply: the command fails as cancelled,
    nothing is applied, and the engine stops stepping (its slot is freed). Engine: local CI model."""
    case, uri = open_case(client, editor, "golang/groupcache@41bb18bfe9", "peers2.go")
    command = asyncio.ensure_future(editor.execute("editapply.apply", {"uri": uri, "snippet": case["update_snippet"],
                                                                       "mode": "model"}))
    token = await first_report(client, command)
    client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    with pytest.raises(JsonRpcException) as info:
        await command
    assert info.value.code == -32800 and "cancelled" in info.value.message
    assert isinstance(client.progress_reports[token][-1], types.WorkDoneProgressEnd)
    await engine_idle(editor)
    assert editor.edits == [] and editor.text(uri) == case["original"]


async def test_cancel_request_stops_the_engine(client: LanguageClient, editor: Editor):
    """$/cancelRequest during an ask: the request is answered as cancelled and the engine stops
    stepping. Engine: local CI model in-process."""
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"maxTokens": 2000}))
    case, uri = open_case(client, editor, "tj/commander.js@a9967826ca", "eslint.config.js")
    question = "Repeat this file, line by line, from its first line to its last."
    command = asyncio.ensure_future(editor.execute("editapply.ask", {"question": question, "uri": uri},
                                                   msg_id="ask-to-cancel"))
    await first_report(client, command)
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="ask-to-cancel"))
    with pytest.raises(JsonRpcException) as info:
        await command
    assert info.value.code == -32800
    status = await engine_idle(editor)
    assert status["kv_blocks_free"] == status["kv_blocks_total"]  # nothing holds KV blocks
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"maxTokens": None}))


async def test_instruction_only_preview_runs_the_model(client: LanguageClient, editor: Editor):
    """An instruction without a snippet is an instruction-only edit: the model writes it (here a
    preview, so nothing is applied). Engine: local CI model in-process."""
    text = "def area(w, h):\n    return w * h\n"
    path = client.root / "area.py"
    path.write_text(text, encoding="utf-8")
    uri = editor.open(path, text)
    result = await editor.execute("editapply.preview", {"uri": uri, "instruction": "Add a docstring to area"})
    assert result["stats"]["kind"] == "instruction" and result["stats"]["path"] == "model"
    assert result["usage"]["completion_tokens"] > 0 and isinstance(result["merged"], str)
    assert editor.edits == [] and editor.text(uri) == text
