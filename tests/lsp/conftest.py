"""A real `editapply lsp` process driven by pytest-lsp's client, playing a small editor.

`Editor` is the editor's side: it opens documents (full text), applies `workspace/applyEdit`
like an editor does -- refusing an edit for another version, then bumping the version and sending
the new text back with `didChange` -- and answers `window/showMessageRequest` with `answer`
(a hook may act first: type into the document, start a second apply). What the server sent is
kept for the tests: `edits` (uri, version, TextEdits), `requests` (message requests).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Union

import pytest
from lsprotocol import types
from pygls import uris
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities, make_test_lsp_client

from lsp_server.textedits import LineEdit, apply_edits

ROOT = Path(__file__).resolve().parents[2]
DEV_SET = ROOT / "bench" / "data" / "dev.jsonl"
EDITAPPLY = str(Path(sys.executable).parent / "editapply")
# The in-process engine's footprint for the CI model: a small context and few sequences keep
# the KV cache small on the 2-core CI machine.
CI_ENGINE_ENV = {"EDITAPPLY_MAX_MODEL_LEN": "4096", "EDITAPPLY_MAX_NUM_SEQS": "2"}


class Editor:
    def __init__(self, client: LanguageClient):
        self.client = client
        self.docs: dict[str, tuple[int, str]] = {}  # uri -> (version, text)
        self.edits: list[tuple[str, int | None, list[types.TextEdit]]] = []
        self.requests: list[types.ShowMessageRequestParams] = []
        self.answer: str | None = "Cancel"
        self.before_answer = None  # async hook run when a message request arrives

    def open(self, path: Path | str, text: str, version: int = 1, language: str = "") -> str:
        uri = uris.from_fs_path(str(path))
        self.docs[uri] = (version, text)
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)))
        return uri

    def type(self, uri: str, text: str) -> None:
        """The user edits the document: a new version with `text`."""
        version = self.docs[uri][0] + 1
        self.docs[uri] = (version, text)
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            [types.TextDocumentContentChangeWholeDocument(text=text)]))

    def text(self, uri: str) -> str:
        return self.docs[uri][1]

    def version(self, uri: str) -> int:
        return self.docs[uri][0]

    def apply_edit(self, params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        for change in params.edit.document_changes or []:
            uri, version = change.text_document.uri, change.text_document.version
            self.edits.append((uri, version, list(change.edits)))
            if uri not in self.docs:
                continue  # a file that is not open: the editor would open it; kept only as recorded
            if version != self.version(uri):
                return types.ApplyWorkspaceEditResult(applied=False, failure_reason=f"version {version} is stale")
            line_edits = [LineEdit((e.range.start.line, e.range.start.character),
                                   (e.range.end.line, e.range.end.character), e.new_text) for e in change.edits]
            self.type(uri, apply_edits(self.text(uri), line_edits))
        return types.ApplyWorkspaceEditResult(applied=True)

    async def show_message_request(self, params: types.ShowMessageRequestParams) -> types.MessageActionItem | None:
        self.requests.append(params)
        if self.before_answer is not None:
            await self.before_answer(params)
        return None if self.answer is None else types.MessageActionItem(title=self.answer)

    async def execute(self, command: str, *arguments, msg_id: str | None = None):
        params = types.ExecuteCommandParams(command=command, arguments=list(arguments))
        if msg_id is None:
            return await self.client.workspace_execute_command_async(params)
        return await self.client.protocol.send_request_async(types.WORKSPACE_EXECUTE_COMMAND, params, msg_id=msg_id)


def make_client() -> LanguageClient:
    client = make_test_lsp_client()
    converter = client.protocol._converter

    # lsprotocol 2025.0 reads any object with a `command` key as a Command, so a CodeAction that
    # carries a command comes back mangled; a Command's `command` is a string, a CodeAction's an object.
    def command_or_code_action(obj: dict, _) -> types.Command | types.CodeAction:
        return converter.structure(obj, types.Command if isinstance(obj.get("command"), str) else types.CodeAction)

    converter.register_structure_hook(Union[types.Command, types.CodeAction], command_or_code_action)
    editor = client.editor = Editor(client)

    # pygls registers functions (it tags them), not bound methods.
    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams):
        return editor.apply_edit(params)

    @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    async def show_message_request(params: types.ShowMessageRequestParams):
        return await editor.show_message_request(params)

    return client


def fresh_editor(client: LanguageClient) -> Editor:
    """The client's editor with what earlier tests left cleared: no edits, requests, progress or
    messages recorded, and "Cancel" as the answer to a validation prompt."""
    ed = client.editor
    ed.answer, ed.before_answer = "Cancel", None
    ed.edits.clear()
    ed.requests.clear()
    client.progress_reports.clear()
    client.messages.clear()
    return ed


def open_case(client: LanguageClient, editor: Editor, case_id: str, name: str) -> tuple[dict, str]:
    """Dev case `case_id`'s original written to `name` under the workspace and opened: (case, uri)."""
    case = dev_case(case_id)
    path = client.root / name
    path.write_text(case["original"], encoding="utf-8")
    return case, editor.open(path, case["original"])


def server_config(env: dict[str, str] | None = None) -> ClientServerConfig:
    import os

    return ClientServerConfig(server_command=[EDITAPPLY, "lsp"], client_factory=make_client,
                              server_env={**os.environ, **tree_first(), **(env or {})})


def tree_first() -> dict[str, str]:
    """PYTHONPATH that makes `editapply` import this tree: the venv's script imports the
    editable install's tree otherwise, which is another checkout when worktrees share a venv."""
    import os

    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


async def initialize(client: LanguageClient, root: Path, options: dict | None = None) -> Editor:
    await client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=uris.from_fs_path(str(root)),
        initialization_options=options))
    return client.editor


def dev_cases() -> list[dict]:
    return [json.loads(line) for line in DEV_SET.read_text(encoding="utf-8").splitlines() if line.strip()]


def dev_case(case_id_prefix: str) -> dict:
    return next(c for c in dev_cases() if c["id"].startswith(case_id_prefix))


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_for(predicate, what: str, timeout: float = 60.0) -> None:
    """Poll `predicate()` (a coroutine function) until it is true; fail after `timeout` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
