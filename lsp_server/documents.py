"""Documents: full text sync, the text a command works on, and whether it changed since.

pygls keeps the open documents (`textDocument/didOpen`, `didChange`, `didClose`); the server asks
for full sync, so each change carries the whole text and the server's copy is exactly the
editor's, version included. A command reads a `Snapshot`:

* an open document: its text and version as the editor holds them (unsaved edits included);
* a `file:` URI that is not open: the file on disk (the bytes are kept, to notice a change), if it
  is a regular file inside a workspace folder once symlinks are resolved (`in_workspace`). The
  server reads files for whoever talks to it: a command naming `file:///etc/passwd`, or a path
  that climbs out with `..` or a symlink, must not make it read them; a FIFO or a device would
  hang it or fill its memory, so the file is opened without blocking and checked first;
* refused with a one-line reason (`ApplyError`): a binary or invalid UTF-8 file, a document over
  `MAX_DOCUMENT_BYTES`, a file outside the workspace or not a regular file, a URI that is neither
  open nor a readable file.

An apply `claim`s its document for as long as it runs (a second apply there is refused: `busy`).
A change to that document (`didChange`: the user typed while the model wrote) or its closing
cancels the apply at once -- its result could no longer be applied, so the engine need not finish
it -- and the command fails with `stale_version`. `check_unchanged` runs again just before the
edit is sent (for a file on disk, which sends no notifications, it compares the bytes); from then
on the document's next change is the edit itself.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls import uris

from engine.apply.errors import ApplyError, InputTooLargeError
from engine.apply.files import read_source
from engine.apply.languages import detect_language, resolve_language
from lsp_server import errors

if TYPE_CHECKING:
    from lsp_server.server import EditApplyServer

# Larger documents are not the source files edit snippets are for, and the merge's cost grows
# with size (about 1 s for 3 MB): refused before any work.
MAX_DOCUMENT_BYTES = 2 * 2**20


@dataclass(frozen=True)
class Snapshot:
    uri: str
    text: str
    version: int | None  # the editor's version; None: not open, read from disk
    path: str | None  # relative to its workspace folder (diff labels, language), else the file name
    language: str | None  # the editor's languageId, used when the path names no known language
    disk: bytes | None = None  # what was read from disk (unopened files only)


@dataclass
class ApplyRun:
    """An apply running on a document, and what happened to the document meanwhile."""

    task: asyncio.Task
    changed_to: int | None = None  # the version a didChange moved the document to
    closed: bool = False
    sending: bool = False  # the edit is on its way: the next change is the edit itself

    def interruption(self, name: str, version: int | None) -> errors.CommandFailed | None:
        """The error for an apply cancelled because its document changed or closed, else None."""
        if self.closed:
            return errors.CommandFailed(errors.STALE, f"{name} was closed while the apply ran; nothing was applied")
        if self.changed_to is not None:
            return errors.CommandFailed(errors.STALE, f"{name} changed while the apply ran (version {version} -> "
                                        f"{self.changed_to}); nothing was applied: run it again")
        return None


def claim(ls: EditApplyServer, uri: str) -> ApplyRun:
    """Mark `uri` as applied to by the current task; refuse (`busy`) if another apply runs there."""
    if uri in ls.applying:
        message = f"an apply is already running on {uri}; wait for it or cancel it"
        ls.show(message, types.MessageType.Warning)
        raise errors.CommandFailed(errors.BUSY, message)
    run = ls.applying[uri] = ApplyRun(asyncio.current_task())
    return run


def release(ls: EditApplyServer, uri: str, run: ApplyRun) -> None:
    if ls.applying.get(uri) is run:
        del ls.applying[uri]


def snapshot(ls: EditApplyServer, uri: str) -> Snapshot:
    document = ls.workspace.get_text_document(uri)
    fs_path = uris.to_fs_path(uri)
    path = _relative(ls, fs_path) if fs_path else None
    if document.version is not None:  # open: the editor's copy
        text, disk = document.source, None
    else:
        if fs_path is None:
            raise ApplyError(f"{uri} is not open in the editor and is not a file")
        source = _read(ls, fs_path, uri)
        text, disk = source.text, source.data
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_DOCUMENT_BYTES:
        raise ApplyError(f"{path or uri} is too large to apply an edit to ({size:,} bytes; the limit is "
                         f"{MAX_DOCUMENT_BYTES:,})")
    if "\0" in text:
        raise ApplyError(f"{path or uri} is binary (it contains NUL bytes); only text documents can be edited")
    language = document.language_id if detect_language(path) == "text" and resolve_language(document.language_id) else None
    return Snapshot(uri, text, document.version, path, language, disk)


def check_unchanged(ls: EditApplyServer, snap: Snapshot) -> None:
    """Raise CommandFailed(stale_version) unless the document is still what `snap` read."""
    document = ls.workspace.get_text_document(snap.uri)
    name = snap.path or snap.uri
    if snap.version is not None:
        if document.version is None:
            raise errors.CommandFailed(errors.STALE, f"{name} was closed while the apply ran; nothing was applied")
        if document.version != snap.version:
            raise errors.CommandFailed(errors.STALE, f"{name} changed while the apply ran (version {snap.version} -> "
                                       f"{document.version}); nothing was applied: run it again")
        return
    if document.version is not None:
        raise errors.CommandFailed(errors.STALE, f"{name} was opened in the editor while the apply ran; nothing was "
                                   "applied: run it again")
    try:
        now = _read(ls, uris.to_fs_path(snap.uri), snap.uri).data
    except ApplyError as exc:
        raise errors.CommandFailed(errors.STALE, f"{exc}; nothing was applied") from None
    if now != snap.disk:
        raise errors.CommandFailed(errors.STALE, f"{name} changed on disk while the apply ran; nothing was applied: "
                                   "run it again")


def _read(ls: EditApplyServer, fs_path: str, uri: str):
    """The file behind `uri` (a `files.Source`): inside the workspace, a regular file, not too large."""
    if not in_workspace(ls, fs_path):
        folders = roots(ls)
        where = f"outside the workspace folders ({', '.join(folders)})" if folders else "not open, and the editor gave no workspace folder"
        raise ApplyError(f"{uri} is {where}: the server reads only files in the workspace, or documents open in the "
                         "editor")
    if not os.path.exists(fs_path):
        raise ApplyError(f"{uri} is not open in the editor and does not exist on disk")
    try:
        return read_source(fs_path, uri, max_bytes=MAX_DOCUMENT_BYTES)
    except InputTooLargeError:
        raise ApplyError(f"{uri} is too large to apply an edit to (over {MAX_DOCUMENT_BYTES:,} bytes)") from None


def roots(ls: EditApplyServer) -> list[str]:
    """The workspace folders (and the root the client gave), symlinks resolved."""
    found = [uris.to_fs_path(f.uri) for f in ls.workspace.folders.values()] + [ls.workspace.root_path]
    return list(dict.fromkeys(os.path.realpath(r) for r in found if r))


def workspace_relative(ls: EditApplyServer, fs_path: str) -> str | None:
    """`fs_path`, symlinks and `..` resolved, relative to the workspace folder it lies in; None
    when it lies in none."""
    real = os.path.realpath(fs_path)
    for root in roots(ls):
        if os.path.commonpath([real, root]) == root:
            return os.path.relpath(real, root)
    return None


def in_workspace(ls: EditApplyServer, fs_path: str) -> bool:
    return workspace_relative(ls, fs_path) is not None


def _relative(ls: EditApplyServer, fs_path: str) -> str:
    """The label of a document: its path in the workspace, else its file name."""
    return workspace_relative(ls, fs_path) or os.path.basename(fs_path)


def register(server: EditApplyServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: EditApplyServer, params: types.DidChangeTextDocumentParams) -> None:
        run = ls.applying.get(params.text_document.uri)
        if run is not None and not run.sending:
            run.changed_to = params.text_document.version
            run.task.cancel()

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: EditApplyServer, params: types.DidCloseTextDocumentParams) -> None:
        run = ls.applying.get(params.text_document.uri)
        if run is not None:
            run.closed = True
            run.task.cancel()
