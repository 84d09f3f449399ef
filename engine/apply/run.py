"""Running an apply: the one runner the HTTP server, the language server and the CLI share.

    run = ApplyStream(engine, req, plan=plan, job=job)
    async for item in run:        # `Progress` while the model writes, then the `ApplyResult`
        ...
    run.cancel()                  # from anywhere on the loop: the generation stops, iteration raises ApplyCancelled

    result = apply_edit(engine, req)   # the same, synchronously (scripts, tests, the merge workers)

It runs over the Engine protocol (engine/service.py): the request is submitted with the running
loop and read with `astream`; leaving the iteration early (an exception, `aclose`, the task
cancelled) cancels the handle, so the engine frees its KV blocks at its next step. The CPU-bound
parts (the merge in `prepare`, `build_job`'s context check, ranking, validating the model's file)
run in a worker thread, so the loop keeps serving. `engine` may be None when no model is wanted.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

from engine.apply.errors import ApplyCancelled
from engine.apply.model_path import ModelJob, build_job
from engine.apply.pipeline import ApplyRequest, Plan, model_result, model_writes, prepare, settle
from engine.apply.result import ApplyResult, Progress
from engine.types import GenerationStats


class ApplyStream:
    """One apply on an event loop; iterate it once."""

    def __init__(self, engine, req: ApplyRequest, *, plan: Plan | None = None, job: ModelJob | None = None):
        self.engine, self.req, self.plan, self.job = engine, req, plan, job
        self.handle = None
        self.cancelled = False

    def cancel(self) -> None:
        """Stop the generation, also before its first token (the iteration raises ApplyCancelled)."""
        self.cancelled = True
        if self.handle is not None:
            self.engine.cancel(self.handle)

    def __aiter__(self) -> AsyncIterator[Progress | ApplyResult]:
        return self._run()

    async def _run(self) -> AsyncIterator[Progress | ApplyResult]:
        req, engine = self.req, self.engine
        plan = self.plan or await asyncio.to_thread(prepare, req)
        if not model_writes(plan, engine):
            yield await asyncio.to_thread(settle, plan, engine)
            return
        job = self.job or await asyncio.to_thread(build_job, plan, engine.tokenizer, engine.cfg.max_model_len)
        if self.cancelled:
            raise ApplyCancelled("the apply was cancelled")
        started = time.perf_counter()  # a caller may have loaded the model since `prepare`
        tokens: list[int] = []
        stats, finish_reason = GenerationStats(prompt_tokens=job.prompt_tokens), None
        self.handle = engine.submit(job.request, loop=asyncio.get_running_loop())
        async with aclosing(engine.astream(self.handle)) as events:
            async for event in events:
                tokens.extend(event.token_ids)
                stats, finish_reason = event.stats, event.finish_reason
                if event.error or finish_reason == "error":
                    raise RuntimeError(f"the engine failed: {event.error or 'unknown error'}")
                if finish_reason == "cancelled" or self.cancelled:
                    raise ApplyCancelled("the generation was cancelled")
                yield Progress(event.text, stats.generated_tokens, stats.steps, stats.tokens_per_second,
                               stats.accepted_per_step, stats)
        answer = engine.tokenizer.decode(tokens)
        yield await asyncio.to_thread(model_result, plan, job, answer, stats, finish_reason, started, engine)


async def run_apply(run: ApplyStream, on_progress: Callable[[Progress], None] | None = None) -> ApplyResult:
    """`run`'s result, `on_progress` seeing each increment."""
    async with aclosing(aiter(run)) as items:
        async for item in items:
            if isinstance(item, ApplyResult):
                return item
            if on_progress is not None:
                on_progress(item)
    raise RuntimeError("the apply ended without a result")  # pragma: no cover


def apply_edit(engine, req: ApplyRequest, on_progress: Callable[[Progress], None] | None = None,
               cancel_event: threading.Event | None = None, *, plan: Plan | None = None,
               job: ModelJob | None = None) -> ApplyResult:
    """`ApplyStream` synchronously. `on_progress` sees every increment; `cancel_event` set (from any
    thread) cancels the generation and raises ApplyCancelled. A request the model does not write
    needs no event loop."""
    plan = plan or prepare(req)
    if not model_writes(plan, engine):
        return settle(plan, engine)
    run = ApplyStream(engine, req, plan=plan, job=job)

    def progress(p: Progress) -> None:
        if cancel_event is not None and cancel_event.is_set():
            raise ApplyCancelled("the apply was cancelled")
        if on_progress is not None:
            on_progress(p)

    return asyncio.run(run_apply(run, progress))
