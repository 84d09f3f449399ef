"""The client's settings: one dataclass, parsed from `initializationOptions` and
`workspace/didChangeConfiguration`.

Keys (camelCase, as editors write them; also accepted under an `editapply` section, which is how
VS Code sends a namespaced configuration):

| key | default | meaning |
| --- | --- | --- |
| `engine` | `local` (`remote` when `engineUrl` is set) | `local`: the engine runs in this process; `remote`: a running `editapply serve` |
| `model` | `null` (= `EDITAPPLY_MODEL`, else the registry default) | the local engine's model: a preset name or an HF folder |
| `backend` | `null` (= `EDITAPPLY_BACKEND`, else `engine`) | who generates for the local engine: `engine` (ours, in this process) or `vllm` |
| `vllmUrl` | `null` (= `EDITAPPLY_VLLM_URL`) | with backend `vllm`: a running `vllm serve`; none = one started here for `model` |
| `engineUrl` | `null` | the `editapply serve` to use, e.g. `http://127.0.0.1:8000` |
| `apiKey` | `null` (= `EDITAPPLY_API_KEY`) | bearer token for `engineUrl` |
| `mode` | `auto` | `auto`, `model` or `deterministic` (see engine/apply/pipeline.py) |
| `promptForm` | `null` (= `draft`) | `draft` or `rewrite`: the apply prompt's form on the model path |
| `maxTokens` | `null` (= the expected answer's size plus a margin; 512 for ask) | cap on generated tokens |
| `pickReadings` | `false` | the client shows an ambiguous snippet's readings (a pick list), and a refused model file's deterministic `candidate`, itself, and applies the chosen text with `editapply.applyMerged`; without it the server asks with `window/showMessageRequest` |

A bad value is not fatal (jedi-language-server's rule): `parse` returns the defaults for it and a
message naming the key, the value and the default used, which the server shows with
`window/showMessage`. Unknown keys are reported too (a typo would otherwise be silent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from engine.choices import BACKENDS, FORMS, MODES

ENGINES = ("local", "remote")
SECTION = "editapply"
# camelCase key -> field name
KEYS = {"engine": "engine", "model": "model", "backend": "backend", "vllmUrl": "vllm_url", "engineUrl": "engine_url",
        "apiKey": "api_key", "mode": "mode", "promptForm": "prompt_form", "maxTokens": "max_tokens",
        "pickReadings": "pick_readings"}


@dataclass(frozen=True)
class Settings:
    engine: str = "local"  # local | remote
    model: str | None = None
    backend: str | None = None  # engine | vllm (None: EDITAPPLY_BACKEND)
    vllm_url: str | None = None
    engine_url: str | None = None
    api_key: str | None = None
    mode: str = "auto"
    prompt_form: str | None = None
    max_tokens: int | None = None
    pick_readings: bool = False

    def engine_key(self) -> tuple:
        """What identifies the engine these settings ask for: a change means a new engine client."""
        if self.engine == "local":
            return self.engine, self.model, self.backend, self.vllm_url
        return self.engine, self.engine_url, self.api_key

    def describe(self) -> str:
        if self.engine == "remote":
            return f"engine at {self.engine_url}"
        on = f" on vLLM at {self.vllm_url}" if self.vllm_url else " on vLLM" if self.backend == "vllm" else ""
        return f"local engine, model {self.model or 'default'}{on}"


DEFAULTS = Settings()


def section(raw: Any) -> Any:
    """The settings object inside `raw`: `raw["editapply"]` when present, else `raw` itself."""
    if isinstance(raw, dict) and isinstance(raw.get(SECTION), dict):
        return raw[SECTION]
    return raw


def parse(raw: Any) -> tuple[Settings, list[str]]:
    """`raw` (a dict of camelCase keys, or None) as Settings, and one message per bad or unknown
    key; a bad value takes the default."""
    raw = section(raw)
    if raw is None:
        return DEFAULTS, []
    if not isinstance(raw, dict):
        return DEFAULTS, [f"settings must be an object, got {_show(raw)}; using the defaults"]
    values: dict[str, Any] = {}
    problems = [f"unknown setting {key!r} ignored (known: {', '.join(KEYS)})" for key in raw if key not in KEYS]
    for key, name in KEYS.items():
        if raw.get(key) is None:
            continue
        value, error = _check(key, raw[key])
        if error:
            default = getattr(DEFAULTS, name)
            problems.append(f"setting {key}: {error}, got {_show(raw[key])}; using "
                            f"{'the default' if default is None else repr(default)}")
        else:
            values[name] = value
    if "engine" not in values and values.get("engine_url"):
        values["engine"] = "remote"
    if values.get("engine") == "remote" and not values.get("engine_url"):
        problems.append("setting engine: 'remote' needs engineUrl; using the local engine")
        values["engine"] = "local"
    return Settings(**values), problems


def _check(key: str, value: Any) -> tuple[Any, str | None]:
    """(the value to use, None) or (None, what is wrong with it)."""
    if key == "engine":
        return (value, None) if value in ENGINES else (None, f"must be one of {', '.join(ENGINES)}")
    if key == "backend":
        return (value, None) if value in BACKENDS else (None, f"must be one of {', '.join(BACKENDS)}")
    if key == "mode":
        return (value, None) if value in MODES else (None, f"must be one of {', '.join(MODES)}")
    if key == "promptForm":
        return (value, None) if value in FORMS else (None, f"must be one of {', '.join(FORMS)}")
    if key == "pickReadings":
        return (value, None) if isinstance(value, bool) else (None, "must be true or false")
    if key == "maxTokens":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        return (value, None) if ok else (None, "must be a positive integer")
    if not isinstance(value, str) or not value.strip():
        return None, "must be a non-empty string"
    if key in ("engineUrl", "vllmUrl"):
        url = urlparse(value)
        if url.scheme not in ("http", "https") or not url.netloc:
            return None, "must be an http(s) URL such as http://127.0.0.1:8000"
        return value.rstrip("/"), None
    return value, None


def merged(previous: dict | None, update: Any) -> dict | None:
    """The raw settings after `update` (a didChangeConfiguration payload): its keys replace the
    previous ones, a key set to null goes back to the default, keys it leaves out are kept. An
    empty or missing payload changes nothing (Neovim sends one with no settings)."""
    update = section(update)
    if not update:
        return previous
    if not isinstance(update, dict):
        return update  # parse() reports it
    out = dict(previous or {})
    out.update(update)
    return {k: v for k, v in out.items() if v is not None}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

