"""The merge pool: the apply pipeline's deterministic work, off the engine's thread and the event loop.

`MergePool.run(plan_apply, req)` runs `prepare` (snippet parsing, the merge, validation) and, for
a request the model need not serve, the whole deterministic result (its diff included, and its
JSON body encoded: `Served`) in a worker process; a request for the model comes back as its
`Plan`.

Why processes, not threads: the merge is pure Python, so in a thread it holds the GIL, which the
engine thread's step loop (scheduling, drafting, verifying) needs as well; a few merge threads
take most of it and every generation slows down (bench/RESULTS.md, "Robustness under load"). A
worker process has an interpreter of its own. It is spawned, never forked (the server holds an
engine thread and torch's thread pools), and runs at a lower CPU priority (`NICENESS`), so where
cores are few the engine's threads get the CPU first and merges take what is left.

What stays in the server's interpreter is kept small, since every microsecond of it holds the GIL
the engine thread needs (bench/HISTORY.md, "Robustness, second round"): each worker is one
socket pair that the event loop reads and writes itself (asyncio streams, in the wire format of
`multiprocessing.Connection`, which the worker speaks), with no executor threads handing work
across (a `ProcessPoolExecutor` adds a manager thread and a feeder thread, and a wake-up write
per call that waited for the GIL about half a millisecond); and a `Served` result's JSON body is
encoded in the worker and sent as it is.

Two lanes, so a small merge never waits behind a long one: a request whose file or snippet has
more than `HEAVY_LINES` lines runs in the heavy lane (`HEAVY_WORKERS` processes), any other in the
light lane (`settings.merge_workers`). A 2,000-line text merges in under ~0.1 s on the 2-core CI
machine and a 50,000-line one takes up to ~1.2 s (bench/HISTORY.md, "Robustness, second round",
item 1), so a tiny apply beside a huge one waits at most for the light merges ahead of it.

Admission, per kind of work: at most `workers + settings.merge_queue` merges in flight (running
or waiting for a worker); one more is refused at once with 503 and Retry-After. The engine's own
queue is bounded apart (`ServerState.check_capacity`), so a flood of one kind of request cannot
fill the other's queue. A worker that dies (killed, out of memory) is replaced and its request
tried once more on another; a request that kills two gets a 500. A merge whose caller is
cancelled (its client hung up: `HTTPApply.prepare`) gets `ABANDON_S` to end, its answer dropped;
one that runs on is killed and its worker replaced, so no lane stays held for nobody.
`workers` 0 runs merges in the server's thread pool instead (no processes: for platforms without
them, and to measure what the processes buy).
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import socket
import struct
import threading
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from multiprocessing import get_context

from starlette.concurrency import run_in_threadpool

from engine.apply.pipeline import ApplyRequest, Plan, prepare
from engine.apply.run import apply_edit
from engine.apply.result import ApplyResult
from engine.server.errors import APIError

NICENESS = 10  # added to a worker's nice value: merges yield the CPU to generation
STOP_S = 5.0  # a closing pool waits this long for a worker to exit before killing it
HEAVY_LINES = 2_000  # a file or snippet longer than this merges in the heavy lane
HEAVY_WORKERS = 1
# A merge whose client left may finish this long (its worker is then reused), else it is killed:
# starting a worker costs ~2 s of a core, more than the rest of a merge at the input limits.
ABANDON_S = 2.0
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


def _serve(conn) -> None:
    """A worker: calls `(fn, args)` received on `conn` and sends back `(True, value)` or
    `(False, exception)`, until the server closes its end (or dies: the socket then ends too)."""
    os.nice(NICENESS)
    plan_apply(WARM_UP)  # imports and grammar loading, before the first real request
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = (True, fn(*args))
        except Exception as exc:  # noqa: BLE001 -- the server decides what it means
            reply = (False, exc)
        try:
            conn.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            conn.send((False, RuntimeError(f"the merge worker could not send its answer back: {exc}")))
        except OSError:
            return


class WorkerDied(Exception):
    pass


class _Worker:
    """One worker process and the event loop's end of its socket pair."""

    def __init__(self, ctx):
        ours, theirs = ctx.Pipe(duplex=True)  # a socket pair on POSIX
        self.process = ctx.Process(target=_serve, args=(theirs,), daemon=True, name="editapply-merge")
        self.process.start()
        theirs.close()
        self._conn = ours
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def call(self, fn, args):
        """`fn(*args)` in the worker; raises WorkerDied if it dies on it."""
        if self._streams is None:
            sock = socket.socket(fileno=os.dup(self._conn.fileno()))
            self._streams = await asyncio.open_unix_connection(sock=sock)
        reader, writer = self._streams
        payload = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            writer.write(struct.pack("!i", len(payload)) + payload)  # Connection's framing
            await writer.drain()
            size = struct.unpack("!i", await reader.readexactly(4))[0]
            if size == -1:  # over 2 GiB: a longer length follows
                size = struct.unpack("!Q", await reader.readexactly(8))[0]
            ok, value = pickle.loads(await reader.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            raise WorkerDied(str(exc)) from None
        if not ok:
            raise value
        return value

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
        self._conn.close()  # the worker sees EOF and exits

    def stop(self, wait_s: float = STOP_S) -> None:
        """Close, give the worker `wait_s` to exit, then kill it (0: at once)."""
        self.close()
        self.process.join(wait_s)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(STOP_S)


class _Lane:
    """Worker processes for one weight of merge, and the queue of the idle ones."""

    def __init__(self, ctx, count: int):
        self._ctx = ctx
        self.workers: list[_Worker] = [_Worker(ctx) for _ in range(count)]  # all spawned now
        self._idle: asyncio.Queue | None = None

    async def call(self, fn, args):
        if self._idle is None:  # made in the event loop that runs the merges
            self._idle = asyncio.Queue()
            for worker in self.workers:
                self._idle.put_nowait(worker)
        for _ in range(2):
            worker = await self._idle.get()
            exchange = asyncio.ensure_future(worker.call(fn, args))
            try:
                return await asyncio.shield(exchange)
            except WorkerDied:
                worker = self._replace(worker)
            except asyncio.CancelledError:
                asyncio.ensure_future(self._abandon(worker, exchange))
                worker = None
                raise
            finally:
                if worker is not None:
                    self._idle.put_nowait(worker)
        raise APIError(500, "the merge worker died twice on this request (out of memory?); it was not served")

    async def _abandon(self, worker: _Worker, exchange: asyncio.Future) -> None:
        """A merge nobody waits for: the worker is back when it answers within `ABANDON_S` (its
        answer dropped), else killed and replaced."""
        try:
            await asyncio.wait_for(exchange, ABANDON_S)
        except BaseException:  # noqa: BLE001 -- late, dead or failed: a fresh worker either way
            worker = self._replace(worker, wait_s=0)
        self._idle.put_nowait(worker)

    def _replace(self, dead: _Worker, wait_s: float = STOP_S) -> _Worker:
        fresh = _Worker(self._ctx)  # in the lane before the dead one goes: a lane always lists live workers
        self.workers = [fresh if w is dead else w for w in self.workers]
        dead.close()
        # Reaped apart (waitpid holds no GIL).
        threading.Thread(target=dead.stop, args=(wait_s,), daemon=True, name="editapply-merge-reaper").start()
        return fresh

    def close(self) -> None:
        for worker in self.workers:
            with suppress(Exception):
                worker.stop()


class MergePool:
    def __init__(self, settings):
        self.settings = settings
        self.workers = settings.merge_workers
        self.in_flight = 0
        self._lock = threading.Lock()
        ctx = get_context("spawn")
        self.light = _Lane(ctx, self.workers)
        self.heavy = _Lane(ctx, HEAVY_WORKERS if self.workers else 0)

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

    async def run(self, fn, req: ApplyRequest):
        """`fn(req)` in a worker of the request's lane (`fn` is module-level: it is pickled), after admission."""
        with self.slot():
            if not self.workers:
                return await run_in_threadpool(fn, req)
            return await self.lane(req).call(fn, (req,))

    def lane(self, req: ApplyRequest) -> _Lane:
        texts = (req.initial_code, req.edit_snippet or "")
        return self.heavy if any(text.count("\n") > HEAVY_LINES for text in texts) else self.light

    def load(self) -> dict:
        return {"merge_workers": len(self.light.workers) + len(self.heavy.workers), "merges_in_flight": self.in_flight}

    def close(self) -> None:
        self.light.close()
        self.heavy.close()
