"""Work-done progress for a model run: `window/workDoneProgress/create`, then `$/progress`
begin / report / end, and the client's cancel button (`window/workDoneProgress/cancel`).

    async with ModelProgress(ls, "editapply: apply app.py") as progress:
        result = await engine.apply(req, plan, progress.report, progress.status)
        progress.done(summary(result))

Reports say what the engine does: "120/590 tokens · 61.8 tok/s · 15.2 tokens/step" (tokens so
far of the run's cap, decode speed, tokens committed per verify step), with a percentage of the
cap. A remote engine's stream carries text only, so its reports count characters until the
result brings the figures. Reports are sent at most every `REPORT_INTERVAL_S`: a GPU commits a
step every millisecond, and an editor needs no more than a few updates a second. An `ask` run
streams its answer: each report's message is the figures line, a newline, and the answer so far.

Cancel: pygls cancels its future for the token; `ModelProgress` then cancels the command's task,
and the engine client stops the generation (engine.py). A client without work-done progress
support gets no progress, and can still cancel with `$/cancelRequest`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_server.engine import RunProgress

if TYPE_CHECKING:
    from lsp_server.server import EditApplyServer

REPORT_INTERVAL_S = 0.1


def figures(tokens: int | None, tokens_per_second: float | None, accepted_per_step: float | None,
            max_tokens: int | None = None) -> str:
    """'120/590 tokens · 61.8 tok/s · 15.2 tokens/step'."""
    cap = f"/{max_tokens}" if max_tokens else ""
    return f"{tokens or 0}{cap} tokens · {tokens_per_second or 0:.1f} tok/s · {accepted_per_step or 0:.1f} tokens/step"


def run_line(p: RunProgress) -> str:
    if p.tokens is None:
        return f"{len(p.text):,} characters received"
    return figures(p.tokens, p.tokens_per_second, p.accepted_per_step, p.max_tokens)


class ModelProgress:
    def __init__(self, ls: EditApplyServer, title: str, stream_text: bool = False):
        self.ls, self.title, self.stream_text = ls, title, stream_text
        self.token: str | None = None
        self.final = "cancelled"
        self._last = 0.0

    async def __aenter__(self) -> "ModelProgress":
        capabilities = self.ls.client_capabilities.window
        if not (capabilities and capabilities.work_done_progress):
            return self
        token = f"editapply-{uuid.uuid4().hex}"
        try:
            await asyncio.shield(self.ls.work_done_progress.create_async(token))  # see apply.send_edit
        except JsonRpcException:  # the client refused the token: run without progress
            return self
        self.token = token
        task = asyncio.current_task()
        self.ls.work_done_progress.tokens[token].add_done_callback(lambda f: f.cancelled() and task.cancel())
        self.ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(
            title=self.title, cancellable=True, message="starting", percentage=0))
        return self

    def status(self, message: str) -> None:
        """A stage before tokens flow ('loading qwen2.5-coder-0.5b', 'prefilling 900 prompt tokens')."""
        if self.token is not None:
            self.ls.work_done_progress.report(self.token, types.WorkDoneProgressReport(message=message))

    def report(self, p: RunProgress) -> None:
        now = time.monotonic()
        if self.token is None or now - self._last < REPORT_INTERVAL_S:
            return
        self._last = now
        message = run_line(p) + (f"\n{p.text}" if self.stream_text else "")
        percentage = min(100, int(100 * p.tokens / p.max_tokens)) if p.tokens is not None and p.max_tokens else None
        self.ls.work_done_progress.report(self.token, types.WorkDoneProgressReport(message=message,
                                                                                   percentage=percentage))

    def done(self, message: str) -> None:
        self.final = message

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if self.token is None:
            return
        if exc_type is not None and not issubclass(exc_type, asyncio.CancelledError):
            self.final = "failed"  # why is the request's error
        self.ls.work_done_progress.end(self.token, types.WorkDoneProgressEnd(message=self.final))
        self.ls.work_done_progress.tokens.pop(self.token, None)
