"""Request bodies, as pydantic models: the OpenAPI schema clients and the fuzzer read.

Models are strict (a number is not a string, a bool is not 0/1) and every bound the engine
enforces is in the schema, so a request that passes validation can run, and one the server
cannot serve fails validation (422) rather than passing it to be refused: an apply must have a
snippet or an instruction with some text; `logprobs` may only be false; `tool_choice` only
`none` or `auto` (this server never calls tools: answers are text). `max_tokens` has no maximum
here: the app writes the server's limit into its OpenAPI schema (`app.py`). Unknown fields are
ignored, as OpenAI's API does. `streamed` documents the server-sent events a route answers with
when `stream` is true (their models: events.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

import re

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from engine.choices import FORMS, MODES


def _valid_unicode(value: str) -> str:
    # JSON may spell a lone surrogate (\ud800); the tokenizer cannot encode one.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text must be valid Unicode: unpaired surrogate U+{ord(value[exc.start]):04X} "
                         f"at character {exc.start}") from None
    return value


def _no_control(value: str) -> str:
    # A path is a label (language detection, diff headers): a NUL or a line break in it is an attack.
    for i, c in enumerate(value):
        if ord(c) < 0x20 or ord(c) == 0x7F:
            raise ValueError(f"must not contain control characters: U+{ord(c):04X} at character {i}")
    return value


# Whitespace as Python's str.isspace and JSON Schema's regular expressions (ECMA-262 \\s) count it,
# and the byte order mark: a text of these alone is empty to the pipeline and to the schema alike.
_BLANK = "\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
HAS_TEXT = f"[^{_BLANK}]"  # a pattern: at least one character that is not blank
_HAS_TEXT = re.compile(HAS_TEXT)


EMPTY_SNIPPET = "empty_snippet"  # the error code of an apply that asks for nothing (as the pipeline names it)


def has_text(value: str | None) -> bool:
    return value is not None and _HAS_TEXT.search(value) is not None


def _integral(value):
    # JSON Schema counts 2.0 as an integer; strict pydantic would not.
    return int(value) if isinstance(value, float) and value.is_integer() else value


def integer(**bounds):
    """A strict int within `bounds` that also takes integral floats (bounds first: they stay in the schema)."""
    return Annotated[int, Field(**bounds), BeforeValidator(_integral)]


Text = Annotated[str, AfterValidator(_valid_unicode)]
StopString = Annotated[str, StringConstraints(min_length=1, max_length=256), AfterValidator(_valid_unicode)]
Question = Annotated[str, StringConstraints(min_length=1), AfterValidator(_valid_unicode)]
DocumentId = Annotated[str, StringConstraints(max_length=256), AfterValidator(_valid_unicode)]
PathText = Annotated[str, StringConstraints(max_length=4096), AfterValidator(_valid_unicode), AfterValidator(_no_control),
                     Field(json_schema_extra={"pattern": "^[^\\u0000-\\u001f\\u007f]*$"})]
ModelName = Annotated[str, Field(max_length=512, description="The served model's name (GET /v1/models); optional")]
MaxTokens = Annotated[integer(ge=1) | None, Field(
    description="Tokens to generate at most; default: the server's default answer length (EDITAPPLY_DEFAULT_MAX_TOKENS, "
                "1024), at most the rest of the context")]
ApplyMaxTokens = Annotated[integer(ge=1) | None, Field(
    description="Tokens the model may write at most; default: the expected file's size plus a margin")]


class Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


class Sampling(Body):
    temperature: float | None = Field(None, ge=0, le=2, description="0 = greedy")
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: integer(ge=0, le=1_000_000) | None = Field(None, description="0 = off (an extension)")
    seed: integer(ge=0, lt=2**63) | None = None
    stop: StopString | Annotated[list[StopString], Field(max_length=4)] | None = Field(
        None, description="Up to 4 strings; the text is cut before the first one generated")
    max_tokens: MaxTokens = None


class TextPart(Body):
    type: Literal["text"]
    text: Text


Content = Text | list[TextPart]


class Message(Body):
    role: Literal["system", "developer", "user", "assistant"]
    content: Content
    name: str | None = None


class Prediction(Body):
    """OpenAI's predicted output: text the answer is expected to repeat (the first lookup source)."""

    type: Literal["content"]
    content: Content


class StreamOptions(Body):
    include_usage: bool = False


class ChatCompletionRequest(Sampling):
    model: ModelName | None = None
    messages: list[Message] = Field(min_length=1, max_length=4096)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_completion_tokens: MaxTokens = None
    n: integer(ge=1, le=1) | None = Field(None, description="Only 1 is supported")
    prediction: Prediction | None = None
    logprobs: Literal[False] | None = Field(None, description="Not supported: false or absent")
    tools: list[dict] | None = Field(None, max_length=128, description="Accepted, never called: this server answers "
                                                                        "with text (see tool_choice)")
    tool_choice: Literal["none", "auto"] | None = Field(
        None, description="'none' or 'auto' (both answered with text); this server makes no tool calls, so 'required' "
                          "or a named function cannot be honoured and fail validation")
    user: str | None = None


class ApplyRequestBody(Body):
    """The fields of `engine.apply.pipeline.ApplyRequest`, plus `model` and `stream`. A snippet or
    an instruction (or both) must hold some text: the schema says so (`anyOf`), and so does the
    validator, with the same characters counted as blank."""

    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": ["edit_snippet"], "properties": {"edit_snippet": {"type": "string", "pattern": HAS_TEXT}}},
        {"required": ["instruction"], "properties": {"instruction": {"type": "string", "pattern": HAS_TEXT}}},
    ]})

    model: ModelName | None = None
    initial_code: Text = Field(description="The file as it is now")
    edit_snippet: Text | None = Field(
        None, description="The lazy edit snippet ('... existing code ...' marks elided code), or a unified diff; "
                          "empty or absent with an instruction = rewrite by instruction")
    instruction: Text | None = Field(None, description="What the edit does, in words")
    language: str | None = Field(None, max_length=64, description="Language name; default: from `path`")
    path: PathText | None = Field(None, description="The file's name: picks the language and labels the diff (no file is "
                                                     "read or written; '..', leading '/' and control characters never "
                                                     "reach the diff headers)")
    mode: Literal[MODES] = Field(
        "auto", description="auto: the deterministic merge when it validates; where the snippet can be read several "
                            "ways, the model ranks the readings; else the model writes what the merge could not place")
    prompt_form: Literal[FORMS] | None = None
    reading: integer(ge=1) | None = Field(None, description="For a snippet that can be read several ways: take reading N "
                                                        "(1-based, as a refusal's `readings` list them)")
    use_prediction: bool = Field(True, description="Draft from the predicted merge (false: from the file and snippet only)")
    stream: bool = False
    max_tokens: ApplyMaxTokens = None

    @model_validator(mode="after")
    def _asks_for_something(self):
        if not has_text(self.edit_snippet) and not has_text(self.instruction):
            raise PydanticCustomError(EMPTY_SNIPPET, "nothing to apply: give edit_snippet or instruction (neither holds "
                                                     "any text)")
        return self


class Document(Body):
    id: DocumentId | None = None
    text: Text


class RagRequest(Sampling):
    model: ModelName | None = None
    documents: list[Document] = Field(min_length=1, max_length=256)
    question: Question
    stream: bool = False


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


ERRORS = {status: {"model": ErrorBody, "description": what} for status, what in (
    (400, "Malformed JSON, invalid UTF-8, or a request over the context limit"),
    (401, "Missing or wrong API key"),
    (404, "Unknown model"),
    (413, "Request body over the size limit, or an apply input over the input limits"),
    (415, "Body is not JSON"),
    (422, "A field failed validation"),
    (503, "Engine or merge pool full, or the engine unreachable (a vLLM backend down, the engine's process gone); "
          "retry after Retry-After seconds"),
)}


def streamed(events: str, models: tuple[type[BaseModel], ...], answer: type[BaseModel] | None = None) -> dict:
    """The 200 response of a route that streams when `stream` is true: JSON (an `answer` where the
    route declares one), or server-sent events, each event's JSON one of `models` (events.py;
    `x-events` refers to their schemas)."""
    refs = {"oneOf": [{"$ref": f"#/components/schemas/{m.__name__}"} for m in models]}
    json_schema = {"$ref": f"#/components/schemas/{answer.__name__}"} if answer else {"type": "object"}
    return {200: {"description": "The answer as JSON; with `stream: true`, server-sent events (`data: <json>` lines, "
                                 f"then `data: [DONE]`): {events}",
                  "content": {"application/json": {"schema": json_schema},
                              "text/event-stream": {"schema": {"type": "string", "description": events},
                                                    "x-events": refs}}}}


class HealthDown(BaseModel):
    """`GET /health` when the engine is gone (its process died): the server is up, the engine not."""

    status: Literal["engine_unavailable"]
    model: str
    error: str
