"""ServerSettings: the HTTP server's own switches, checked once; environment variables land here.

The engine's switches stay in `engine/config.py`; these are only about the network face:

| variable | default | meaning |
| --- | --- | --- |
| `EDITAPPLY_API_KEY` | unset | bearer token required on every route but /health |
| `EDITAPPLY_MAX_BODY_BYTES` | 8 MiB | larger request bodies get 413 |
| `EDITAPPLY_MAX_QUEUE` | 64 | requests waiting for the engine beyond which new ones get 503 |
| `EDITAPPLY_MAX_TOKENS_LIMIT` | 0 (the context) | the largest `max_tokens` a request may ask for |
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

ENV = {
    "api_key": "EDITAPPLY_API_KEY",
    "max_body_bytes": "EDITAPPLY_MAX_BODY_BYTES",
    "max_queue": "EDITAPPLY_MAX_QUEUE",
    "max_tokens_limit": "EDITAPPLY_MAX_TOKENS_LIMIT",
}


@dataclass
class ServerSettings:
    api_key: str | None = None  # None or "" = no authentication
    max_body_bytes: int = 8 * 2**20
    max_queue: int = 64  # waiting requests (not yet running) before new ones are refused with 503
    max_tokens_limit: int = 0  # 0 = up to the context limit
    retry_after_s: int = 2  # the Retry-After of a 503
    model_id: str | None = None  # the name clients use; None = the engine's model name

    def __post_init__(self):
        if self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be at least 1024, got {self.max_body_bytes}")
        if self.max_queue < 0 or self.max_tokens_limit < 0 or self.retry_after_s < 0:
            raise ValueError("max_queue, max_tokens_limit and retry_after_s must be >= 0")

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
