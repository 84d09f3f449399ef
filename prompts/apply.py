"""Render the apply prompt (templates beside this file) and parse the model's answer back to a file.

Two prompt forms:
  * `rewrite` — instruction, original code and update snippet; the model writes the whole file;
  * `draft`   — the same plus a mechanical (deterministic, possibly partial) merge to check and
                correct. Small models copy strongly; here copying works for the user, and lookup
                drafting on the draft is accepted almost entirely.
The assistant turn is pre-filled with the opening fence, so the answer is the file itself followed
by a closing fence, and the predicted output (the merge) drafts it from the first token.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, StrictUndefined

HERE = Path(__file__).parent
FORMS = ("rewrite", "draft")
# Fence language tags models know for each language name.
FENCE_TAGS = {"python": "python", "javascript": "javascript", "typescript": "typescript", "tsx": "tsx",
              "go": "go", "rust": "rust", "java": "java", "c": "c", "cpp": "cpp", "ruby": "ruby",
              "c_sharp": "csharp", "bash": "bash"}


@lru_cache(maxsize=None)
def _template(name: str):
    env = Environment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string((HERE / name).read_text())


def system_prompt() -> str:
    return (HERE / "apply_system.txt").read_text().strip()


@dataclass
class ApplyPrompt:
    messages: list[dict]
    answer_prefix: str  # pre-filled start of the assistant turn
    fence_close: str  # what ends the file in the answer

    def render(self, tokenizer) -> str:
        return tokenizer.apply_chat_template(self.messages, add_generation_prompt=True) + self.answer_prefix

    def prompt_ids(self, tokenizer) -> list[int]:
        ids = tokenizer.encode(self.render(tokenizer))
        if tokenizer.add_bos and (not ids or ids[0] != tokenizer.bos_id):
            ids = [tokenizer.bos_id] + ids
        return ids

    def predicted_answer(self, merged: str) -> str:
        """What the model should write if `merged` is right: the lookup drafter's first source."""
        return _with_newline(merged) + self.fence_close


def build_apply_prompt(original: str, snippet: str, instruction: str | None = None,
                       language: str | None = None, draft: str | None = None, form: str = "rewrite") -> ApplyPrompt:
    if form not in FORMS:
        raise ValueError(f"prompt form must be one of {FORMS}, got {form!r}")
    values = dict(instruction=instruction or "", language=language or "", original=_with_newline(original),
                  snippet=_with_newline(snippet), draft=_with_newline(draft or ""))
    name = "apply_draft_user.jinja" if form == "draft" and draft is not None else "apply_user.jinja"
    user = _template(name).render(**values)
    tag = FENCE_TAGS.get(language or "", "")
    return ApplyPrompt(
        messages=[{"role": "system", "content": system_prompt()}, {"role": "user", "content": user}],
        answer_prefix=f"```{tag}\n",
        fence_close="```",
    )


def parse_answer(answer: str, original: str) -> str:
    """The file from the model's answer (which follows the pre-filled opening fence).

    Cuts at the closing fence (a line that is exactly ``` ), and gives the result the original
    file's final-newline convention; CRLF originals get CRLF back.
    """
    text = answer.replace("\r\n", "\n")
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.strip() == "```":
            lines = lines[:i]
            break
    body = "\n".join(lines)
    crlf = "\r\n" in original
    if original.endswith(("\n", "\r\n")) or not original:
        body += "\n"
    return body.replace("\n", "\r\n") if crlf else body


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") or not text else text + "\n"
