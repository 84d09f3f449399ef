"""`POST /v1/apply`: the apply pipeline (`engine/apply/pipeline.py`) over HTTP.

The body is `ApplyRequest`'s fields plus `stream`; the answer is `ApplyResponse` (events.py,
`ApplyResult.as_dict()`). With `stream: true` the answer is SSE: `{"type": "delta", "text": ...}`
events carry the model's raw output as it is written (the model path only; the raw output may be
a region of the file and ends with the closing fence), then one `{"type": "result", ...}` event
with the whole result, then `[DONE]`.

`HTTPApply` plans the request before any stream starts: the cheap limits (`engine/apply/limits.py`:
sizes, and in model mode a file the context cannot hold), then `prepare` in the merge pool
(workers.py: a worker process; a request the model need not serve is answered there whole), then
`build_job` (the exact context check). Bad input fails there. The model path then runs as an
`ApplyStream` (engine/apply/run.py) on the event loop. A client that hangs up cancels it, so the
request's KV is freed at the next engine step.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing

from fastapi import APIRouter
from fastapi import Request as HTTPRequest
from fastapi.responses import Response

from engine.apply import limits
from engine.apply.errors import ApplyCancelled, ApplyError, ContextTooLongError, InputTooLargeError
from engine.apply.model_path import build_job
from engine.apply.pipeline import ApplyRequest, Plan
from engine.apply.result import ApplyResult
from engine.apply.run import ApplyStream
from engine.apply.text import BOM
from engine.types import EngineUnavailable, RequestError
from engine.server.events import APPLY_EVENTS, ApplyResponse
from engine.server.errors import APIError, shutting_down, unavailable
from engine.server.generation import SSEResponse, sse_events, watch_disconnect
from engine.server.schemas import ERRORS, ApplyRequestBody, streamed
from engine.server.state import ServerState, get_state, offload
from engine.server.workers import Served, plan_apply

ROUTE = "/v1/apply"
router = APIRouter()

STREAM_EVENTS = ('{"type": "delta", "text"} with the model\'s raw output as it is written (the model path only), then '
                 '{"type": "result", merged_code, diff, validation, usage, stats, readings, hunks, candidate}; an error after the '
                 'stream started is {"type": "error", "error": {...}}')


class HTTPApply:
    def __init__(self, state: ServerState, req: ApplyRequest, route: str = ROUTE):
        self.state = state
        self.req = req
        self.route = route
        self.stream: ApplyStream | None = None
        self.plan = self.job = None
        self.result: ApplyResult | None = None
        self.body: bytes | None = None  # the result's JSON, when the merge pool served it whole
        self.disconnected = False
        self.stopped = False  # by the server's shutdown (ServerState.drain)

    def stop_for_shutdown(self) -> None:
        self.stopped = True
        self.cancel()

    async def prepare(self, http: HTTPRequest) -> None:
        """Check the input and the context (raises APIError); no generation yet. A request the
        model need not serve is answered here (`result`). A client that hangs up during the merge
        stops it (`disconnected` is then set, and nothing else)."""
        try:
            self.state.check_open()
            limits.check(self.req)  # sizes: before a worker is asked (prepare checks again, for other callers)
            if self.req.mode == "model":
                await offload(limits.check_context, self.req, self.state.tokenizer, self.state.context_limit)
            outcome = await self._merge(http)
            if outcome is None:
                return
            if isinstance(outcome, Served):
                self.result, self.body = outcome.result, outcome.body
                return
            self.plan = outcome
            self.state.check_capacity()
            self.job = await offload(self._build_job)
        except (ApplyError, RequestError) as exc:
            raise apply_error(exc) from None

    async def _merge(self, http: HTTPRequest) -> Plan | Served | None:
        """The merge pool's answer, or None when the client hung up first (the merge is cancelled)."""
        merge = asyncio.ensure_future(self.state.merges.run(plan_apply, self.req))

        def left() -> None:
            self.disconnected = True
            merge.cancel()

        watcher = watch_disconnect(http, left)
        try:
            return await merge
        except asyncio.CancelledError:
            if self.disconnected and merge.cancelled():
                return None
            raise
        finally:
            watcher.cancel()

    def _build_job(self):
        limits.check_context(self.req, self.state.tokenizer, self.state.context_limit)
        return build_job(self.plan, self.state.tokenizer, self.state.context_limit,
                         default_cap=self.state.settings.max_tokens_limit or None)

    async def deltas(self) -> AsyncIterator[str]:
        """The model's output as it is written; `result` is set when this ends."""
        if self.result is not None:  # served by the merge pool
            self.record()
            return
        self.stream = ApplyStream(self.state.service, self.req, plan=self.plan, job=self.job)
        self.state.running.add(self)
        try:
            async with aclosing(aiter(self.stream)) as items:
                async for item in items:
                    if isinstance(item, ApplyResult):
                        self.result = item
                    elif item.text:
                        yield item.text
        except (ApplyError, RequestError) as exc:
            raise apply_error(exc) from None
        except ApplyCancelled:
            if self.stopped:
                raise shutting_down(self.state.settings.retry_after_s) from None
            self.disconnected = True
        except EngineUnavailable as exc:
            raise unavailable(exc, self.state.settings.retry_after_s) from None
        except RuntimeError as exc:
            raise APIError(500, f"the apply failed: {exc}") from None
        finally:
            self.state.running.discard(self)
            if self.result is None:
                self.cancel()
            self.record()

    async def run(self, http: HTTPRequest) -> ApplyResult | None:
        """The result (non-streaming), cancelling the work if the client hangs up."""
        watcher = watch_disconnect(http, self.cancel)
        try:
            async for _ in self.deltas():
                pass
        finally:
            watcher.cancel()
        return self.result

    def cancel(self) -> None:
        self.disconnected = True
        if self.stream is not None:
            self.stream.cancel()

    def record(self) -> None:
        if self.result is None:
            reason = "shutdown" if self.stopped else "disconnect" if self.disconnected else "error"
            self.state.metrics.observe_generation(self.route, None, reason)
            return
        stats = self.result.stats
        self.state.metrics.observe_generation(self.route, self.result.engine_stats(), stats.finish_reason or stats.path)


def refused(result: ApplyResult) -> APIError:
    """A result that did not validate, for the routes that answer with a file only (chat's apply
    form, /v1/code/apply): 422 with the reasons, or the readings of an ambiguous snippet. Their
    clients take whatever file comes back, so a refused merge is never sent as one."""
    if result.readings:
        readings = "; ".join(f"reading {n}: {r.label}" for n, r in enumerate(result.readings, 1))
        return APIError(422, f"the snippet can be read {len(result.readings)} ways and none was chosen ({readings}); "
                             f"POST {ROUTE} with `reading` takes one", code="ambiguous_snippet", param="edit_snippet")
    reasons = "; ".join(p.reason for p in result.validation.problems if p.severity == "error")
    if result.candidate is not None:
        reasons += "; the deterministic merge validates, though the model did not confirm it: mode deterministic returns it"
    return APIError(422, f"the merge failed validation, so no file is returned: {reasons}", code="validation_failed",
                    param="edit_snippet")


def apply_error(exc: Exception) -> APIError:
    if isinstance(exc, ContextTooLongError):
        return APIError(400, str(exc), code="context_length_exceeded", param="initial_code")
    if isinstance(exc, InputTooLargeError):
        return APIError(413, str(exc), code="input_too_large", param=exc.param)
    if isinstance(exc, RequestError):
        return APIError(400, str(exc), code=exc.code)
    name = type(exc).__name__.removesuffix("Error")
    code = "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_") or "invalid_request"
    return APIError(400, str(exc), code=code if code != "apply" else "invalid_request")


def build_request(body: ApplyRequestBody, state: ServerState) -> ApplyRequest:
    state.check_tokens_limit(body.max_tokens)
    try:
        snippet = body.edit_snippet.removeprefix(BOM) if body.edit_snippet else body.edit_snippet
        return ApplyRequest(initial_code=body.initial_code, edit_snippet=snippet, instruction=body.instruction,
                            language=body.language, path=body.path, mode=body.mode, prompt_form=body.prompt_form,
                            max_tokens=body.max_tokens, use_prediction=body.use_prediction, reading=body.reading)
    except ApplyError as exc:
        raise apply_error(exc) from None


@router.post(ROUTE, responses={**ERRORS, **streamed(STREAM_EVENTS, APPLY_EVENTS, ApplyResponse)}, summary="Merge an edit snippet into a file")
async def apply(body: ApplyRequestBody, http: HTTPRequest):
    state = get_state(http)
    state.check_model(body.model)
    run = HTTPApply(state, build_request(body, state))
    await run.prepare(http)
    if run.disconnected:
        run.record()
        return None  # nobody is listening
    if run.body is not None and not body.stream:  # served by the merge pool, encoded there
        run.record()
        return Response(run.body, media_type="application/json")
    if not body.stream:
        result = await run.run(http)
        return result.as_dict() if result is not None else None  # None: nobody is listening
    return SSEResponse(_events(run))


def _events(run: HTTPApply):
    return sse_events(run.deltas(), lambda text: {"type": "delta", "text": text},
                      lambda: [{"type": "result", **run.result.as_dict()}] if run.result is not None else [],
                      lambda exc: {"type": "error", **exc.body()})
