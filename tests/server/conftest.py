"""One real server for the HTTP tests: the CI model behind uvicorn on a free loopback port.

The server runs in a thread of the test process, so tests can look at the engine (`service`)
and change the app's settings (API key, queue bound, limits) for a test and put them back.
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest
import uvicorn

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.server import ServerSettings, create_app
from engine.server.app import close_app
from engine.service import EngineService
from engine.types import EngineLoad

MODEL_ID = "smollm2-135m"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveServer:
    url: str
    app: object
    service: EngineService
    settings: ServerSettings

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, **kwargs)

    @contextmanager
    def settings_changed(self, **changes):
        old = {k: getattr(self.settings, k) for k in changes}
        for k, v in changes.items():
            setattr(self.settings, k, v)
        try:
            yield
        finally:
            for k, v in old.items():
                setattr(self.settings, k, v)

    def wait_idle(self, timeout: float = 60) -> EngineLoad:
        """Wait until no request waits or runs; return the engine's load."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            load = self.service.load()
            if load.waiting == 0 and load.running == 0:
                return load
            time.sleep(0.05)
        raise AssertionError(f"engine still busy after {timeout} s: {self.service.load()}")


@contextmanager
def serve(app, port: int):
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def live(ci_model_dir):
    cfg = EngineConfig(model=str(ci_model_dir), max_model_len=4096, max_num_seqs=4)
    service = EngineService(LLMEngine(cfg))
    settings = ServerSettings(max_body_bytes=512 * 1024)
    app = create_app(service, settings)
    port = free_port()
    with serve(app, port):
        yield LiveServer(f"http://127.0.0.1:{port}", app, service, settings)
    close_app(app)
    service.shutdown()


@pytest.fixture
def client(live):
    with live.client() as c:
        yield c
