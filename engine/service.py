"""EngineService: the engine behind a background thread — the one Engine protocol every front end uses.

`submit(request) -> Handle`, then `stream(handle)` (blocking iterator) or `astream(handle)` (async
iterator) of `Event`s ending with one whose `finished` is true, and `cancel(handle)` at any time
(the request's KV blocks are freed at the engine's next step). The HTTP server, the CLI and the
language server call this; `LLMEngine` does the stepping, one step for all running requests
(continuous batching). They get one from `open_service(config)`, and a model's tokenizer and
context alone (to check a prompt's length before any weights load) from `tokenizer_for(config)`
and `config_for(config)`; what they submit and read back are the torch-free types of
`engine/types.py`. They never build an
`LLMEngine` or look up the model registry themselves: `open_service` picks the backend
(`EngineConfig.backend`), and `engine/backends/vllm.py` implements `Engine` over a vLLM server.
"""

from __future__ import annotations

import asyncio
import gc
import queue
import threading
import traceback
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Iterator, Protocol

from engine.config import EngineConfig
from engine.engine import EventCursor, LLMEngine
from engine.loader import registry
from engine.tokenizer import Tokenizer
from engine.sequence import Sequence
from engine.types import EngineLoad, Event, GenerationStats, Request


class Engine(Protocol):
    """What front ends need from an engine, whichever backend is behind it: the model's tokenizer,
    its config (`max_model_len` at least), and the request stream."""

    tokenizer: object
    cfg: object

    def submit(self, request: Request, loop: asyncio.AbstractEventLoop | None = None) -> "Handle": ...
    def stream(self, handle: "Handle") -> Iterator[Event]: ...
    def astream(self, handle: "Handle") -> AsyncIterator[Event]: ...
    def cancel(self, handle: "Handle") -> None: ...
    def load(self) -> EngineLoad: ...
    def shutdown(self) -> None: ...


@dataclass
class Handle:
    request: Request
    seq: Sequence | None = None
    error: str | None = None
    cancelled: bool = False
    _queue: "queue.Queue[Event]" = field(default_factory=queue.Queue)
    _loop: asyncio.AbstractEventLoop | None = None
    _aqueue: asyncio.Queue | None = None
    _events: EventCursor | None = None
    _sink: Callable[[Event], None] | None = None  # where events go instead (engine/engine_process.py)
    wire_id: int | None = None  # its key between processes (engine/engine_process.py)
    done: bool = False

    @property
    def id(self) -> str:
        return self.seq.id if self.seq else "pending"

    def _emit(self, event: Event | Exception) -> None:
        emit_all([(self, event)])


def emit_all(items: list[tuple[Handle, Event | Exception]]) -> None:
    """Hand each event to its handle's reader (an exception, the engine gone, is raised to it
    instead): to its `_sink`, its blocking queue, or its event loop, each loop woken once for all
    its streams' events (one self-pipe write a pass, not one an event)."""
    by_loop: dict[asyncio.AbstractEventLoop, list] = {}
    for handle, event in items:
        if handle._sink is not None:
            handle._sink(event)
        elif handle._loop is not None:
            by_loop.setdefault(handle._loop, []).append((handle, event))
        else:
            handle._queue.put(event)
    for loop, batch in by_loop.items():
        try:
            loop.call_soon_threadsafe(_put_all, batch)
        except RuntimeError:  # that event loop is closed: nobody is listening
            for handle, _ in batch:
                handle.cancelled = True


def _put_all(batch: list[tuple[Handle, Event | Exception]]) -> None:
    for handle, event in batch:
        handle._aqueue.put_nowait(event)


class HandleStreams:
    """`stream`, `astream` and `generate` over the `Handle`s an engine emits into; a reader that
    stops early cancels its request."""

    def submit(self, request: Request, loop: asyncio.AbstractEventLoop | None = None) -> Handle:
        raise NotImplementedError

    def cancel(self, handle: Handle) -> None:
        raise NotImplementedError

    def stream(self, handle: Handle) -> Iterator[Event]:
        try:
            while True:
                event = _raised(handle._queue.get())
                yield event
                if event.finished:
                    return
        finally:
            if not handle.done:
                self.cancel(handle)

    async def astream(self, handle: Handle) -> AsyncIterator[Event]:
        if handle._aqueue is None:
            raise RuntimeError("submit(request, loop=...) before astream")
        try:
            while True:
                event = _raised(await handle._aqueue.get())
                yield event
                if event.finished:
                    return
        finally:
            if not handle.done:
                self.cancel(handle)

    def generate(self, request: Request) -> Iterator[Event]:
        return self.stream(self.submit(request))


def _raised(item: Event | Exception) -> Event:
    if isinstance(item, Exception):
        raise item
    return item


class EngineService(HandleStreams):
    def __init__(self, engine: LLMEngine, after_pass: Callable[[], None] | None = None):
        """Start the engine thread; `after_pass` runs on it after each pass's events are emitted."""
        self.engine = engine
        self._after_pass = after_pass
        self.tokenizer = engine.tokenizer
        self.cfg = engine.cfg
        self._lock = threading.Condition()
        self._pending: list[Handle] = []
        self._cancels: list[Handle] = []
        self._live: dict[int, Handle] = {}  # id(seq) -> handle
        self._stopped = False
        self.steps = 0
        # The engine (model, tokenizer, graphs) lives as long as the service: move it out of the
        # cyclic collector's reach, or each full collection that requests' allocations (token
        # lists, lookup indexes) trigger walks all of it, a pause that lands in some request's
        # time to first token. shutdown() gives it back.
        gc.collect()
        gc.freeze()
        self._thread = threading.Thread(target=self._loop, name="editapply-engine", daemon=True)
        self._thread.start()

    # ---- protocol -------------------------------------------------------------------------
    def submit(self, request: Request, loop: asyncio.AbstractEventLoop | None = None) -> Handle:
        """Queue `request`. Raises RequestError at once for a request that can never run."""
        self.engine.check_request(request)
        handle = Handle(request)
        if loop is not None:
            handle._loop, handle._aqueue = loop, asyncio.Queue()
        self.enqueue(handle)
        return handle

    def enqueue(self, handle: Handle) -> None:
        """Queue a handle built by the caller (its `_sink` set), unchecked: the engine refuses a
        request that cannot run with a "rejected" event."""
        with self._lock:
            self._pending.append(handle)
            self._lock.notify()

    def cancel(self, handle: Handle) -> None:
        with self._lock:
            handle.cancelled = True
            self._cancels.append(handle)
            self._lock.notify()

    # ---- state for /health and /metrics ----------------------------------------------------
    def load(self) -> EngineLoad:
        kv = self.engine.kv
        return EngineLoad(waiting=len(self.engine.waiting) + len(self._pending), running=len(self.engine.running),
                          kv_blocks_total=kv.num_blocks, kv_blocks_free=kv.allocator.num_free, steps=self.steps)

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Stop the engine thread (what runs is cancelled at its next step); whether it stopped
        within `timeout` s (a long prefill step can outlast it: see `engine.cli.main`)."""
        with self._lock:
            self._stopped = True
            self._lock.notify()
        self._thread.join(timeout=timeout)
        gc.unfreeze()
        return not self._thread.is_alive()

    # ---- the engine thread -----------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._lock:
                while not (self._stopped or self._pending or self._cancels or self.engine.has_work()):
                    self._lock.wait()
                if self._stopped:
                    break
                pending, self._pending = self._pending, []
                cancels, self._cancels = self._cancels, []
            for h in pending:
                self._admit(h)
            for h in cancels:
                if h.seq is not None and not h.seq.is_finished:
                    self.engine.cancel(h.seq)
            if self.engine.has_work():
                try:
                    self.engine.step()
                    self.steps += 1
                except Exception as exc:  # never let one bad step kill the engine
                    self._fail_running(f"{type(exc).__name__}: {exc}")
                    traceback.print_exc()
            self._publish()
        for h in list(self._live.values()):
            self.engine.cancel(h.seq)
        self._publish()

    def _publish(self) -> None:
        self._emit_events()
        if self._after_pass is not None:
            self._after_pass()

    def _admit(self, handle: Handle) -> None:
        if handle.cancelled:
            handle.done = True
            handle._emit(Event("cancelled", [], "", True, "cancelled", GenerationStats()))
            return
        try:
            handle.seq = self.engine.add_request(handle.request)
        except Exception as exc:
            handle.done = True
            handle.error = str(exc)
            handle._emit(Event("rejected", [], "", True, "error", GenerationStats(), error=str(exc)))
            return
        handle._events = EventCursor(handle.seq, self.tokenizer, self.engine.eos_ids)
        self._live[id(handle.seq)] = handle

    def _fail_running(self, message: str) -> None:
        for h in list(self._live.values()):
            if not h.seq.is_finished:
                h.error = message
                self.engine.cancel(h.seq)
                h.seq.finish_reason = "error"

    def _emit_events(self) -> None:
        ready = []
        for key, h in list(self._live.items()):
            event = h._events.next()
            if event is None:
                continue
            if h.error:
                event.error = h.error
            if event.finished:
                h.done = True
                del self._live[key]
            ready.append((h, event))
        emit_all(ready)


def open_service(cfg: EngineConfig, process: bool = False) -> Engine:
    """The engine `cfg` describes, ready for requests: ours, loaded and stepping in its service
    thread (`process`: in a process of its own, engine/engine_process.py), or (`backend` vllm) a
    `vllm serve` it connects to or starts. Raises what loading raises: `RuntimeError` (not
    installed; `EngineUnavailable`: vLLM not reachable), `OSError`, `ValueError` (a bad folder or
    config)."""
    if cfg.backend == "vllm":
        from engine.backends.vllm import open_vllm

        return open_vllm(cfg, tokenizer_for(cfg))
    if process:
        from engine.engine_process import EngineProcess

        return EngineProcess(cfg)
    return EngineService(LLMEngine(cfg))


def config_for(cfg: EngineConfig) -> EngineConfig:
    """`cfg` with max_model_len resolved as the engine resolves it (EngineConfig.for_model), from
    the model's config.json alone: for the context checks a front end makes before the weights
    load. Over vLLM, the server's own context decides once connected."""
    folder = registry.tokenizer_folder(cfg.model) if cfg.backend == "vllm" else registry.resolve(cfg.model)
    return cfg.for_model(registry.model_context(folder))


def tokenizer_for(cfg: EngineConfig) -> Tokenizer:
    """The tokenizer of `cfg`'s model, without its weights (seconds less than loading them; with
    backend vllm the weights need not be here at all)."""
    if cfg.backend == "vllm":
        return Tokenizer(registry.tokenizer_folder(cfg.model))
    return Tokenizer(registry.resolve(cfg.model))
