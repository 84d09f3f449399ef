"""The server-sent events of the streamed routes, one pydantic model per shape.

The OpenAPI schema names them under each route's `text/event-stream` response (`x-events`, with
the models in `components.schemas`: `streamed` in schemas.py, `app._openapi`), and the tests check
every event a stream sends against them (`validate_event`), so the stream and its declared type
cannot drift apart. Every stream ends with `data: [DONE]` (generation.py, `sse_events`).

* `/v1/apply`: `DeltaEvent`s (the model's raw output, model path only), then one
  `ApplyResultEvent` (the whole result: `ApplyResponse`, the JSON answer), or an `ErrorEvent`.
* `/v1/rag`: `DeltaEvent`s, then one `RagResultEvent` (the whole answer, as the JSON answer
  carries it), or an `ErrorEvent`.
* `/v1/chat/completions`: OpenAI's `ChatCompletionChunk`s (the role, content deltas, a last
  choice chunk with `finish_reason` and `stats`, with `stream_options.include_usage` a chunk with
  `usage` and no choices), or OpenAI's `ChatErrorEvent`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from engine.apply.result import ApplyStats, ReadingChoice, Usage
from engine.apply.validate import Validation
from engine.server.schemas import ErrorDetail


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a field the model does not declare is a drift


class DeltaEvent(Event):
    type: Literal["delta"]
    text: str


class ErrorEvent(Event):
    type: Literal["error"]
    error: ErrorDetail


class HunkItem(Event):
    """One change of the result (`hunks.Hunk`): 0-based rows of the file and of `merged_code`, end
    exclusive, and the first and last row of `diff` that show it."""

    start: int
    end: int
    newStart: int
    newEnd: int
    diffRows: list[int]


class ApplyResponse(Event):
    """`POST /v1/apply`'s answer (`ApplyResult.as_dict()`); its parts are the result's own
    dataclasses (engine/apply/result.py), so the wire and the code cannot name a field twice."""

    merged_code: str
    diff: str
    validation: Validation
    usage: Usage
    stats: ApplyStats
    readings: list[ReadingChoice]
    hunks: list[HunkItem]
    candidate: ReadingChoice | None


class ApplyResultEvent(ApplyResponse):
    type: Literal["result"]


class RagResultEvent(Event):
    type: Literal["result"]
    id: str
    object: Literal["rag.answer"]
    created: int
    model: str
    answer: str
    finish_reason: Literal["stop", "length"]
    usage: dict
    stats: dict


class ChunkDelta(Event):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(Event):
    index: int
    delta: ChunkDelta
    logprobs: None
    finish_reason: Literal["stop", "length"] | None


class ChatCompletionChunk(Event):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: str | None
    choices: list[ChunkChoice]
    usage: dict | None = None
    stats: dict | None = None


class ChatErrorEvent(Event):
    error: ErrorDetail


APPLY_EVENTS = (DeltaEvent, ApplyResultEvent, ErrorEvent)
RAG_EVENTS = (DeltaEvent, RagResultEvent, ErrorEvent)
CHAT_EVENTS = (ChatCompletionChunk, ChatErrorEvent)
ANSWERS = (ApplyResponse,)  # the routes' JSON answers declared here


def validate_event(models: tuple[type[Event], ...], event: dict) -> Event:
    """`event` as the one model of `models` it matches; ValueError when it matches none."""
    failures = []
    for model in models:
        try:
            return model.model_validate(event)
        except ValueError as exc:
            failures.append(f"{model.__name__}: {exc}")
    raise ValueError(f"the event matches none of its declared types: {event!r}\n" + "\n".join(failures))
