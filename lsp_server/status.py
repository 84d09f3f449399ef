"""`editapply.status {}`: what the server runs on, for a client's health check.

Returns `{version, settings, engine}`: the settings in use (the API key left out), and the
engine's state -- local: the model, whether it is installed (a pulled preset, an existing
folder) and loaded, and once loaded the engine's load (waiting and running requests, free KV
blocks, steps taken), and with a `vllmUrl` whether that vLLM server answers (`vllm: {url,
reachable, error?}`); remote: the server's `/health`, or
`{reachable: false, error}` when nothing answers (a status check must not fail for that).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from lsp_server.arguments import parse_args
from lsp_server.engine import EngineUnavailable

if TYPE_CHECKING:
    from lsp_server.server import EditApplyServer

STATUS = "editapply.status"


def register(server: EditApplyServer) -> None:
    @server.command(STATUS)
    async def status(ls: EditApplyServer, args: dict) -> dict:
        parse_args(STATUS, args, {}, ())
        settings = {k: v for k, v in dataclasses.asdict(ls.settings).items() if k != "api_key"}
        engine = ls.engine()
        try:
            state = {"reachable": True, **await engine.status()}
        except EngineUnavailable as exc:
            state = {"reachable": False, "error": str(exc)}
        return {"version": ls.version, "settings": settings, "engine": state}
