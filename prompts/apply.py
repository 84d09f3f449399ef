"""Render the apply prompt (templates beside this file) and parse the model's answer back to a file.

Three prompt forms:
  * `rewrite`     — instruction, original code and update snippet; the model writes the whole file;
  * `draft`       — original code, update snippet and a mechanical (deterministic, possibly
                    partial) merge to check and correct. Small models copy strongly; here copying
                    works for the user, and lookup drafting on the draft is accepted almost
                    entirely. No instruction: given one (a commit subject on the dev set), the
                    0.5B model made the change its own way instead of checking the draft
                    (bench/RESULTS.md, "Apply quality");
  * `instruction` — no snippet: the instruction and the code to rewrite (the whole file, or the
                    top-level definitions the instruction names).
The assistant turn is pre-filled with the opening fence, so the answer is the file itself followed
by a closing fence, and the predicted output (the merge) drafts it from the first token. The fence
is longer than any backtick run that starts a line of the code, so a file holding ``` lines (a
markdown docstring) is not cut short.

Prompts see LF line endings only; the caller restores the original's endings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, StrictUndefined

from engine.choices import FORMS  # the forms a request with a snippet may choose

HERE = Path(__file__).parent
# Fence language tags models know for each language name.
FENCE_TAGS = {"python": "python", "javascript": "javascript", "typescript": "typescript", "tsx": "tsx",
              "go": "go", "rust": "rust", "java": "java", "c": "c", "cpp": "cpp", "ruby": "ruby",
              "csharp": "csharp", "bash": "bash"}
_BACKTICKS = re.compile(r"^[ \t]*(`{3,})", re.M)


@lru_cache(maxsize=None)
def _template(name: str):
    env = Environment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string((HERE / name).read_text())


@lru_cache(maxsize=None)
def system_prompt(name: str = "apply_system.txt") -> str:
    return (HERE / name).read_text().strip()


@dataclass
class ApplyPrompt:
    messages: list[dict]
    answer_prefix: str  # pre-filled start of the assistant turn
    fence_close: str  # what ends the file in the answer
    form: str = "rewrite"

    def prompt_ids(self, tokenizer) -> list[int]:
        # Code and snippets are text: special-token spellings inside them stay text.
        return tokenizer.encode_chat(self.messages) + tokenizer.encode(self.answer_prefix)

    def predicted_answer(self, merged: str) -> str:
        """What the model should write if `merged` is right: the lookup drafter's first source."""
        return _with_newline(merged) + self.fence_close

    def prediction_ids(self, tokenizer, merged: str) -> list[int]:
        """`predicted_answer(merged)`'s ids; the merge's from the tokenizer's cache where the prompt
        shows it as its draft (or as the file)."""
        return tokenizer.encode_pieces([_with_newline(merged), self.fence_close])

    def parse(self, answer: str, original: str) -> str:
        """The file from the model's answer to this prompt (see `parse_answer`)."""
        return parse_answer(answer, original, self.fence_close)


def fence_for(*texts: str) -> str:
    """A backtick fence longer than any backtick run that starts a line of `texts` (at least ```)."""
    longest = max((len(m) for t in texts for m in _BACKTICKS.findall(t or "")), default=0)
    return "`" * max(3, longest + 1)


def build_apply_prompt(original: str, snippet: str, instruction: str | None = None,
                       language: str | None = None, draft: str | None = None, form: str = "rewrite",
                       part: str | None = None) -> ApplyPrompt:
    """The prompt for merging `snippet` into `original`; `form='draft'` with a `draft` shows the
    merge. `part` says what `original` is when it is a stretch of the file (e.g. "lines 40-75 of
    app.py"): the model then writes that stretch only."""
    if form not in FORMS:
        raise ValueError(f"prompt form must be one of {FORMS}, got {form!r}")
    fence = fence_for(original, snippet, draft or "")
    values = dict(instruction=instruction or "", language=language or "", original=_with_newline(original),
                  snippet=_with_newline(snippet), draft=_with_newline(draft or ""), part=part or "")
    drafted = form == "draft" and draft is not None
    user = _render_around("apply_draft_user.jinja" if drafted else "apply_user.jinja", values)
    return _prompt("apply_system.txt", user, language, fence, "draft" if drafted else "rewrite")


def build_instruction_prompt(code: str, instruction: str, language: str | None = None,
                             part: str | None = None) -> ApplyPrompt:
    """The prompt for an instruction without a snippet. `part` says what `code` is when it is not
    the whole file (e.g. "the definitions parse_args, main of cli.py")."""
    fence = fence_for(code)
    user = _render_around("apply_instruction_user.jinja", dict(
        instruction=instruction, code=_with_newline(code), language=language or "", part=part or ""))
    return _prompt("apply_instruction_system.txt", user, language, fence, "instruction")


_HOLES = {"original": "\ue002", "code": "\ue002", "draft": "\ue003"}  # private-use characters
_HOLE = re.compile("([\ue002\ue003])")


def _render_around(name: str, values: dict) -> list[str] | str:
    """The template rendered as pieces, the file and the draft each a piece of its own, so that
    a file applied to again, its `original` lookup source and a prediction equal to the draft
    are tokenized once (`Tokenizer.encode_pieces`). One string where a text holds a hole's
    character already."""
    if any(h in v for v in values.values() for h in _HOLES.values()):
        return _template(name).render(**values)
    holed = {k: _HOLES[k] if k in _HOLES and values[k] else v for k, v in values.items()}
    texts = {_HOLES[k]: values[k] for k in values if k in _HOLES}
    return [texts.get(p, p) for p in _HOLE.split(_template(name).render(**holed))]


def _prompt(system: str, user: list[str] | str, language: str | None, fence: str, form: str) -> ApplyPrompt:
    tag = FENCE_TAGS.get(language or "", "")
    return ApplyPrompt(
        messages=[{"role": "system", "content": system_prompt(system)}, {"role": "user", "content": user}],
        answer_prefix=f"{fence}{tag}\n",
        fence_close=fence,
        form=form,
    )


def parse_answer(answer: str, original: str, fence: str = "```") -> str:
    """The file from the model's answer (which follows the pre-filled opening fence), with LF endings.

    Cuts at the closing fence (a line that is exactly `fence`), and gives the result the original
    file's final-newline convention. A CRLF `original` gets CRLF throughout; the apply pipeline
    instead passes the LF form of the original and restores endings line by line (mixed files).
    """
    lines = answer.replace("\r\n", "\n").split("\n")
    for i, line in enumerate(lines):
        if line.strip() == fence:
            lines = lines[:i]
            break
    else:
        # No closing fence (cut off by max_tokens): a trailing partial line is kept as written.
        if lines and lines[-1] == "":
            lines.pop()
    body = "\n".join(lines)
    if body and (original.endswith("\n") or not original):
        body += "\n"
    return body.replace("\n", "\r\n") if "\r\n" in original else body


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") or not text else text + "\n"
