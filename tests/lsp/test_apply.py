"""`editapply lsp` end to end, deterministic path: apply, preview, applyMerged, version checks,
validation prompts, arguments, settings, code actions, and an engine that is down.

One real server process for the module (pytest-lsp over stdio); every test uses its own files.
Engine: none. These requests are served by the deterministic merge, which never touches the
engine (its local model is never loaded here); the engine-down tests point `engineUrl` at a
closed port.
"""

from __future__ import annotations

from difflib import SequenceMatcher

import pytest
import pytest_lsp
from lsprotocol import types
from pygls import uris
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from lsp_server.textedits import split_lsp_lines
from tests.lsp.conftest import Editor, closed_port, dev_case, dev_cases, fresh_editor, initialize, server_config

pytestmark = pytest.mark.asyncio(loop_scope="module")

BROKEN = "def area(self):\n    return self.w * (self.h\n"  # a syntax error the edit introduces
SHAPES = "class Shape:\n    def __init__(self, w, h):\n        self.w = w\n        self.h = h\n\n" \
         "    def area(self):\n        return self.w * self.h\n"


# No model: an ambiguous snippet is never ranked here, whatever models this machine has pulled.
@pytest_lsp.fixture(scope="module", config=server_config({"EDITAPPLY_MODEL": "/nonexistent/no-model-here"}))
async def client(lsp_client: LanguageClient, tmp_path_factory):
    lsp_client.root = tmp_path_factory.mktemp("workspace")
    await initialize(lsp_client, lsp_client.root)
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def editor(client: LanguageClient) -> Editor:
    return fresh_editor(client)


def write(client: LanguageClient, relpath: str, text: str):
    path = client.root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", newline="")
    return path


async def error_of(awaitable) -> JsonRpcException:
    with pytest.raises(JsonRpcException) as info:
        await awaitable
    return info.value


async def test_apply_dev_cases(client: LanguageClient, editor: Editor):
    """Every dev case (bench/data/dev.jsonl): the edit arrives as minimal text edits (only the
    changed lines) against the version the request started from, and the document then equals
    `expected`. Engine: none (deterministic path). A snippet that can be read two ways is not
    guessed: the server asks which reading is meant, and the user picks the commit's."""
    for case in dev_cases():
        path = write(client, f"dev/{case['id'].split('@')[1].replace(':', '/')}", case["original"])
        uri = editor.open(path, case["original"], version=3)
        editor.edits.clear()
        preview = await editor.execute("editapply.preview", {"uri": uri, "snippet": case["update_snippet"]})
        meant = [r["merged"] for r in preview["readings"]].index(case["expected"]) if preview["readings"] else None

        async def pick(params, meant=meant):
            editor.answer = params.actions[meant].title

        editor.before_answer = pick if meant is not None else None
        result = await editor.execute("editapply.apply", {"uri": uri, "snippet": case["update_snippet"]})
        editor.before_answer, editor.answer = None, "Cancel"
        assert result["applied"] and result["path"] == "deterministic", case["id"]
        assert result["validation"]["ok"] or meant is not None, case["id"]
        assert editor.text(uri) == case["expected"], case["id"]
        [(edit_uri, version, edits)] = editor.edits
        assert (edit_uri, version, result["version"]) == (uri, 3, 3)
        # Minimal: the edits replace exactly as many old lines, and write as many new ones, as a
        # full line diff changes (an equally short alignment may place them differently).
        opcodes = SequenceMatcher(None, split_lsp_lines(case["original"]), split_lsp_lines(case["expected"]),
                                  autojunk=False).get_opcodes()
        removed = sum(i2 - i1 for tag, i1, i2, _, _ in opcodes if tag != "equal")
        added = sum(j2 - j1 for tag, _, _, j1, j2 in opcodes if tag != "equal")
        # (A range ending mid-line ends at the end of a last line without a line break.)
        # An insertion replaces no line; one at the end of the file goes before the last line's
        # break and so starts with a break (lsp_server/textedits.py, for Neovim).
        replaced = sum(e.range.end.line - e.range.start.line + (e.range.end.character > 0) for e in edits
                       if e.range.start != e.range.end)
        written = sum(len(split_lsp_lines(e.new_text)) - (e.range.start == e.range.end and e.range.start.character > 0)
                      for e in edits)
        assert len(edits) == result["edits"] and replaced == removed, case["id"]
        assert written == added, case["id"]


async def test_preview_changes_nothing(client: LanguageClient, editor: Editor):
    """Preview returns the merged text, its diff, validation and stats, and sends no edit.
    Engine: none (deterministic path)."""
    case = dev_case("golang/groupcache@976d66a1f1")
    uri = editor.open(write(client, "preview/http.go", case["original"]), case["original"], version=7)
    result = await editor.execute("editapply.preview", {"uri": uri, "snippet": case["update_snippet"]})
    assert result["merged"] == case["expected"]
    assert result["validation"] == {"ok": True, "problems": []}
    assert result["stats"]["path"] == "deterministic" and result["version"] == 7
    assert result["diff"].startswith("--- a/preview/http.go\n+++ b/preview/http.go\n")
    assert editor.edits == [] and editor.text(uri) == case["original"] and editor.version(uri) == 7


async def test_apply_merged_takes_the_previewed_text_version_checked(client: LanguageClient, editor: Editor):
    """applyMerged applies a previewed text as minimal edits; an old version is refused.
    Engine: none (deterministic path)."""
    case = dev_case("serde-rs/json@7b0b96e6ab")
    uri = editor.open(write(client, "merged/core.rs", case["original"]), case["original"])
    preview = await editor.execute("editapply.preview", {"uri": uri, "snippet": case["update_snippet"]})
    result = await editor.execute("editapply.applyMerged", {"uri": uri, "version": preview["version"],
                                                            "merged": preview["merged"]})
    assert result["applied"] and editor.text(uri) == case["expected"]
    assert 0 < result["edits"] == len(editor.edits[0][2]) < len(split_lsp_lines(case["expected"]))
    err = await error_of(editor.execute("editapply.applyMerged", {"uri": uri, "version": preview["version"],
                                                                  "merged": preview["merged"]}))
    assert err.code == -32803 and err.data == {"reason": "stale_version"} and "changed since the preview" in err.message
    assert len(editor.edits) == 1


async def test_per_hunk_review_accepts_one_change_and_rejects_another(client: LanguageClient, editor: Editor):
    """Issue 32, per-hunk review: a preview lists its hunks (with the diff rows that show each);
    applyMerged with `hunks` applies those changes only; editapply.hunks with `drop` puts a change
    back and lists what is left. Engine: none (deterministic path)."""
    original = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(6))
    snippet = ("def f1():\n    return 10\n\n\n# ... existing code ...\n\n\n"
               "def f4():\n    return 40\n\n\n# ... existing code ...\n")
    uri = editor.open(write(client, "hunks/funcs.py", original), original)
    preview = await editor.execute("editapply.preview", {"uri": uri, "snippet": snippet})
    first, second = preview["hunks"]
    assert (first["start"], first["end"], second["start"], second["end"]) == (5, 6, 17, 18)
    diff = preview["diff"].split("\n")
    assert diff[first["diffRows"][0]] == "-    return 1" and diff[first["diffRows"][1]] == "+    return 10"
    assert diff[second["diffRows"][1]] == "+    return 40"
    # Accept the second change only: the first is still to review.
    done = await editor.execute("editapply.applyMerged", {"uri": uri, "version": preview["version"],
                                                          "merged": preview["merged"], "hunks": [1]})
    assert done["applied"] and editor.text(uri) == original.replace("return 4\n", "return 40\n")
    left = await editor.execute("editapply.hunks", {"uri": uri, "merged": preview["merged"]})
    assert [h["start"] for h in left["hunks"]] == [5] and left["version"] == editor.version(uri)
    # Reject it: nothing is left to review, and the document keeps the accepted change only.
    rejected = await editor.execute("editapply.hunks", {"uri": uri, "merged": left["merged"], "drop": [0]})
    assert rejected["hunks"] == [] and rejected["diff"] == "" and rejected["merged"] == editor.text(uri)
    err = await error_of(editor.execute("editapply.hunks", {"uri": uri, "merged": left["merged"], "drop": [3]}))
    assert err.code == -32602 and "hunk indexes from 0 to 0" in err.message


async def test_validation_failure_asks_and_cancel_applies_nothing(client: LanguageClient, editor: Editor):
    """A result that fails validation (a syntax error the snippet introduces) is offered with
    window/showMessageRequest; "Cancel" applies nothing. Engine: none (deterministic mode)."""
    uri = editor.open(write(client, "invalid/shapes.py", SHAPES), SHAPES)
    result = await editor.execute("editapply.apply", {"uri": uri, "snippet": BROKEN, "mode": "deterministic"})
    assert result["applied"] is False and result["validation"]["ok"] is False
    [request] = editor.requests
    assert [a.title for a in request.actions] == ["Apply anyway", "Cancel"]
    assert request.type == types.MessageType.Warning and "failed validation" in request.message
    assert any(p["name"] in request.message for p in result["validation"]["problems"])
    assert editor.edits == [] and editor.text(uri) == SHAPES


async def test_validation_failure_apply_anyway_applies(client: LanguageClient, editor: Editor):
    """"Apply anyway" applies the result that failed validation. Engine: none (deterministic)."""
    editor.answer = "Apply anyway"
    uri = editor.open(write(client, "anyway/shapes.py", SHAPES), SHAPES)
    result = await editor.execute("editapply.apply", {"uri": uri, "snippet": BROKEN, "mode": "deterministic"})
    assert result["applied"] is True and result["validation"]["ok"] is False
    assert "return self.w * (self.h\n" in editor.text(uri) and editor.text(uri) != SHAPES


async def test_stale_version_is_refused(client: LanguageClient, editor: Editor):
    """The user types while the apply waits (here: on the validation prompt): nothing is applied,
    and the command fails saying the document changed. Engine: none (deterministic)."""
    uri = editor.open(write(client, "stale/shapes.py", SHAPES), SHAPES)
    typed = SHAPES + "\n# typed meanwhile\n"

    async def type_meanwhile(_):
        editor.type(uri, typed)
        await editor.execute("editapply.status", {})  # a round trip: the server has seen the change

    editor.before_answer, editor.answer = type_meanwhile, "Apply anyway"
    err = await error_of(editor.execute("editapply.apply", {"uri": uri, "snippet": BROKEN, "mode": "deterministic"}))
    assert err.code == -32803 and err.data == {"reason": "stale_version"}
    assert "changed while the apply ran (version 1 -> 2); nothing was applied" in err.message
    assert editor.edits == [] and editor.text(uri) == typed


async def test_second_apply_on_a_document_is_refused_others_run(client: LanguageClient, editor: Editor):
    """While an apply runs on a document (waiting on its prompt), a second apply there is refused
    with a message, and an apply on another document runs to the end. Engine: none."""
    uri = editor.open(write(client, "busy/shapes.py", SHAPES), SHAPES)
    case = dev_case("urfave/cli@6c50b15a27")
    other = editor.open(write(client, "busy/errors.go", case["original"]), case["original"])
    seen = {}

    async def meanwhile(_):
        seen["busy"] = await error_of(editor.execute("editapply.apply", {"uri": uri, "snippet": SHAPES}))
        seen["other"] = await editor.execute("editapply.apply", {"uri": other, "snippet": case["update_snippet"]})

    editor.before_answer = meanwhile
    first = await editor.execute("editapply.apply", {"uri": uri, "snippet": BROKEN, "mode": "deterministic"})
    assert first["applied"] is False
    assert seen["busy"].data == {"reason": "busy"} and "already running" in seen["busy"].message
    assert any("already running" in m.message and m.type == types.MessageType.Warning for m in client.messages)
    assert seen["other"]["applied"] and editor.text(other) == case["expected"]


async def test_unopened_file_is_read_from_disk_and_never_written(client: LanguageClient, editor: Editor):
    """A URI that is not open: the file on disk is merged, the edit goes to the editor (version
    null), and the server writes nothing. Engine: none (deterministic)."""
    case = dev_case("koajs/koa@df367e0749")
    path = write(client, "closed/application.js", case["original"])
    result = await editor.execute("editapply.apply", {"uri": uris.from_fs_path(str(path)),
                                                      "snippet": case["update_snippet"]})
    assert result["applied"] and result["version"] is None
    [(uri, version, edits)] = editor.edits
    assert version is None and len(edits) == result["edits"] > 0
    assert path.read_text(encoding="utf-8") == case["original"]


async def test_bad_arguments(client: LanguageClient, editor: Editor):
    """Malformed arguments fail with InvalidParams naming what is wrong; bad documents fail with
    a clear reason; the server keeps serving. Engine: none."""
    uri = editor.open(write(client, "args/shapes.py", SHAPES), SHAPES)
    bad = [
        ((), "missing argument 'uri'"),
        (({"uri": uri}, {"uri": uri}), "got 2 argument(s)"),
        ((["x"],), "got list"),
        (({"snippet": "x"},), "missing argument 'uri'"),
        (({"uri": uri, "snippet": 3},), "snippet must be str"),
        (({"uri": uri, "snippet": "x", "snipet": "y"},), "unknown argument(s) snipet"),
        (({"uri": uri, "snippet": "x", "mode": "fast"},), "mode must be one of auto, model, deterministic"),
        (({"uri": uri, "snippet": "  \n"},), "give a snippet, an instruction, or both"),
    ]
    for arguments, reason in bad:
        err = await error_of(editor.execute("editapply.apply", *arguments))
        assert err.code == -32602 and reason in err.message, (arguments, err.message)
    err = await error_of(editor.execute("editapply.applyMerged", {"uri": uri, "merged": SHAPES}))
    assert err.code == -32602 and "missing argument 'version'" in err.message
    err = await error_of(editor.execute("editapply.nope", {}))
    assert err.code == -32602 and "not defined" in err.message

    binary = editor.open(client.root / "args/blob.py", "x = 1\0\n")
    err = await error_of(editor.execute("editapply.apply", {"uri": binary, "snippet": "x = 2\n"}))
    assert err.data == {"reason": "bad_input"} and "binary" in err.message
    huge = editor.open(client.root / "args/huge.py", "x = 1\n" * 400_000)
    err = await error_of(editor.execute("editapply.apply", {"uri": huge, "snippet": "x = 2\n"}))
    assert err.data == {"reason": "bad_input"} and "too large" in err.message
    missing = uris.from_fs_path(str(client.root / "args/missing.py"))
    err = await error_of(editor.execute("editapply.apply", {"uri": missing, "snippet": "x = 2\n"}))
    assert err.data == {"reason": "bad_input"} and "does not exist" in err.message
    err = await error_of(editor.execute("editapply.apply", {"uri": uri, "snippet": "# ... existing code ...\n",
                                                            "mode": "deterministic"}))
    assert err.data == {"reason": "bad_input"} and "only elision markers" in err.message
    result = await editor.execute("editapply.apply", {"uri": uri, "snippet": SHAPES + "\n\nX = 1\n"})
    assert result["applied"] and editor.text(uri).endswith("X = 1\n")
    assert editor.edits and all(version == 1 for _, version, _ in editor.edits)


async def test_code_action_applies_a_fenced_snippet_to_the_file_it_names(client: LanguageClient, editor: Editor):
    """A chat buffer with a fenced snippet naming a file: the code action under the cursor runs
    editapply.apply on that file. Engine: none (deterministic)."""
    case = dev_case("encode/httpx@625ad127cc")
    target = editor.open(write(client, "httpx/utils.py", case["original"]), case["original"])
    chat = f"Here is the change:\n\n```python httpx/utils.py\n{case['update_snippet']}```\n\nDone.\n"
    chat_uri = editor.open(client.root / "chat.md", chat, language="markdown")
    here = types.Range(start=types.Position(line=4, character=0), end=types.Position(line=4, character=0))
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=chat_uri), range=here,
        context=types.CodeActionContext(diagnostics=[])))
    [action] = actions
    assert action.title == "Apply this snippet to httpx/utils.py" and action.command.command == "editapply.apply"
    assert action.command.arguments[0]["uri"] == target
    result = await editor.execute(action.command.command, *action.command.arguments)
    assert result["applied"] and editor.text(target) == case["expected"]
    outside = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0))
    assert await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=chat_uri), range=outside,
        context=types.CodeActionContext(diagnostics=[]))) is None


async def test_bad_settings_show_a_message_and_take_the_defaults(client: LanguageClient, editor: Editor):
    """didChangeConfiguration with bad values: a window/showMessage names each one and its
    default; the server keeps the defaults and keeps serving. Engine: none."""
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"editapply": {"mode": "fast", "maxTokens": -1, "colour": "blue"}}))
    status = await editor.execute("editapply.status", {})
    assert status["settings"]["mode"] == "auto" and status["settings"]["max_tokens"] is None
    messages = [m.message for m in client.messages]
    # Issue 32, item 15: one "editapply:" (it read "editapply: editapply setting mode: ...").
    assert "editapply: setting mode: must be one of auto, model, deterministic, got 'fast'; using 'auto'" in messages
    assert any("maxTokens: must be a positive integer, got -1; using the default" in m for m in messages)
    assert any("unknown setting 'colour'" in m for m in messages)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"mode": None, "maxTokens": None, "colour": None}))


async def test_engine_down(client: LanguageClient, editor: Editor):
    """engineUrl at a closed port: a request that needs the model fails with a clear message, the
    server stays up, the deterministic path still works, and the next
    request tries the engine again. Engine: remote, nothing listening."""
    port = closed_port()
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"engineUrl": f"http://127.0.0.1:{port}"}))
    uri = editor.open(write(client, "down/shapes.py", SHAPES), SHAPES)
    for _ in range(2):
        err = await error_of(editor.execute("editapply.ask", {"question": "What does area return?", "uri": uri}))
        assert err.code == -32803 and err.data == {"reason": "engine_unavailable"}
        assert f"cannot reach the engine at http://127.0.0.1:{port}" in err.message
    err = await error_of(editor.execute("editapply.apply", {"uri": uri, "snippet": BROKEN, "mode": "model"}))
    assert err.data == {"reason": "engine_unavailable"}
    # Said once, in the error (issue 32, item 8: a window/showMessage beside it doubled it).
    assert not any("cannot reach the engine" in m.message for m in client.messages)
    status = await editor.execute("editapply.status", {})
    assert status["engine"]["reachable"] is False and status["settings"]["engine"] == "remote"
    case = dev_case("golang/groupcache@e2abff3bea")
    other = editor.open(write(client, "down/peers.go", case["original"]), case["original"])
    result = await editor.execute("editapply.apply", {"uri": other, "snippet": case["update_snippet"]})
    assert result["applied"] and editor.text(other) == case["expected"] and editor.text(uri) == SHAPES
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"engineUrl": None,
                                                                                          "engine": "local"}))


async def test_status_says_whether_the_model_is_installed(client: LanguageClient, editor: Editor, tmp_path):
    """editapply.status names the local engine's model and whether a load can find it (a pulled
    preset, or an existing folder), without loading it: what :checkhealth editapply reports.
    Engine: local, never loaded."""
    for model, installed in ((str(tmp_path / "no-such-model"), False), (str(tmp_path), True)):
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"model": model}))
        engine = (await editor.execute("editapply.status", {}))["engine"]
        assert engine == {"reachable": True, "engine": "local", "model": model, "installed": installed, "loaded": False}
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"model": None}))


AMBIGUOUS = "class MyError(Exception):\n    \"\"\"Raised when it fails.\"\"\"\n    pass\n\n\nclass Other:\n    x = 1\n"
# No marker after the docstring: `pass` stays (a marker left out), or the class ends there.
ENDS_AT_DOCSTRING = "class MyError(Exception):\n    \"\"\"Raised when it fails.\"\"\"\n"


async def test_an_ambiguous_snippet_asks_which_reading_is_meant(client: LanguageClient, editor: Editor):
    """Deterministic mode: two readings, none guessed; the server asks with both (and Cancel),
    and applies the one picked. Engine: none."""
    uri = editor.open(write(client, "readings/asked.py", AMBIGUOUS), AMBIGUOUS, version=2)
    editor.answer = "Cancel"
    result = await editor.execute("editapply.apply", {"uri": uri, "snippet": ENDS_AT_DOCSTRING, "mode": "deterministic"})
    assert not result["applied"] and editor.text(uri) == AMBIGUOUS
    assert [r["merged"] for r in result["readings"]] == [AMBIGUOUS, AMBIGUOUS.replace("    pass\n", "")]
    assert "ambiguous_reading" in [p["name"] for p in result["validation"]["problems"]]
    [asked] = editor.requests
    assert [a.title.split(":")[0] for a in asked.actions] == ["1", "2", "Cancel"]

    async def second(params):
        editor.answer = params.actions[1].title

    editor.before_answer = second
    result = await editor.execute("editapply.apply", {"uri": uri, "snippet": ENDS_AT_DOCSTRING, "mode": "deterministic"})
    assert result["applied"] and editor.text(uri) == AMBIGUOUS.replace("    pass\n", "")


async def test_a_client_that_picks_readings_gets_them_and_applies_one(client: LanguageClient, editor: Editor):
    """With `pickReadings`, the server asks nothing: the result carries the readings and the
    client applies the chosen one with applyMerged. In auto mode with no model to rank them
    (the default model is not installed here), the readings are still offered."""
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"pickReadings": True}))
    uri = editor.open(write(client, "readings/picked.py", AMBIGUOUS), AMBIGUOUS, version=5)
    result = await editor.execute("editapply.apply", {"uri": uri, "snippet": ENDS_AT_DOCSTRING})
    assert not result["applied"] and not editor.requests and len(result["readings"]) == 2
    assert result["readings"][1]["diff"].count("\n-    pass") == 1
    done = await editor.execute("editapply.applyMerged", {"uri": uri, "version": result["version"],
                                                         "merged": result["readings"][1]["merged"]})
    assert done["applied"] and editor.text(uri) == AMBIGUOUS.replace("    pass\n", "")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"pickReadings": None}))
