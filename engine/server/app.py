"""`create_app(service, settings)`: the FastAPI app of `editapply serve`.

Routes, one module per group: `apply` (/v1/apply), `chat` (/v1/chat/completions), `rag`
(/v1/rag), `system` (/health, /v1/models, /metrics). Middleware, outermost first:
`RequestMetrics` (counts every response, errors included), `AnswerCancelled` (a request cut by a
stopping server still answers in JSON), `BearerAuth` (before anything is read), `BodyGuard`
(size, content type, UTF-8). Errors are OpenAI-shaped everywhere (`errors.py`).
The engine runs in its own thread (`EngineService`); handlers only await its streams, merges run
in worker processes (`workers.py`), and the rest of the CPU work (templating, tokenizing) in the
thread pool, so neither the event loop nor the engine waits on them. The app's shutdown stops the
merge workers; `close_app` does it for a server run without lifespan events (the tests').
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from engine.server import apply, chat, code_apply, errors, events, rag, system
from engine.server.auth import BearerAuth
from engine.server.limits import BodyGuard
from engine.server.metrics import Metrics, RequestMetrics
from engine.server.settings import ServerSettings
from engine.server.state import ServerState
from engine.server.workers import MergePool

BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
ROUTES = (apply, code_apply, chat, rag, system)  # the modules whose `router` the app serves


def create_app(service, settings: ServerSettings | None = None) -> FastAPI:
    """The app serving `service` (an EngineService: the Engine protocol plus `load()` and `cfg`)."""
    settings = settings or ServerSettings.from_env()
    merges = MergePool(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        merges.close()  # in uvicorn's graceful shutdown: it re-raises SIGTERM after, so no `finally` runs

    app = FastAPI(title="editapply", version="0.1.0", strict_content_type=False, lifespan=lifespan,
                  description="Edit-apply backend: apply, OpenAI-compatible chat with predicted outputs, RAG.")
    state = ServerState(service, settings, Metrics(service, merges), merges)
    app.state.editapply = state
    for module in ROUTES:
        app.include_router(module.router)
    errors.install(app)
    paths = tuple(route.path for module in ROUTES for route in module.router.routes)
    app.add_middleware(BodyGuard, settings=settings)
    app.add_middleware(BearerAuth, settings=settings)
    app.add_middleware(errors.AnswerCancelled)
    app.add_middleware(RequestMetrics, metrics=state.metrics, paths=paths)
    app.openapi = lambda: _openapi(app, state)
    return app


def close_app(app: FastAPI) -> None:
    """Stop what the app started besides the engine (the merge workers)."""
    app.state.editapply.merges.close()


def _add_event_schemas(schema: dict) -> None:
    """The SSE event models and the JSON answers (events.py) into `components.schemas`, where
    `x-events` and the routes' 200 answers refer."""
    from pydantic.json_schema import models_json_schema

    models = {m for group in (events.APPLY_EVENTS, events.RAG_EVENTS, events.CHAT_EVENTS, events.ANSWERS) for m in group}
    _, defs = models_json_schema([(m, "serialization") for m in sorted(models, key=lambda m: m.__name__)],
                                 ref_template="#/components/schemas/{model}")
    schema.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))


def _openapi(app: FastAPI, state: ServerState) -> dict:
    """FastAPI's schema, plus the limits only known at run time (the largest max_tokens).

    FastAPI's schema models type every numeric bound as a float, so `seed < 2**63` came out as
    `9.223372036854776e+18`: integer bounds are written back as integers (each one in schemas.py
    is a float exactly, 2**63 too, so the value is unchanged; only its spelling)."""
    if app.openapi_schema is None:
        app.openapi_schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                         routes=app.routes)
    schema = app.openapi_schema
    _add_event_schemas(schema)
    for model in schema.get("components", {}).get("schemas", {}).values():
        for name, prop in model.get("properties", {}).items():
            for option in prop.get("anyOf", [prop]):
                if option.get("type") != "integer":
                    continue
                for bound in BOUNDS:
                    if isinstance(option.get(bound), float):
                        option[bound] = int(option[bound])
                if name in ("max_tokens", "max_completion_tokens"):
                    option["maximum"] = state.max_tokens_limit
    return schema
