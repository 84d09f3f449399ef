"""Cheap limits, checked before any merge or model work.

An oversized request must be refused in milliseconds, not after the work it would cost: a 3 MB
file used to spend 30-50 s in the merge's candidate search before the model path's context check
refused it, stalling the server meanwhile.

* `check(req)`, first thing in `pipeline.prepare` (so in every front end): a request that asks
  for nothing (no snippet, no instruction), and a text over `LIMITS` in bytes or lines. The
  bounds keep the deterministic merge bounded, since its cost grows with both texts (about
  linearly: `python -m bench.merge_scale`; bench/HISTORY.md, "Robustness, second round", item 1).
  On the 2-core CI machine a whole-file answer of 16,000 lines merges in 0.3-0.9 s and one of
  50,000 lines of repeated code (every line matching in thousands of places) in ~1.2 s.
  No model context holds a file near the limits either (50,000 lines are some 500,000 tokens),
  so they refuse nothing any mode could serve.
* `check_context(req, tokenizer, context)`, before a request goes down the model path (the
  server, the CLI): the prompt holds the whole file, so a file with more tokens than the context
  can never run. `Tokenizer.min_tokens` bounds the count from the length alone; the exact count
  runs only when the bounds cannot decide, and is cached for the model path, which needs it.

Both limits are one environment variable apart (read here, once):

| variable | default | meaning |
| --- | --- | --- |
| `EDITAPPLY_MAX_INPUT_BYTES` | 2 MiB | largest file, snippet or instruction (UTF-8 bytes) |
| `EDITAPPLY_MAX_INPUT_LINES` | 50,000 | largest file, snippet or instruction (lines) |
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from engine.apply.errors import EmptySnippetError, FileOverContextError, InputTooLargeError

ENV = {"max_bytes": "EDITAPPLY_MAX_INPUT_BYTES", "max_lines": "EDITAPPLY_MAX_INPUT_LINES"}
# Code averages 3-4 characters a token: a prefix of 8 per token of room nearly always overflows it.
PREFIX_CHARS_PER_TOKEN = 8
CUT_SLACK = 16  # tokens a cut at a line start may add to a prefix's count (a token or two, in fact)
NOTHING_TO_APPLY = "nothing to apply: the edit snippet is empty and there is no instruction (give edit_snippet or instruction)"


@dataclass(frozen=True)
class Limits:
    max_bytes: int = 2 * 2**20  # per text: the file, the snippet, the instruction
    max_lines: int = 50_000

    def __post_init__(self):
        if self.max_bytes < 1 or self.max_lines < 1:
            raise ValueError(f"input limits must be positive, got {self.max_bytes} bytes, {self.max_lines} lines")

    @classmethod
    def from_env(cls, environ=None) -> Limits:
        env = os.environ if environ is None else environ
        values = {}
        for name, variable in ENV.items():
            if raw := env.get(variable):
                try:
                    values[name] = int(raw)
                except ValueError:
                    raise ValueError(f"{variable}={raw!r}: expected an integer") from None
        return cls(**values)


LIMITS = Limits.from_env()


def check(req, limits: Limits = LIMITS) -> None:
    """Refuse, before any work, a request over the limits (`InputTooLargeError`) or one that asks
    for nothing (`EmptySnippetError`). `req` is an `ApplyRequest`."""
    texts = (("the file", "initial_code", req.initial_code), ("the edit snippet", "edit_snippet", req.edit_snippet),
             ("the instruction", "instruction", req.instruction))
    for what, param, text in texts:
        if not text:
            continue
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limits.max_bytes:
            raise InputTooLargeError(what, param, f"{size:,} bytes", f"{limits.max_bytes:,} bytes", ENV["max_bytes"])
        lines = text.count("\n")
        if lines > limits.max_lines:
            raise InputTooLargeError(what, param, f"{lines:,} lines", f"{limits.max_lines:,} lines", ENV["max_lines"])
    if not (req.edit_snippet or "").strip() and not (req.instruction or "").strip():
        raise EmptySnippetError(NOTHING_TO_APPLY)


def check_context(req, tokenizer, context: int) -> None:
    """Refuse (`FileOverContextError`) a snippet or diff request whose file alone has more tokens
    than the model's `context` leaves for a prompt. Instruction-only requests pass: their prompt
    may hold only the definitions the instruction names (targets.py).

    Cheapest first: the lower bound from the length; the upper bound (a token covers a byte at
    least, one more for a leading '▁'); then the tokens of a prefix cut at a line start, which
    bound the whole from below but for a token or two at the cut (`CUT_SLACK`): a prefix of
    `PREFIX_CHARS_PER_TOKEN` characters per token of room, so a 1 MB file costs the tokenizing of
    some 130 KB, not of all of it. Only a file those cannot decide is tokenized whole (cached:
    the model path reads the same encoding)."""
    if not (req.edit_snippet or "").strip():
        return
    room = context - 1  # the answer needs a token at least
    text = req.initial_code
    if (low := tokenizer.min_tokens(text)) > room:
        raise FileOverContextError(low, context, exact=False)
    if len(text.encode("utf-8", "surrogatepass")) + 1 <= room:
        return
    cut = text.rfind("\n", 0, PREFIX_CHARS_PER_TOKEN * room) + 1
    if 0 < cut < len(text) and (low := len(tokenizer.encode(text[:cut])) - CUT_SLACK) > room:
        raise FileOverContextError(low, context, exact=False)
    if (tokens := len(tokenizer.encode_document(text))) > room:
        raise FileOverContextError(tokens, context, exact=True)
