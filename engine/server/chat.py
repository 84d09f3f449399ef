"""`POST /v1/chat/completions`, OpenAI-compatible (non-streaming and SSE).

Supported: messages (text content, or lists of text parts), model, temperature, top_p, top_k (an
extension), max_tokens / max_completion_tokens (default: `EDITAPPLY_DEFAULT_MAX_TOKENS`, 1024, at
most the rest of the context), stop (the text is cut before the first stop
string, as OpenAI does), seed, stream with stream_options.include_usage, tools with tool_choice
`none` or `auto` (answered with text: this server makes no tool calls, so the schema refuses
`required` and named functions, as it refuses `logprobs: true`), and predicted outputs:
`prediction: {type: "content", content}` is the lookup drafter's first source, and
`usage.completion_tokens_details.{accepted,rejected}_prediction_tokens` count the draft tokens
verification accepted and rejected. Each answer also carries `stats` (steps, tokens per step...).

A last user message of the form `<instruction>…</instruction><code>…</code><update>…</update>`
(instruction optional; the Morph/Relace apply format) is an apply request: the answer is the
merged file, from the apply pipeline. Streamed, it arrives as one content delta once merged. Its
`model` may name anything (assistants' configs carry `morph-v3-fast`, `relace-apply-3`...): the
served model applies. A merge that does not validate is an error (`apply.refused`: 422, or an
error event once streamed), never an answer.
"""

from __future__ import annotations

import re
import time
import uuid

from fastapi import APIRouter
from fastapi import Request as HTTPRequest
from jinja2.exceptions import TemplateError

from engine.apply.errors import ApplyError
from engine.apply.pipeline import ApplyRequest
from engine.apply.text import BOM
from engine.types import Request, SamplingParams
from engine.server.apply import HTTPApply, apply_error, refused
from engine.server.events import CHAT_EVENTS
from engine.server.errors import APIError
from engine.server.generation import Generation, SSEResponse, public_stats, sse_events, stops_of, usage
from engine.server.schemas import ERRORS, ChatCompletionRequest, streamed
from engine.server.state import ServerState, get_state, offload

ROUTE = "/v1/chat/completions"
router = APIRouter()
STREAM_EVENTS = ('OpenAI chat.completion.chunk objects: the role, content deltas, a last choice chunk with '
                 'finish_reason and stats, and with stream_options.include_usage a chunk with usage and no choices; '
                 'an error after the stream started is {"error": {...}}')

APPLY_FORM = re.compile(
    r"^\s*(?:<instruction>(?P<instruction>.*?)</instruction>\s*)?"
    r"<code>(?P<code>.*)</code>\s*<update>(?P<update>.*)</update>\s*$", re.DOTALL)


def text_of(content) -> str:
    return content if isinstance(content, str) else "".join(part.text for part in content)


def _prompt(tokenizer, messages: list[dict], prediction: str | None) -> tuple[list[int], dict]:
    try:
        ids = tokenizer.encode_chat(messages)
    except (TemplateError, ValueError) as exc:
        raise APIError(400, f"the messages cannot be rendered with the model's chat template: {exc}", param="messages") from None
    return ids, ({"prediction": tokenizer.encode(prediction)} if prediction else {})


@router.post(ROUTE, responses={**ERRORS, **streamed(STREAM_EVENTS, CHAT_EVENTS)}, summary="OpenAI-compatible chat completion")
async def chat_completions(body: ChatCompletionRequest, http: HTTPRequest):
    state = get_state(http)
    last = body.messages[-1]
    if last.role == "user" and (form := APPLY_FORM.match(text_of(last.content))):
        return await _chat_apply(state, body, http, form)
    state.check_model(body.model)

    messages = [{"role": "system" if m.role == "developer" else m.role, "content": text_of(m.content)}
                for m in body.messages]
    prediction = text_of(body.prediction.content) if body.prediction else None
    state.check_prompt_size([m["content"] for m in messages], "messages")
    if prediction:
        state.check_prompt_size([prediction], "prediction")  # no answer could repeat it
    prompt_ids, sources = await offload(_prompt, state.tokenizer, messages, prediction)
    requested, param = _requested_tokens(body)
    stop = stops_of(body.stop)
    params = SamplingParams(temperature=1.0 if body.temperature is None else body.temperature,
                            top_p=1.0 if body.top_p is None else body.top_p, top_k=body.top_k or 0, seed=body.seed,
                            max_tokens=state.max_tokens(len(prompt_ids), requested, param), stop=stop)
    gen = Generation(state, state.submit(Request(prompt_ids, params, sources=sources)), ROUTE, stop)
    reply = Reply(state)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return SSEResponse(_stream(reply, gen, include_usage))
    text = await gen.text(http)
    return reply.completion(text, gen.openai_finish_reason, usage(gen.stats), public_stats(gen.stats))


class Reply:
    """The OpenAI envelopes of one answer."""

    def __init__(self, state: ServerState):
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = state.model_id

    def completion(self, text: str, finish_reason: str, usage: dict, stats: dict) -> dict:
        return {
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                         "logprobs": None, "finish_reason": finish_reason}],
            "usage": usage, "stats": stats,
        }

    def chunk(self, delta: dict, finish_reason: str | None = None, **extra) -> dict:
        return {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}], **extra,
        }

    def usage_chunk(self, usage: dict) -> dict:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "system_fingerprint": None, "choices": [], "usage": usage}


def _stream(reply: Reply, gen: Generation, include_usage: bool):
    def end() -> list[dict]:
        final = [reply.chunk({}, gen.openai_finish_reason, stats=public_stats(gen.stats))]
        return final + ([reply.usage_chunk(usage(gen.stats))] if include_usage else [])

    return sse_events(gen.deltas(), lambda text: reply.chunk({"content": text}), end, APIError.body,
                      start=(reply.chunk({"role": "assistant", "content": ""}),))


def _requested_tokens(body: ChatCompletionRequest) -> tuple[int | None, str]:
    """The output cap asked for and the field that asked (max_completion_tokens wins)."""
    if body.max_completion_tokens is not None:
        return body.max_completion_tokens, "max_completion_tokens"
    return body.max_tokens, "max_tokens"


async def _chat_apply(state: ServerState, body: ChatCompletionRequest, http: HTTPRequest, form: re.Match):
    code = form["code"].removeprefix("\n")
    max_tokens, param = _requested_tokens(body)
    state.check_tokens_limit(max_tokens, param)
    try:
        req = ApplyRequest(initial_code=code, edit_snippet=form["update"].removeprefix("\n").removeprefix(BOM),
                           instruction=(form["instruction"] or "").strip() or None, max_tokens=max_tokens)
    except ApplyError as exc:
        raise apply_error(exc) from None
    run = HTTPApply(state, req, ROUTE)
    await run.prepare(http)
    if run.disconnected:
        run.record()
        return None  # the client left during the merge
    if run.result is not None and not run.result.ok:  # the merge pool's answer: refused before any stream
        run.record()
        raise refused(run.result)
    reply = Reply(state)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return SSEResponse(_stream_apply(reply, run, include_usage))
    result = await run.run(http)
    if result is None:
        return None  # the client left
    if not result.ok:
        raise refused(result)
    return reply.completion(result.merged_code, "stop", usage(result.engine_stats()), result.stats.as_dict())


def _stream_apply(reply: Reply, run: HTTPApply, include_usage: bool):
    """The merged file as one content chunk once it is known (the model's raw answer may be a
    region of the file)."""
    def end() -> list[dict] | None:
        if run.result is None:
            return None  # the client left
        if not run.result.ok:
            return [refused(run.result).body()]
        final = [reply.chunk({"content": run.result.merged_code}), reply.chunk({}, "stop", stats=run.result.stats.as_dict())]
        return final + ([reply.usage_chunk(usage(run.result.engine_stats()))] if include_usage else [])

    return sse_events(run.deltas(), lambda text: None, end, APIError.body,
                      start=(reply.chunk({"role": "assistant", "content": ""}),))
