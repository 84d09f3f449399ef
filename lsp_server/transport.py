"""How the language server talks: stdio or TCP, through `framing.Framer`, each message checked
before pygls sees it (pygls' own loop trusts the framing and the JSON; framing.py says how that
failed).

What a client gets for what it sends (JSON-RPC 2.0, section 5.1):

* a framing fault (garbage, a header without Content-Length, a message over
  `MAX_MESSAGE_BYTES`) or a body that is not JSON: `-32700` Parse error, id null; reading goes on
  at the next message;
* JSON that is not one request, notification or response object (a batch, which LSP does not
  have; a wrong `jsonrpc`; an id that is neither a number nor a string; params that are neither
  structured nor null): `-32600` Invalid Request, with the id when it is usable;
* params pygls cannot read for the method: `-32602` Invalid params, with the request's id.

A notification (a method, no id) is never answered (section 4.1): a bad one is logged and
dropped. `params: null` passes: clients send it for the methods whose params are `void` in LSP
(Neovim's `shutdown` and `exit`).

TCP (`editapply lsp --tcp [HOST:]PORT`) is for one client at a time: a second connection is
closed at once, so nobody can take over the session. The server reads any file in the workspace
for whoever talks to it, so `start_tcp` binds 127.0.0.1 unless told otherwise and refuses another
address without a token. With a token (`EDITAPPLY_LSP_TOKEN` or `--token-file`), a connection's
first message must be `initialize` carrying it as `initializationOptions.token` (compared in
constant time), within `AUTH_TIMEOUT_S`; anything else gets an error and the connection is
closed, and the server waits for the next one. The session that did authenticate ends the
server when it closes, as on stdio.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import threading

from lsprotocol.types import ErrorCodes, LSPErrorCodes
from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter

from lsp_server.framing import Framer, FramingError

log = logging.getLogger(__name__)

# A didOpen carries a whole document, and JSON escapes can make 2 MiB of text six times longer.
MAX_MESSAGE_BYTES = 32 * 2**20
READ_BYTES = 64 * 1024
AUTH_TIMEOUT_S = 10.0
UNAUTHORIZED = "unauthorized"


class Channel:
    """One connection's incoming side: bytes -> framed, checked messages -> pygls."""

    def __init__(self, server, token: str | None = None):
        self.server = server
        self.protocol = server.protocol
        self.framer = Framer(MAX_MESSAGE_BYTES)
        self.token = token
        self.authorized = token is None

    def receive(self, data: bytes) -> bool:
        """Handle the messages `data` completes; False when the connection must be closed (a
        client that has not authenticated sent something else)."""
        for item in self.framer.feed(data):
            if isinstance(item, FramingError):
                self.error(None, ErrorCodes.ParseError, f"Parse error: {item.message}")
                if not self.authorized:
                    return False
            elif not self.handle(item):
                return False
        return True

    def handle(self, body: bytes) -> bool:
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError; nesting too deep
            self.error(None, ErrorCodes.ParseError, f"Parse error: the message is not JSON ({_short(exc)})")
            return self.authorized
        problem, msg_id = check_message(obj)
        if problem is not None and _is_notification(obj):
            log.warning("dropped a notification: %s", problem)
            return self.authorized
        if problem is not None:
            self.error(msg_id, ErrorCodes.InvalidRequest, f"Invalid Request: {problem}")
            return self.authorized
        token = _take_token(obj)
        if not self.authorized:
            if obj.get("method") != "initialize" or not _same(token, self.token):
                self.error(msg_id, LSPErrorCodes.RequestFailed,
                           "this server needs a token: send it as initializationOptions.token in initialize",
                           {"reason": UNAUTHORIZED})
                log.warning("refused a client without the right token")
                return False
            self.authorized = True
        try:
            message = self.protocol.structure_message(obj)
        except JsonRpcException as exc:
            if "method" in obj and "id" in obj:
                self.error(msg_id, exc.code, f"Invalid params for {obj['method']}: {_short(exc.__cause__ or exc)}")
            else:
                log.warning("dropped a message pygls cannot read: %s", _short(exc.__cause__ or exc))
            return True
        self.protocol.handle_message(message)
        return True

    def error(self, msg_id, code: int, message: str, data: dict | None = None) -> None:
        error = {"code": int(code), "message": message, **({"data": data} if data else {})}
        self.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "error": error})


def check_message(obj) -> tuple[str | None, int | str | None]:
    """(what is wrong with `obj` as one JSON-RPC message, else None; its id when usable)."""
    if isinstance(obj, list):
        return "a batch (a JSON array); the Language Server Protocol sends one message at a time", None
    if not isinstance(obj, dict):
        return f"a JSON {type(obj).__name__}, not a message object", None
    msg_id = obj.get("id")
    if "id" in obj and (isinstance(msg_id, bool) or not isinstance(msg_id, (int, str, type(None)))):
        return f"id must be a number or a string, got {_short(msg_id)}", None
    if obj.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"', msg_id
    if "method" in obj:
        if not isinstance(obj["method"], str):
            return "method must be a string", msg_id
        if obj.get("params") is not None and not isinstance(obj["params"], (dict, list)):
            return "params must be an object, an array or null", msg_id
        return None, msg_id
    if "id" not in obj or ("result" not in obj and "error" not in obj):
        return "neither a request, a notification nor a response", msg_id
    return None, msg_id


def _is_notification(obj) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("method"), str) and "id" not in obj


def _take_token(obj: dict) -> object:
    """initialize's `initializationOptions.token`, removed (it is not a setting)."""
    params = obj.get("params")
    options = params.get("initializationOptions") if obj.get("method") == "initialize" and isinstance(params, dict) else None
    return options.pop("token", None) if isinstance(options, dict) else None


def _same(given: object, token: str | None) -> bool:
    return isinstance(given, str) and token is not None and hmac.compare_digest(given.encode(), token.encode())


def _short(value: object, limit: int = 120) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- stdio ----------------------------------------------------------------------------------------

def serve_stdio(server, stdin, stdout) -> None:
    """Serve one client on binary `stdin` / `stdout` until it exits or closes stdin."""
    server._stop_event = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=4)  # a client that floods waits
        threading.Thread(target=_pump, args=(stdin.fileno(), chunks, loop), name="lsp-stdin", daemon=True).start()
        channel = Channel(server)
        while (data := await chunks.get()) and not server._stop_event.is_set():
            channel.receive(data)

    _run(server, main())


def _pump(fd: int, chunks: asyncio.Queue, loop: asyncio.AbstractEventLoop) -> None:
    """Blocking reads of `fd` (stdin may be a pipe, a file or a terminal) into the loop's queue."""
    while True:
        try:
            data = os.read(fd, READ_BYTES)
        except OSError:
            data = b""
        try:
            asyncio.run_coroutine_threadsafe(chunks.put(data), loop).result()
        except RuntimeError:  # the loop is gone
            return
        if not data:
            return


def _run(server, main) -> None:
    try:
        asyncio.run(main)
    except BrokenPipeError:
        log.error("the client closed the connection; shutting down")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()


# ---- TCP ------------------------------------------------------------------------------------------

def serve_tcp(server, host: str, port: int, token: str | None, on_listening=None) -> None:
    """Serve one client at a time on HOST:PORT until an authorized session ends."""
    server._stop_event = threading.Event()

    async def main() -> None:
        session_over = asyncio.Event()
        busy = False

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal busy
            if busy:
                log.warning("refused a second connection from %s: one client at a time", writer.get_extra_info("peername"))
                writer.close()
                return
            busy = True
            server.protocol.set_writer(writer)
            channel = Channel(server, token)
            try:
                while not server._stop_event.is_set():
                    read = reader.read(READ_BYTES)
                    data = await (read if channel.authorized else asyncio.wait_for(read, AUTH_TIMEOUT_S))
                    if not data or not channel.receive(data):
                        break
            except (asyncio.TimeoutError, ConnectionError):
                pass
            finally:
                writer.close()
                busy = False
                if channel.authorized:
                    session_over.set()

        listener = await asyncio.start_server(connection, host, port)
        if on_listening is not None:
            on_listening(listener.sockets[0].getsockname())
        async with listener:
            await session_over.wait()

    _run(server, main())
