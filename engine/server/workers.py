"""The merge pool: the apply pipeline's deterministic work, off the engine's thread and the event loop.

`MergePool.run(plan_apply, req)` runs `prepare` (snippet parsing, the merge, validation) and, for
a request the model need not serve, the whole deterministic result (its diff included, and its
JSON body encoded: `Served`) in a worker process; a request for the model comes back as its
`Plan`. The server sends a `Served` body as it is: encoding a result through FastAPI costs the
event loop about half a millisecond, which at hundreds of applies a second is time the engine
thread waits for the GIL (bench/RESULTS.md, "Robustness, second round").

Why processes, not threads: the merge is pure Python, so in a thread it holds the GIL, which the
engine thread's step loop (scheduling, drafting, verifying) needs as well; a few merge threads
take most of it and every generation slows down (bench/RESULTS.md, "Robustness under load"). A
worker process has an interpreter of its own. It is spawned, never forked (the server holds an
engine thread and torch's thread pools), and runs at a lower CPU priority (`NICENESS`), so where
cores are few the engine's threads get the CPU first and merges take what is left.

Admission, per kind of work: at most `workers + settings.merge_queue` merges in flight (running
or waiting for a worker); one more is refused at once with 503 and Retry-After. The engine's own
queue is bounded apart (`ServerState.check_capacity`), so a flood of one kind of request cannot
fill the other's queue. `workers` 0 runs merges in the server's thread pool instead (no
processes: for platforms without them, and to measure what the processes buy).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context

from starlette.concurrency import run_in_threadpool

from engine.apply.pipeline import ApplyRequest, ApplyResult, Plan, apply_edit, prepare
from engine.server.errors import APIError

NICENESS = 10  # added to a worker's nice value: merges yield the CPU to generation
PARENT_POLL_S = 1.0  # how often a worker checks that the server is still alive
WARM_UP = ApplyRequest("x = 1\n", "x = 2\n", path="warm_up.py", mode="deterministic")


@dataclass(frozen=True)
class Served:
    """A request the merge pool answered whole: its result, and that result's JSON body."""

    result: ApplyResult
    body: bytes  # as FastAPI's JSONResponse would encode `result.as_dict()`


def plan_apply(req: ApplyRequest) -> Plan | Served:
    """In a worker: the request's plan when it needs the model, else its whole result."""
    plan = prepare(req)
    if plan.needs_model:
        return plan
    result = apply_edit(None, req, plan=plan)
    return Served(result, json.dumps(result.as_dict(), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode())


def _start_worker() -> None:
    os.nice(NICENESS)
    # A spawned worker holds both ends of its task pipe, so it never sees EOF when the server
    # dies without shutting the pool down (SIGKILL, a signal re-raised by uvicorn): it watches.
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    plan_apply(WARM_UP)  # imports and grammar loading, before the first real request


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(0)


class MergePool:
    def __init__(self, settings):
        self.settings = settings
        self.workers = settings.merge_workers
        self.in_flight = 0
        self._lock = threading.Lock()
        self._executor = self._start() if self.workers else None

    def _start(self) -> ProcessPoolExecutor:
        executor = ProcessPoolExecutor(self.workers, mp_context=get_context("spawn"), initializer=_start_worker)
        for _ in range(self.workers):  # spawn them all now, not on the first requests
            executor.submit(int)
        return executor

    @contextmanager
    def slot(self):
        """One merge in flight, or 503 + Retry-After when the pool and its queue are full."""
        limit = self.workers + self.settings.merge_queue
        with self._lock:
            if self.in_flight >= max(limit, 1):
                retry = self.settings.retry_after_s
                raise APIError(503, f"the merge pool is full: {self.in_flight} merges in flight (limit {limit}, "
                                    f"EDITAPPLY_MERGE_WORKERS + EDITAPPLY_MERGE_QUEUE); retry in {retry} s",
                               headers={"Retry-After": str(retry)})
            self.in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    async def run(self, fn, *args):
        """`fn(*args)` in a worker (a module-level function: it is pickled), after admission.

        A worker that died (killed, out of memory) breaks the whole executor: it is replaced and
        the call tried once more, so requests that merely came next are served; a request that
        kills its worker twice gets a 500."""
        with self.slot():
            if self._executor is None:
                return await run_in_threadpool(fn, *args)
            for attempt in range(2):
                executor = self._executor
                try:
                    return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)
                except BrokenProcessPool:
                    self._restart(executor)
            raise APIError(500, "the merge worker died twice on this request (out of memory?); it was not served")

    def _restart(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is broken:  # once, whichever request saw it first
                self._executor = self._start()
        broken.shutdown(wait=False, cancel_futures=True)

    def load(self) -> dict:
        return {"merge_workers": self.workers, "merges_in_flight": self.in_flight}

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
