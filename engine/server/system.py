"""`GET /health` (no auth), `GET /v1/models`, `GET /v1/models/{model}`, `GET /metrics`."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from engine.server.schemas import ERRORS, HealthDown
from engine.server.state import ServerState, get_state

router = APIRouter()


@router.get("/health", summary="Liveness: model loaded, queue depth (no authentication); 503 when the engine is gone",
            responses={503: {"model": HealthDown, "description": "The engine's process is gone; the server is up"}})
async def health(http: HTTPRequest):
    state = get_state(http)
    load = state.service.load()
    if load.unavailable:
        return JSONResponse({"status": "engine_unavailable", "model": state.model_id, "error": load.unavailable},
                            status_code=503)
    return {"status": "ok", "model": state.model_id, "model_loaded": True, "queue_depth": load.waiting,
            "running": load.running, "kv_blocks_free": load.kv_blocks_free, "kv_blocks_total": load.kv_blocks_total}


def _model_card(state: ServerState) -> dict:
    return {"id": state.model_id, "object": "model", "created": state.created, "owned_by": "editapply",
            "max_model_len": state.context_limit}


@router.get("/v1/models", responses=ERRORS, summary="The served model (OpenAI list format)")
async def list_models(http: HTTPRequest):
    return {"object": "list", "data": [_model_card(get_state(http))]}


@router.get("/v1/models/{model:path}", responses=ERRORS, summary="One model by name")
async def get_model(model: str, http: HTTPRequest):
    state = get_state(http)
    state.check_model(model)
    return _model_card(state)


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(http: HTTPRequest):
    return Response(get_state(http).metrics.render(), media_type=CONTENT_TYPE_LATEST)

