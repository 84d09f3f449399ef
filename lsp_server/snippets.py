"""Finding an edit snippet in a buffer (a chat pane, a scratch file), for the code action.

* `fenced_block_at(text, line)`: the markdown fence around `line` (its opening and closing fence
  lines included, so the pipeline still sees the info string), or None. Fences pair as markdown
  pairs them: an opening fence of three or more backticks or tildes, closed by a bare fence of
  the same character at least as long.
* `named_file(block)`: the file the block says it is for: a path in the fence's info string
  (```` ```python src/app.py ````, ```` ```py title="app.py" ````) or a first code line that is only
  a comment naming a file (`# app.py`, `// File: src/app.ts`). The apply pipeline reads the same
  hints (engine/apply/fences.py) when it keeps the blocks for the file being edited.

No pygls here: positions are plain line numbers.

    >>> text = "Here:\\n```py app.py\\nx = 1\\n```\\n"
    >>> fenced_block_at(text, 2)
    '```py app.py\\nx = 1\\n```\\n'
    >>> named_file(fenced_block_at(text, 2))
    'app.py'
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# A file name: a path with an extension of letters and digits.
_PATH = r"(?:[\w.@-]+/)*[\w@-][\w.@-]*\.[A-Za-z]\w{0,9}"
_INFO_WORD = re.compile(rf"(?:(?:title|file|filename|path)=)?[\"']?({_PATH})[\"']?")
_COMMENT_PATH = re.compile(
    rf"^\s*(?:#|//|--|;|/\*|<!--)\s*(?:(?:file|filename|filepath|path)\s*:\s*)?`?({_PATH})`?\s*(?:\*/|-->)?\s*$", re.I)


def fenced_block_at(text: str, line: int) -> str | None:
    """The fenced block (fences included) that contains 0-based `line`, or None."""
    lines = re.findall(r"[^\n]*\n|[^\n]+$", text)
    opening: tuple[int, str] | None = None
    for i, current in enumerate(lines):
        match = _FENCE.match(current.rstrip("\r\n"))
        if match is None:
            continue
        fence, info = match.group(1), match.group(2).strip()
        if opening is None:
            if fence[0] == "`" and "`" in info:  # an inline code span, not a fence
                continue
            opening = (i, fence)
        elif fence[0] == opening[1][0] and len(fence) >= len(opening[1]) and not info:
            if opening[0] <= line <= i:
                return "".join(lines[opening[0] : i + 1])
            if line < opening[0]:
                return None
            opening = None
    return None


def named_file(block: str) -> str | None:
    """The file a fenced block names in its info string or its first code line, else None."""
    lines = re.findall(r"[^\n]*\n|[^\n]+$", block)
    if not lines or not (match := _FENCE.match(lines[0].rstrip("\r\n"))):
        return None
    words = match.group(2).split()
    # The first word is the language tag unless it is itself a path (```app.py).
    for word in words if words and re.fullmatch(_PATH, words[0]) else words[1:]:
        if hit := _INFO_WORD.fullmatch(word):
            return hit.group(1)
    if len(lines) > 1 and (hit := _COMMENT_PATH.match(lines[1].rstrip("\r\n"))):
        return hit.group(1)
    return None
