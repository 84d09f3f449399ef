"""EngineProcess: the engine stepping in a process of its own, behind the same `Engine` protocol.

The HTTP server's event loop and the engine's step loop in one interpreter share its GIL: every
request parsed, routed and answered between two steps delays the next step, and chat streams slow
down beside a few hundred cheap applies a second though the CPU has room (bench/RESULTS.md, "Chat
beside applies, paired"). Here the engine runs `EngineService` in a spawned child; the parent
keeps only the tokenizer and the limits a request is checked against, so a request that can never
run is refused at `submit` as before. vLLM's V1 splits its API server from its EngineCore the same
way.

Wire (one `multiprocessing` pipe, pickled tuples):
  parent -> child  ("submit", hid, Request) · ("cancel", hid) · ("shutdown",)
  child -> parent  ("ready", EngineConfig, RequestLimits, EngineLoad) or ("failed", type name,
                   message), once;
                   then ("events", [(hid, Event), ...], EngineLoad) after each engine pass that
                   emitted events or changed its load.
The child ignores SIGINT (the server's shutdown ends it with "shutdown") and exits when the pipe
closes, so it never outlives its server. If it dies, what is in flight and every later submit
raises `EngineUnavailable` (HTTP 503), as a vLLM backend that went away does, and `load()` says so
(`/health` answers 503).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import multiprocessing
import signal
import threading
import traceback

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.service import EngineService, Handle, HandleStreams, emit_all, tokenizer_for
from engine.types import Event, EngineLoad, EngineUnavailable, Request

LOAD_ERRORS = (ValueError, OSError, RuntimeError)  # what loading raises, as open_service documents


class EngineProcess(HandleStreams):
    def __init__(self, cfg: EngineConfig):
        """Start the child, load the model there, and return once it is ready. Raises what loading
        raises (RuntimeError, OSError, ValueError), with the child's message."""
        self.tokenizer = tokenizer_for(cfg)
        ctx = multiprocessing.get_context("spawn")  # a fork would copy the parent's threads' locks
        self._conn, child_end = ctx.Pipe()
        self._proc = ctx.Process(target=_child_main, args=(cfg, child_end), name="editapply-engine", daemon=True)
        self._proc.start()
        child_end.close()
        try:
            kind, *rest = self._conn.recv()
        except EOFError:
            self._proc.join()
            raise RuntimeError(f"the engine process exited while loading (exit code {self._proc.exitcode})") from None
        if kind == "failed":
            self._proc.join()
            raise next(c for c in LOAD_ERRORS if c.__name__ == rest[0])(rest[1])
        self.cfg, self.limits, self._load = rest
        # As EngineService does for its engine: what is loaded by now (torch, the tokenizer, the
        # server's modules) lives as long as the server, so the cyclic collector need not walk it;
        # a full collection over it would stall every stream at once. shutdown() gives it back.
        gc.collect()
        gc.freeze()
        self._send_lock = threading.Lock()
        self._live: dict[int, Handle] = {}
        self._ids = itertools.count()
        self._gone: str | None = None  # why the child is gone, once it is
        self._reader = threading.Thread(target=self._read, name="editapply-engine-reader", daemon=True)
        self._reader.start()

    # ---- protocol -------------------------------------------------------------------------
    def submit(self, request: Request, loop: asyncio.AbstractEventLoop | None = None) -> Handle:
        """Queue `request` in the child. Raises RequestError at once for a request that can never
        run, EngineUnavailable when the child is gone."""
        self.limits.check(request)
        handle = Handle(request)
        if loop is not None:
            handle._loop, handle._aqueue = loop, asyncio.Queue()
        handle.wire_id = hid = next(self._ids)
        with self._send_lock:
            self._live[hid] = handle
            try:
                self._send(("submit", hid, request))
            except EngineUnavailable:
                del self._live[hid]
                raise
        return handle

    def cancel(self, handle: Handle) -> None:
        handle.cancelled = True
        with self._send_lock:
            if not handle.done:
                try:
                    self._send(("cancel", handle.wire_id))
                except EngineUnavailable:
                    pass  # the reader ends the request

    def _send(self, message: tuple) -> None:
        """Send to the child (the send lock held); EngineUnavailable once it is gone."""
        if self._gone:
            raise EngineUnavailable(self._gone)
        try:
            self._conn.send(message)
        except OSError as exc:  # it died; the reader will say how
            raise EngineUnavailable(f"the engine process is gone ({exc})") from None

    def load(self) -> EngineLoad:
        """The child's load at its last engine pass; once it is gone, why (`unavailable`)."""
        return dataclasses.replace(self._load, unavailable=self._gone) if self._gone else self._load

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Stop the child (what runs is cancelled); whether it exited within `timeout` s."""
        with self._send_lock:
            try:
                self._send(("shutdown",))
            except EngineUnavailable:
                pass
        self._proc.join(timeout)
        gc.unfreeze()
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(1.0)
            return False
        return True

    # ---- the reader thread -------------------------------------------------------------------
    def _read(self) -> None:
        try:
            while True:
                kind, events, self._load = self._conn.recv()
                ready = []
                for hid, event in events:
                    handle = self._live.get(hid)
                    if handle is None:
                        continue
                    if event.finished:
                        handle.done = True
                        del self._live[hid]
                    if event.error:
                        handle.error = event.error
                    ready.append((handle, event))
                emit_all(ready)
        except (EOFError, OSError):
            pass
        self._proc.join(5.0)
        with self._send_lock:
            self._gone = f"the engine process exited (exit code {self._proc.exitcode})"
            live, self._live = list(self._live.values()), {}
        for handle in live:
            handle.done = True
        emit_all([(handle, EngineUnavailable(self._gone)) for handle in live])


def _child_main(cfg: EngineConfig, conn) -> None:
    """The child: load, report, then serve the pipe's commands until "shutdown" or its end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        engine = LLMEngine(cfg)
    except Exception as exc:
        traceback.print_exc()
        kind = next((c for c in LOAD_ERRORS if isinstance(exc, c)), None)
        conn.send(("failed", kind.__name__, str(exc)) if kind else ("failed", "RuntimeError", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", engine.cfg, engine.limits, EngineLoad(kv_blocks_total=engine.kv.num_blocks,
                                                              kv_blocks_free=engine.kv.allocator.num_free)))
    handles: dict[int, Handle] = {}  # what runs, by wire id
    outbox: list[tuple[int, Event]] = []  # filled and flushed on the engine thread
    sent_load: EngineLoad | None = None

    def sink(hid: int, event: Event) -> None:
        outbox.append((hid, event))
        if event.finished:
            handles.pop(hid, None)

    def flush() -> None:
        nonlocal sent_load
        load = service.load()
        if outbox or load != sent_load:
            try:
                conn.send(("events", outbox, load))  # pickled here: the list may be cleared after
            except OSError:  # the parent is gone; the main thread sees the pipe's end and stops
                pass
            outbox.clear()
            sent_load = load

    service = EngineService(engine, after_pass=flush)
    try:
        while True:
            message = conn.recv()
            if message[0] == "submit":
                _, hid, request = message
                handles[hid] = handle = Handle(request, _sink=lambda event, hid=hid: sink(hid, event))
                service.enqueue(handle)
            elif message[0] == "cancel":
                handle = handles.pop(message[1], None)
                if handle is not None:
                    service.cancel(handle)
            else:
                break
    except (EOFError, OSError):
        pass
    service.shutdown()
