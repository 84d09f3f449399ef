"""`editapply lsp` against a hostile client (issue 31, items 2, 4, 5): the real server process.

* Garbage on stdin (random bytes, a header without Content-Length, a Content-Length shorter than
  the body or of a terabyte, JSON that does not parse or is no message): the JSON-RPC error for
  it, then the next request is answered; a huge Content-Length is never buffered (the server's
  memory is checked, not its time). These write raw bytes to the process, which pytest-lsp's
  client cannot do.
* Files: a command may read only regular files inside the workspace folders (`/etc/os-release`,
  `..`, a symlink out, a FIFO, /dev/zero are refused at once); the code action never offers a
  file outside the workspace and names the resolved path. Driven through pytest-lsp.
* TCP: loopback by default with a warning, another address refused without a token, the token
  checked in `initialize`, one client at a time.

Engine: none (every request here is refused or served by the deterministic merge).
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import socket
import stat
import subprocess
import threading
from pathlib import Path

import psutil
import pytest
import pytest_lsp
from lsprotocol import types
from pygls import uris
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from tests.lsp.conftest import EDITAPPLY, Editor, fresh_editor, initialize, server_config, tree_first

TIMEOUT = 60  # seconds to wait for an answer before the test fails (never a figure asserted on)
STATUS = {"jsonrpc": "2.0", "method": "workspace/executeCommand",
          "params": {"command": "editapply.status", "arguments": [{}]}}


def frame(obj) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Frames:
    """Reads LSP frames from a byte stream in a thread; `next()` gives the next message."""

    def __init__(self, read):
        self.messages: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, args=(read,), daemon=True).start()

    def _run(self, read) -> None:
        buf = b""
        while data := _read_or_end(read):
            buf += data
            while (end := buf.find(b"\r\n\r\n")) >= 0:
                length = int(re.search(rb"Content-Length: (\d+)", buf[:end]).group(1))
                if len(buf) < end + 4 + length:
                    break
                self.messages.put(json.loads(buf[end + 4 : end + 4 + length]))
                buf = buf[end + 4 + length :]
        self.messages.put(None)

    def next(self) -> dict | None:
        return self.messages.get(timeout=TIMEOUT)

    def answer(self, msg_id) -> dict:
        """The response to `msg_id`; server-initiated messages (log, show) are skipped."""
        while (message := self.next()) is not None:
            if message.get("id") == msg_id and "method" not in message:
                return message
        raise AssertionError(f"the server closed the stream before answering {msg_id}")


def _read_or_end(read) -> bytes:
    try:
        return read(65536)
    except OSError:  # the test closed its end
        return b""


class StdioServer:
    def __init__(self, root: Path):
        self.proc = subprocess.Popen([EDITAPPLY, "lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env={**os.environ, **tree_first()})
        self.frames = Frames(lambda n: os.read(self.proc.stdout.fileno(), n))
        self.ids = 0
        self.send(frame({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                         "params": {"capabilities": {}, "rootUri": uris.from_fs_path(str(root))}}))
        assert "result" in self.frames.answer("init")
        self.send(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))

    def send(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def status(self) -> dict:
        self.ids += 1
        self.send(frame({**STATUS, "id": self.ids}))
        return self.frames.answer(self.ids)

    def errors_before_status(self) -> list[dict]:
        """Ask for the status; the id-null errors that came before its answer."""
        self.ids += 1
        self.send(frame({**STATUS, "id": self.ids}))
        errors = []
        while (message := self.frames.next()) is not None:
            if message.get("id") == self.ids and "method" not in message:
                assert "result" in message, message
                return errors
            if "error" in message:
                errors.append(message)
        raise AssertionError("the server closed the stream")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def stdio(tmp_path_factory):
    server = StdioServer(tmp_path_factory.mktemp("workspace"))
    yield server
    server.close()


# ---- item 5: garbage on stdin -----------------------------------------------------------------------

GARBAGE = {
    "random bytes": (random.Random(5).randbytes(4096), -32700),
    "a header without Content-Length": (b"Content-Type: application/json\r\n\r\n{}", -32700),
    "a Content-Length shorter than the body": (b'Content-Length: 10\r\n\r\n{"jsonrpc": "2.0", "method": "x"}', -32700),
    "a terabyte Content-Length": (b"Content-Length: 1000000000000\r\n\r\n{}", -32700),
    "invalid JSON": (frame(1)[:-1] + b"{", -32700),
    "JSON that is not UTF-8": (b"Content-Length: 4\r\n\r\n\"\xff\xfe\"", -32700),
    "deeply nested JSON": (frame(1).replace(b"1", b"[" * 100_000 + b"]" * 100_000).replace(b": 1\r", b": 200000\r"), -32700),
    "a batch": (frame([{"jsonrpc": "2.0", "id": 1, "method": "shutdown"}]), -32600),
    "a number": (frame(42), -32600),
    "no jsonrpc": (frame({"id": 5, "method": "shutdown"}), -32600),
    "an id that is an object": (frame({"jsonrpc": "2.0", "id": {"a": 1}, "method": "shutdown"}), -32600),
}


@pytest.mark.parametrize("name", GARBAGE)
def test_garbage_gets_its_json_rpc_error_and_the_server_answers_on(stdio, name):
    data, code = GARBAGE[name]
    stdio.send(data)
    errors = stdio.errors_before_status()
    assert errors and errors[0]["error"]["code"] == code, errors
    assert errors[0]["id"] in (None, 5)
    assert stdio.proc.poll() is None


def test_a_terabyte_content_length_is_never_buffered(stdio):
    """Item 5's MemoryError: 200 MB sent after the header leave the server's memory as it was
    (give or take 64 MB), and the request after them is answered."""
    rss = psutil.Process(stdio.proc.pid).memory_info().rss
    stdio.send(b"Content-Length: 1000000000000\r\n\r\n")
    for _ in range(200):
        stdio.send(b"\0" * 1_000_000)
    errors = stdio.errors_before_status()
    assert [e["error"]["code"] for e in errors] == [-32700]
    assert psutil.Process(stdio.proc.pid).memory_info().rss - rss < 64 * 2**20


def test_params_pygls_cannot_read_get_invalid_params_with_the_id(stdio):
    stdio.send(frame({"jsonrpc": "2.0", "id": "bad", "method": "textDocument/codeAction", "params": {"range": 1}}))
    assert stdio.frames.answer("bad")["error"]["code"] == -32602
    assert "result" in stdio.status()



NOTIFICATIONS = {
    "params that are a number": {"jsonrpc": "2.0", "method": "initialized", "params": 7},
    "no jsonrpc": {"method": "initialized", "params": {}},
    "params pygls cannot read": {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": 1}},
}


@pytest.mark.parametrize("name", NOTIFICATIONS)
def test_a_bad_notification_is_dropped_without_an_answer(stdio, name):
    """JSON-RPC 2.0 section 4.1: a notification is never answered, a bad one neither (Neovim's
    client stops at a response whose id is null)."""
    stdio.send(frame(NOTIFICATIONS[name]))
    assert stdio.errors_before_status() == []


def test_null_params_are_no_params(stdio):
    """Neovim sends `params: null` for the methods LSP gives no params (shutdown, exit)."""
    stdio.send(frame({"jsonrpc": "2.0", "method": "$/setTrace", "params": None}))
    assert stdio.errors_before_status() == []
    stdio.send(frame({"jsonrpc": "2.0", "id": "null-params", "method": "workspace/executeCommand",
                      "params": None}))
    assert stdio.frames.answer("null-params")["error"]["code"] == -32602

# ---- items 2 and 4: what a command may read ---------------------------------------------------------

@pytest_lsp.fixture(scope="module", config=server_config())
async def client(lsp_client: LanguageClient, tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    lsp_client.root = base / "ws"
    (lsp_client.root / "src").mkdir(parents=True)
    (lsp_client.root / "src" / "app.py").write_text("x = 1\n")
    (base / "outside").mkdir()
    (base / "outside" / "victim.py").write_text("SECRET = 1\n")
    (lsp_client.root / "escape.py").symlink_to(base / "outside" / "victim.py")
    (lsp_client.root / "zero_link.py").symlink_to("/dev/zero")
    os.mkfifo(lsp_client.root / "fifo.py")
    try:  # /dev/zero's own device numbers, inside the workspace (needs root: skipped otherwise)
        os.mknod(lsp_client.root / "zero.py", stat.S_IFCHR | 0o644, os.makedev(1, 5))
    except OSError:
        pass
    await initialize(lsp_client, lsp_client.root, {"mode": "deterministic"})
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def editor(client: LanguageClient) -> Editor:
    return fresh_editor(client)


SNIPPET = "# ... existing code ...\nZZZ = 1\n"


async def preview_error(editor: Editor, uri: str) -> JsonRpcException:
    with pytest.raises(JsonRpcException) as info:
        await editor.execute("editapply.preview", {"uri": uri, "snippet": SNIPPET})
    assert info.value.data == {"reason": "bad_input"}
    return info.value


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("where", ["/etc/os-release", "ws/../outside/victim.py", "ws/escape.py"])
async def test_a_file_outside_the_workspace_is_refused(client: LanguageClient, editor: Editor, where):
    """The issue's `editapply.preview {uri: "file:///etc/os-release"}` returned the whole file;
    a `..` or a symlink out of the workspace is the same read."""
    path = where if where.startswith("/") else str(client.root.parent / where)
    err = await preview_error(editor, uris.from_fs_path(path))
    assert "outside the workspace folders" in err.message and "SECRET" not in err.message


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name, reason", [("fifo.py", "not a regular file (a named pipe)"),
                                          ("zero.py", "not a regular file (a character device)"),
                                          ("zero_link.py", "outside the workspace folders"),
                                          ("/dev/zero", "outside the workspace folders")])
async def test_a_special_file_is_refused_at_once(client: LanguageClient, editor: Editor, name, reason):
    """Item 4: a FIFO left the server answering nothing, /dev/zero grew it by ~400 MB/s."""
    path = client.root / name
    if name == "zero.py" and not path.exists():
        pytest.skip("making a character device needs root")
    err = await preview_error(editor, uris.from_fs_path(str(path)))
    assert reason in err.message
    status = await editor.execute("editapply.status", {})
    assert status["version"]


@pytest.mark.asyncio(loop_scope="module")
async def test_a_file_inside_the_workspace_is_read(client: LanguageClient, editor: Editor):
    result = await editor.execute("editapply.preview", {"uri": uris.from_fs_path(str(client.root / "src" / "app.py")),
                                                         "snippet": "x = 2\n"})
    assert result["merged"] == "x = 2\n" and result["diff"].startswith("--- a/src/app.py")


async def code_actions(client: LanguageClient, editor: Editor, chat: str) -> list[types.CodeAction]:
    uri = editor.open(client.root / "chat.md", chat, version=len(editor.docs) + 1, language="markdown")
    here = types.Range(start=types.Position(line=1, character=0), end=types.Position(line=1, character=0))
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=here, context=types.CodeActionContext(diagnostics=[])))
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
    return actions or []


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name", ["../outside/victim.py", "escape.py"])
async def test_the_code_action_never_offers_a_file_outside_the_workspace(client: LanguageClient, editor: Editor, name):
    """The issue's fence naming `../outside/victim.py` was offered, labelled "victim.py"."""
    actions = await code_actions(client, editor, f"```python {name}\nSECRET = 2\n```\n")
    assert [a for a in actions if "victim" in a.title or "escape" in a.title] == []
    assert all("outside" not in a.command.arguments[0]["uri"] for a in actions)


@pytest.mark.asyncio(loop_scope="module")
async def test_the_code_action_names_the_resolved_path(client: LanguageClient, editor: Editor):
    [action] = await code_actions(client, editor, "```python src/../src/app.py\nx = 3\n```\n")
    assert action.title == "Apply this snippet to src/app.py"
    assert action.command.arguments[0]["uri"] == uris.from_fs_path(str(client.root / "src" / "app.py"))


# ---- item 2: TCP ------------------------------------------------------------------------------------

def start_tcp(*args: str, token: str | None = None) -> tuple[subprocess.Popen, str, int]:
    env = {**os.environ, **tree_first()}
    env.pop("EDITAPPLY_LSP_TOKEN", None)
    if token is not None:
        env["EDITAPPLY_LSP_TOKEN"] = token
    proc = subprocess.Popen([EDITAPPLY, "lsp", "--tcp", *args], stderr=subprocess.PIPE, env=env, text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if match := re.search(r"listening on (\S+):(\d+)", line):
            return proc, "".join(seen), int(match.group(2))
    proc.wait(TIMEOUT)
    return proc, "".join(seen), 0


def connect(port: int) -> tuple[socket.socket, Frames]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    return sock, Frames(sock.recv)


def hang_up(sock: socket.socket) -> None:
    """Close the connection (shutdown first: a plain close does not end it while another thread
    is in recv on it)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # the server closed it already
        pass
    sock.close()


def initialize_over(sock: socket.socket, frames: Frames, options: dict | None) -> dict:
    sock.sendall(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                        "params": {"capabilities": {}, "initializationOptions": options}}))
    return frames.answer(1)


def test_tcp_refuses_another_address_without_a_token():
    proc, err, _ = start_tcp("0.0.0.0:0")
    assert proc.returncode == 2 and "refusing to serve the language server on 0.0.0.0" in err


def test_tcp_binds_loopback_by_default_warns_and_serves_one_client():
    proc, err, port = start_tcp("0")
    try:
        assert "warning" in err and "no token" in err and "listening on 127.0.0.1" in err
        sock, frames = connect(port)
        assert "result" in initialize_over(sock, frames, None)
        second, second_frames = connect(port)
        assert second_frames.next() is None  # closed at once: the session stays the first client's
        hang_up(second)
        hang_up(sock)
        assert proc.wait(TIMEOUT) == 0  # the session ended: so does the server, as on stdio
    finally:
        proc.kill()


def test_tcp_with_a_token_refuses_a_client_without_it_and_serves_one_with_it():
    proc, err, port = start_tcp("0.0.0.0:0", token="s3cret")
    try:
        assert "not encrypted" in err and "token required" in err
        for options in (None, {"token": "guess"}, {"mode": "auto"}):
            sock, frames = connect(port)
            answer = initialize_over(sock, frames, options)
            assert answer["error"]["data"] == {"reason": "unauthorized"}, answer
            assert frames.next() is None  # and the connection is closed
            hang_up(sock)
        sock, frames = connect(port)
        sock.sendall(frame({**STATUS, "id": 7}))  # anything before initialize: refused, closed
        assert frames.answer(7)["error"]["data"] == {"reason": "unauthorized"}
        hang_up(sock)
        sock, frames = connect(port)
        assert "result" in initialize_over(sock, frames, {"token": "s3cret", "mode": "deterministic"})
        sock.sendall(frame({**STATUS, "id": 2}))
        status = frames.answer(2)["result"]
        assert status["settings"]["mode"] == "deterministic" and "s3cret" not in json.dumps(status)
        hang_up(sock)
    finally:
        proc.kill()
