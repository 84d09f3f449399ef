"""ServerSettings: the HTTP server's own switches, checked once; environment variables land here.

The engine's switches stay in `engine/config.py`; these are only about the network face:

| variable | default | meaning |
| --- | --- | --- |
| `EDITAPPLY_API_KEY` | unset | bearer token required on every route but /health |
| `EDITAPPLY_MAX_BODY_BYTES` | 8 MiB | larger request bodies get 413 |
| `EDITAPPLY_MAX_QUEUE` | 64 | requests waiting for the engine beyond which new ones get 503 |
| `EDITAPPLY_MAX_TOKENS_LIMIT` | 0 (the context) | the largest `max_tokens` a request may ask for |
| `EDITAPPLY_DEFAULT_MAX_TOKENS` | 1024 | a chat or RAG answer's length when the request sets none (0 = the rest of the context) |
| `EDITAPPLY_MERGE_WORKERS` | half the cores, 1 to 4 | merge worker processes (workers.py); 0 = the server's thread pool |
| `EDITAPPLY_MERGE_QUEUE` | 16 | merges that may wait for a worker beyond which new ones get 503 |
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

ENV = {
    "api_key": "EDITAPPLY_API_KEY",
    "max_body_bytes": "EDITAPPLY_MAX_BODY_BYTES",
    "max_queue": "EDITAPPLY_MAX_QUEUE",
    "max_tokens_limit": "EDITAPPLY_MAX_TOKENS_LIMIT",
    "default_max_tokens": "EDITAPPLY_DEFAULT_MAX_TOKENS",
    "merge_workers": "EDITAPPLY_MERGE_WORKERS",
    "merge_queue": "EDITAPPLY_MERGE_QUEUE",
}


def default_merge_workers() -> int:
    """Half the cores, 1 to 4: the engine's threads keep the rest (one worker on the 2-core CI
    machine; bench/RESULTS.md, "Robustness under load")."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))


@dataclass
class ServerSettings:
    api_key: str | None = None  # None or "" = no authentication
    max_body_bytes: int = 8 * 2**20
    max_queue: int = 64  # waiting requests (not yet running) before new ones are refused with 503
    max_tokens_limit: int = 0  # 0 = up to the context limit
    # A chat or RAG answer without max_tokens: long enough for any answer, short of running to the
    # whole context (a minute of CPU time on a 16k context). 0 = the rest of the context.
    default_max_tokens: int = 1024
    merge_workers: int = field(default_factory=default_merge_workers)
    merge_queue: int = 16  # merges waiting for a worker (each holds its request, up to 2 x 2 MiB of text)
    retry_after_s: int = 2  # the Retry-After of a 503
    model_id: str | None = None  # the name clients use; None = the engine's model name

    def __post_init__(self):
        if self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be at least 1024, got {self.max_body_bytes}")
        counts = ("max_queue", "max_tokens_limit", "retry_after_s", "default_max_tokens", "merge_workers", "merge_queue")
        if negative := [name for name in counts if getattr(self, name) < 0]:
            raise ValueError(f"{', '.join(negative)} must be >= 0")

    @classmethod
    def from_env(cls, environ: dict | None = None, **overrides) -> ServerSettings:
        """Defaults, then EDITAPPLY_* variables, then explicit overrides (e.g. CLI flags)."""
        env = os.environ if environ is None else environ
        values = {}
        for f in fields(cls):
            raw = env.get(ENV.get(f.name, ""))
            if not raw:
                continue
            try:
                values[f.name] = raw if f.name == "api_key" else int(raw)
            except ValueError:
                raise ValueError(f"{ENV[f.name]}={raw!r}: expected an integer") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def model_names(model: str) -> tuple[str, ...]:
    """The names a client may use for `model` (a preset name, or an HF folder path and its basename)."""
    base = Path(model).name
    return (base, model) if base and base != model else (model,)
