"""`POST /v1/rag`: answer a question from documents, drafting from the documents.

Body: `{documents: [{id?, text}], question, stream?, max_tokens?, temperature?, top_p?, top_k?,
seed?, stop?}` (temperature defaults to 0: answers that quote the documents are accepted in
long runs; max_tokens to `EDITAPPLY_DEFAULT_MAX_TOKENS`, 1024, at most the rest of the context). The request is `engine.rag.rag_request`'s: documents first in the prompt
(`prompts/rag_user.jinja`), so requests about the same documents share a prefix the KV cache
reuses, and each document is a lookup source.

Answer: `{id, object: "rag.answer", created, model, answer, finish_reason, usage, stats}`;
streamed, `{"type": "delta", "text"}` events, then `{"type": "result", ...}` with the same fields
as the JSON answer (the whole answer included), then `[DONE]` (events.py).
"""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter
from fastapi import Request as HTTPRequest
from jinja2.exceptions import TemplateError

from engine.rag import rag_request
from engine.types import Request, SamplingParams
from engine.server.events import RAG_EVENTS
from engine.server.errors import APIError
from engine.server.generation import Generation, SSEResponse, public_stats, sse_events, stops_of, usage
from engine.server.schemas import ERRORS, RagRequest, streamed
from engine.server.state import get_state, offload

ROUTE = "/v1/rag"
router = APIRouter()
STREAM_EVENTS = ('{"type": "delta", "text"} as the answer is written, then {"type": "result", id, object, created, '
                 'model, answer, finish_reason, usage, stats}; an error after the stream started is {"type": "error", '
                 '"error": {...}}')


def _request(tokenizer, body: RagRequest) -> Request:
    documents = [{"id": d.id, "text": d.text} for d in body.documents]
    try:
        return rag_request(tokenizer, documents, body.question)
    except (TemplateError, ValueError) as exc:
        raise APIError(400, f"cannot build the RAG prompt: {exc}", param="question" if "question" in str(exc)
                       else "documents") from None


@router.post(ROUTE, responses={**ERRORS, **streamed(STREAM_EVENTS, RAG_EVENTS)}, summary="Answer a question from documents")
async def rag(body: RagRequest, http: HTTPRequest):
    state = get_state(http)
    state.check_model(body.model)
    state.check_prompt_size([d.text for d in body.documents] + [body.question], "documents")
    request = await offload(_request, state.tokenizer, body)
    stop = stops_of(body.stop)
    request.params = SamplingParams(temperature=body.temperature or 0.0, top_p=1.0 if body.top_p is None else body.top_p,
                                    top_k=body.top_k or 0, seed=body.seed,
                                    max_tokens=state.max_tokens(len(request.prompt_ids), body.max_tokens), stop=stop)
    gen = Generation(state, state.submit(request), ROUTE, stop)
    head = {"id": f"rag-{uuid.uuid4().hex[:24]}", "object": "rag.answer", "created": int(time.time()),
            "model": state.model_id}
    if body.stream:
        return SSEResponse(_stream(head, gen))
    answer = await gen.text(http)
    return {**head, "answer": answer, **_tail(gen)}


def _tail(gen: Generation) -> dict:
    return {"finish_reason": gen.openai_finish_reason, "usage": usage(gen.stats), "stats": public_stats(gen.stats)}


def _stream(head: dict, gen: Generation):
    answer: list[str] = []

    def delta(text: str) -> dict:
        answer.append(text)
        return {"type": "delta", "text": text}

    return sse_events(gen.deltas(), delta, lambda: [{"type": "result", **head, "answer": "".join(answer), **_tail(gen)}],
                      lambda exc: {"type": "error", **exc.body()})
