"""ServerSettings: the HTTP server's own switches, checked once; environment variables land here.

The engine's switches stay in `engine/config.py`; these are only about the network face. Each
field is one variable (`max_queue` is `EDITAPPLY_MAX_QUEUE`), its description below; the README
(engine/server/README.md, "Settings") lists them.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field

from engine.env_settings import EnvSettings


def default_merge_workers() -> int:
    """Half the cores, 1 to 4: the engine's threads keep the rest (one worker on the 2-core CI
    machine; bench/RESULTS.md, "Robustness under load")."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))


class ServerSettings(EnvSettings):
    # Not frozen: the server's tests change a live server's settings in place.
    api_key: str | None = Field(None, description=(
        "bearer token required on every route but /health; unset = no authentication"))
    max_body_bytes: int = Field(8 * 2**20, ge=1024, description="larger request bodies get 413")
    max_queue: int = Field(64, ge=0, description=(
        "requests waiting for the engine (not yet running) beyond which new ones get 503"))
    max_tokens_limit: int = Field(0, ge=0, description=(
        "the largest `max_tokens` a request may ask for; 0 = up to the context"))
    # Long enough for any answer, short of running to the whole context (a minute of CPU time on a 16k context).
    default_max_tokens: int = Field(1024, ge=0, description=(
        "a chat or RAG answer's length when the request sets none; 0 = the rest of the context"))
    merge_workers: int = Field(default_factory=default_merge_workers, ge=0, description=(
        "merge worker processes (workers.py), by default half the cores, 1 to 4; 0 = the server's thread pool"))
    merge_queue: int = Field(16, ge=0, description=(
        "merges that may wait for a worker (each holds its request, up to 2 x 2 MiB of text) beyond which new "
        "ones get 503"))
    retry_after_s: int = Field(2, ge=0, description="the Retry-After of a 503, in seconds")
    engine_process: bool = Field(True, description=(
        "run the engine in a process of its own (engine/engine_process.py), so the server's requests never wait "
        "on its steps for the interpreter; 0 = a thread of the server"))
    model_id: str | None = Field(None, description=(
        "the model's name for clients; unset = the engine's model name"))


def model_names(model: str) -> tuple[str, ...]:
    """The names a client may use for `model` (a preset name, or an HF folder path and its basename)."""
    base = Path(model).name
    return (base, model) if base and base != model else (model,)
