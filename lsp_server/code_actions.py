"""`textDocument/codeAction`: "Apply this snippet to FILE", on any document.

When the selection (or, with an empty selection, the fenced block under the cursor) holds an
edit snippet, the action runs `editapply.apply {uri, snippet}` for the file it names -- a path in
the fence's info string or a first-line path comment (snippets.py), found under a workspace
folder or among the open documents -- or, when it names none, for the other open documents (up
to `MAX_TARGETS` actions; LSP does not say which document is visible). This is for chat panes that live in
a buffer: select the answer's code block, or put the cursor in it, and apply it. The snippet is
passed with its fences, so the pipeline reads the block the way it reads any chat answer.

The name comes from a chat answer, so it is not trusted: a file it names is offered only if,
with `..` and symlinks resolved, it is a regular file inside a workspace folder (or a document
open in the editor), and the action's title shows that resolved path relative to its folder
(`src/app.py`, not the `app.py` a fence wrote as `../../etc/app.py`); an open document outside
the workspace is shown with its full path.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls import uris

from engine.apply.fences import same_file
from lsp_server.apply import APPLY
from lsp_server.documents import MAX_DOCUMENT_BYTES, in_workspace, roots, workspace_relative
from lsp_server.snippets import fenced_block_at, named_file

if TYPE_CHECKING:
    from lsp_server.server import EditApplyServer

MAX_TARGETS = 3  # actions offered when the target is not plain (one per candidate document)


def targets(ls: EditApplyServer, here: str, name: str | None) -> list[str]:
    """URIs the snippet may be for: the file it names -- under a workspace folder (or beside this
    document), if it resolves to a regular file inside the workspace or to an open document --,
    else the open documents whose path ends with the name, else the other open documents."""
    opened = {os.path.realpath(path): doc.uri for doc in ls.workspace.text_documents.values()
              if doc.uri != here and (path := uris.to_fs_path(doc.uri))}
    others = [doc.uri for doc in ls.workspace.text_documents.values() if doc.uri != here]
    if name is None:
        return others[:MAX_TARGETS]
    here_path = uris.to_fs_path(here)
    for folder in roots(ls) + ([os.path.dirname(os.path.realpath(here_path))] if here_path else []):
        candidate = os.path.realpath(os.path.join(folder, name))
        if candidate in opened:
            return [opened[candidate]]
        if in_workspace(ls, candidate) and os.path.isfile(candidate):
            return [uris.from_fs_path(candidate)]
    return [uri for path, uri in opened.items() if same_file(name, path)][:MAX_TARGETS]


def label(ls: EditApplyServer, uri: str) -> str:
    """How an action names its target: the resolved path relative to its workspace folder, else
    the full path (an open document elsewhere), else the URI."""
    path = uris.to_fs_path(uri)
    return uri if path is None else workspace_relative(ls, path) or os.path.realpath(path)


def register(server: EditApplyServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.RefactorRewrite]))
    def code_action(ls: EditApplyServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        document = ls.workspace.get_text_document(params.text_document.uri)
        if document.version is None or len(document.source) > MAX_DOCUMENT_BYTES:
            return None
        start, end = params.range.start, params.range.end
        if (start.line, start.character) != (end.line, end.character):
            snippet = document.source[document.offset_at_position(start) : document.offset_at_position(end)]
        else:
            snippet = fenced_block_at(document.source, start.line)
        if not snippet or not snippet.strip():
            return None
        name = named_file(snippet)
        actions = []
        for uri in targets(ls, document.uri, name):
            title = f"Apply this snippet to {label(ls, uri)}"
            actions.append(types.CodeAction(
                title=title, kind=types.CodeActionKind.RefactorRewrite,
                command=types.Command(title=title, command=APPLY, arguments=[{"uri": uri, "snippet": snippet}])))
        return actions or None
