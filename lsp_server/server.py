"""`editapply lsp`: the language server object, its state, and how a command runs.

One feature a module, each registering its handlers on the server `build_server` makes:

* documents.py: full text sync of open documents; the text a command works on (the document as
  the editor holds it, else the file on disk) and the check that it did not change meanwhile;
* apply.py: `editapply.apply`, `editapply.preview`, `editapply.applyMerged`;
* ask.py: `editapply.ask`; status.py: `editapply.status`;
* code_actions.py: `textDocument/codeAction` ("Apply this snippet to FILE");
* progress.py: work-done progress for model runs; engine.py: the local or remote engine;
* without pygls, unit-tested alone: textedits.py (minimal line edits), snippets.py (fenced
  blocks), settings.py (parsing), framing.py (the base protocol's headers, read defensively);
  arguments.py and errors.py: how commands check and fail;
* transport.py: stdio and TCP (loopback unless told otherwise, a token, one client), each
  message checked before pygls sees it.

State kept here: the settings (settings.py; `initialize` and `workspace/didChangeConfiguration`),
the engine client they select (created on first use, replaced when the engine settings change),
the documents an apply runs on (a second apply there is refused), and the running commands by
request id, so `$/cancelRequest` reaches them. The server never writes a file: every change goes
to the client as `workspace/applyEdit`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcRequestCancelled
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from engine.apply.errors import ApplyError
from engine.types import RequestError
from lsp_server import errors
from lsp_server.documents import ApplyRun
from lsp_server.engine import EngineFailed, EngineUnavailable, LocalEngine, RemoteEngine, make_engine
from lsp_server.settings import DEFAULTS, Settings, merged, parse

NAME = "editapply"
log = logging.getLogger(__name__)

Command = Callable[["EditApplyServer", dict], Awaitable[object]]


class EditApplyProtocol(LanguageServerProtocol):
    def _handle_cancel_notification(self, msg_id):
        # pygls 2.1 answers a cancelled workspace/executeCommand at once but lets the command's
        # own task run on (it cancels only the request's outer future): cancel the task too, so the
        # generation stops and the engine slot is freed.
        task = self._server.runs.get(msg_id)
        if task is not None:
            task.cancel()
        super()._handle_cancel_notification(msg_id)


class EditApplyServer(LanguageServer):
    def __init__(self, version: str):
        super().__init__(NAME, version, text_document_sync_kind=types.TextDocumentSyncKind.Full,
                         protocol_cls=EditApplyProtocol)
        self.settings: Settings = DEFAULTS
        self._raw_settings: dict | None = None
        self._engine: LocalEngine | RemoteEngine | None = None
        self.applying: dict[str, ApplyRun] = {}  # uri -> the apply running on it (documents.py)
        self.runs: dict[object, asyncio.Task] = {}  # request id -> the command's task

    def engine(self) -> LocalEngine | RemoteEngine:
        """The engine client the settings select (no connection or model load happens here)."""
        if self._engine is None:
            self._engine = make_engine(self.settings)
        return self._engine

    def configure(self, raw) -> None:
        """Take new raw settings: parse, report bad values, swap the engine if it changed."""
        self._raw_settings = merged(self._raw_settings, raw)
        settings, problems = parse(self._raw_settings)
        for problem in problems:
            self.show(problem, types.MessageType.Warning)
        if self._engine is not None and settings.engine_key() != self.settings.engine_key():
            old, self._engine = self._engine, None
            # Runs on the old engine end when it closes (a local one cancels what it runs).
            asyncio.ensure_future(old.close()).add_done_callback(_log_failure)
        self.settings = settings

    async def close_engine(self) -> None:
        if self._engine is not None:
            old, self._engine = self._engine, None
            await old.close()

    def show(self, message: str, kind: types.MessageType = types.MessageType.Error) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=f"editapply: {message}"))

    def command(self, name: str):
        """Register `fn(ls, args)` as the workspace/executeCommand `name` (pygls' `command`, plus
        what every editapply command shares): one object argument, cancellable by
        `$/cancelRequest`, errors turned into one-line JSON-RPC errors (errors.py)."""
        def decorator(fn: Command) -> Command:
            async def run(ls: EditApplyServer, *arguments):
                args = arguments[0] if len(arguments) == 1 else {} if not arguments else None
                if not isinstance(args, dict):
                    raise JsonRpcInvalidParams(f"{name} takes one object argument, got "
                                               f"{len(arguments)} argument(s)" if len(arguments) != 1 else
                                               f"{name} takes one object argument, got {type(args).__name__}")
                msg_id = ls.protocol.msg_id
                ls.runs[msg_id] = asyncio.current_task()
                try:
                    return await fn(ls, args)
                except asyncio.CancelledError:
                    # Raised, not passed on: pygls would otherwise never answer the request.
                    raise JsonRpcRequestCancelled(f"{name} was cancelled") from None
                except JsonRpcException:
                    raise
                except (ApplyError, RequestError) as exc:
                    raise errors.CommandFailed(errors.BAD_INPUT, _one_line(exc)) from None
                # Said once, by the request's error (both editors show it; a window/showMessage
                # beside it made each failure appear two or three times).
                except EngineUnavailable as exc:
                    raise errors.CommandFailed(errors.ENGINE_UNAVAILABLE,
                                               f"{_one_line(exc)} (the next request tries again)") from None
                except EngineFailed as exc:
                    raise errors.CommandFailed(errors.ENGINE_FAILED, _one_line(exc)) from None
                finally:
                    ls.runs.pop(msg_id, None)

            super(EditApplyServer, self).command(name)(run)
            return fn

        return decorator


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _log_failure(future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("closing the previous engine failed: %s", future.exception())


def build_server() -> EditApplyServer:
    from importlib.metadata import PackageNotFoundError, version

    from lsp_server import apply, ask, code_actions, documents, status

    try:
        server = EditApplyServer(version(NAME))
    except PackageNotFoundError:  # running from a source tree that was never installed
        server = EditApplyServer("dev")

    @server.feature(types.INITIALIZE)
    def initialize(ls: EditApplyServer, params: types.InitializeParams) -> None:
        ls.configure(params.initialization_options)

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: EditApplyServer, params: None) -> None:
        await ls.close_engine()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: EditApplyServer, params: types.DidChangeConfigurationParams) -> None:
        ls.configure(params.settings)

    for feature in (documents, apply, ask, status, code_actions):
        feature.register(server)
    return server


TOKEN_ENV = "EDITAPPLY_LSP_TOKEN"
DEFAULT_HOST = "127.0.0.1"


def start(tcp: str | None = None, log_file: str | None = None, log_level: str = "warning",
          token_file: str | None = None) -> int:
    """Run the server on stdio (the default) or on TCP at `tcp` ("[HOST:]PORT"); returns an exit code.

    On stdio, stdout is the protocol channel: anything else printing to it would corrupt the
    stream, so `sys.stdout` is pointed at stderr once the transport holds the real one. Logs go
    to stderr or `log_file`. TCP binds 127.0.0.1 unless HOST says otherwise, and another address
    needs a token (transport.py says why and how it is checked)."""
    import sys

    from engine.hosts import is_loopback
    from lsp_server import transport

    logging.basicConfig(filename=log_file, level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if tcp is None:
        stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
        sys.stdout = sys.stderr
        transport.serve_stdio(build_server(), stdin, stdout)
        return 0
    try:
        host, port = parse_tcp(tcp)
        token = read_token(token_file)
    except ValueError as exc:
        print(f"editapply: {exc}", file=sys.stderr)
        return 2
    local = is_loopback(host)
    if not local and token is None:
        print(f"editapply: refusing to serve the language server on {host}: whoever reaches it can read and apply "
              f"edits to the files of your workspace. Set a token ({TOKEN_ENV} or --token-file; clients send it as "
              f"initializationOptions.token), or bind {DEFAULT_HOST}", file=sys.stderr)
        return 2
    if token is None:
        print(f"editapply: warning: the language server on {host}:{port} has no token: any local user can connect and "
              f"read the files of your workspace through it (set {TOKEN_ENV} or --token-file)", file=sys.stderr)
    elif not local:
        print(f"editapply: warning: serving the language server on {host}: the connection is not encrypted (the token "
              "and your files cross the network in clear); prefer an SSH tunnel to 127.0.0.1", file=sys.stderr)

    def listening(address) -> None:
        print(f"editapply: language server listening on {address[0]}:{address[1]} "
              f"({'token required' if token else 'no token'}; one client)", file=sys.stderr, flush=True)

    transport.serve_tcp(build_server(), host, port, token, on_listening=listening)
    return 0


def parse_tcp(spec: str) -> tuple[str, int]:
    """"PORT", "HOST:PORT" or "[V6]:PORT" -> (host, port); ValueError with the reason."""
    host, _, port = spec.rpartition(":")
    host = host.removeprefix("[").removesuffix("]") or DEFAULT_HOST
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--tcp wants [HOST:]PORT, got {spec!r}")
    return host, int(port)


def read_token(token_file: str | None) -> str | None:
    """The TCP token: the first line of `token_file`, else EDITAPPLY_LSP_TOKEN, else None."""
    import os

    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read the token file {token_file}: {getattr(exc, 'strerror', None) or exc}") from None
        if not token:
            raise ValueError(f"the token file {token_file} is empty")
        return token
    return os.environ.get(TOKEN_ENV, "").strip() or None
