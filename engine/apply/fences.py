"""Chat answers: the code excerpts inside markdown fences, and which file each one is for.

A chat model's answer wraps its snippet in fences, with prose around them, and may hold several
fenced blocks: more excerpts of the same file, a shell command, or code for *another* file (the
test that goes with the fix). `excerpts(text, language, path, original)` keeps the blocks for the
file being edited, in order:

* a block tagged with another language (```` ```bash ````) is dropped, unless nothing is left;
* a block is for a file when its fence says so (```` ```py title="app.py" ````, ```` ```app.py ````),
  or its first line is a comment naming it (`# app.py`, `// File: src/app.ts`, such a line is not
  code and is removed unless the original has it), or the last line of prose before it names it
  (`` In `app.py`: ``); a block with no such hint belongs to the file the previous block named;
* when `path` is known, blocks for other files are dropped; without it, blocks naming two
  different files are an error (`SnippetError`): which one to apply is not plain.

Fences count only when the text starts with one or only prose precedes the first, so a
```` ``` ```` line inside a docstring of an unfenced snippet is left alone.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from engine.apply.errors import SnippetError
from engine.apply.languages import detect_language, fence_tag_matches, resolve_language
from engine.apply.text import split_lines

_FENCE_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
_TAG = re.compile(r"[^\s:{,]+")
# A file name: a path with an extension (`src/app.ts`, `app.py`) or a well-known bare name.
_PATH = r"(?:[\w.@-]+/)*[\w@-][\w.@-]*\.[A-Za-z][\w]{0,9}|Makefile|Dockerfile"
_INFO_PATH = re.compile(rf"(?:^|[\s:])(?:(?:title|file|filename|path)=)?[\"']?({_PATH})[\"']?(?:$|\s)")
_COMMENT_PATH = re.compile(
    rf"^\s*(?:#|//|--|;|/\*|<!--)\s*(?:(?:file|filename|filepath|path)\s*:\s*)?`?({_PATH})`?\s*(?:\*/|-->)?\s*$", re.I)
# A sentence of a word or two: a capital, letters, and its end ("Sure!", "Done.", "Got it.").
_SHORT_SENTENCE = re.compile(r"[A-Z][a-z']*(?:,? [A-Za-z']+)?[!.?]")
_PROSE_PATH = re.compile(rf"(?:`|\*\*)({_PATH})(?:`|\*\*)")
# Files named in prose that are no source language of ours (`Reader.prototype.peek` is no file).
_OTHER_FILES = frozenset(".md .txt .rst .json .yaml .yml .toml .cfg .ini .html .css .scss .xml .sql .sh .lock".split())


@dataclass(frozen=True)
class Block:
    tag: str  # the fence's language tag, lowercased ('' when none)
    lines: list[str]
    hint: str | None  # the file this block says it is for


def is_prose(line: str) -> bool:
    """A line of chat prose ("Here is the updated function:", "Sure!") rather than code."""
    text = line.strip()
    if not text or line[0] in " \t" or text[-1] in "{}[](),;=\\":
        return False
    words = text.split()
    return (len(words) >= 3 or _SHORT_SENTENCE.fullmatch(text) is not None
            or (text.endswith(":") and text[0].isupper() and not any(c in text for c in "()=[]")))


def same_file(hint: str, path: str) -> bool:
    """Whether a file named `hint` in an answer is `path` (one is a path suffix of the other)."""
    a, b = (os.path.normpath(p).replace(os.sep, "/").lstrip("./") for p in (hint, path))
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def excerpts(text: str, language: str | None = None, path: str | None = None,
             original: str | None = None) -> tuple[list[list[str]], bool]:
    """The code excerpts of `text` for the file `path` (lists of lines), and whether they came
    out of fences (see the module docstring)."""
    lines = list(split_lines(text).lines)
    first = next((i for i, line in enumerate(lines) if _FENCE_OPEN.match(line)), None)
    if first is None or not all(is_prose(l) or not l.strip() for l in lines[:first]):
        return [_without_path_line(lines, path, original)], False
    blocks = _blocks(lines, original)
    wanted = (language or "").lower()
    kept = [b for b in blocks if not b.tag or b.tag == wanted or fence_tag_matches(b.tag, language)] or blocks
    named = {b.hint for b in kept if b.hint}
    if path:
        kept = [b for b in kept if b.hint is None or same_file(b.hint, path)] or kept
    elif len({os.path.basename(h) for h in named}) > 1:
        raise SnippetError(f"the answer holds code for several files ({', '.join(sorted(named))}): give the path of "
                           "the file to edit")
    return [b.lines for b in kept], True


def _blocks(lines: list[str], original: str | None) -> list[Block]:
    """Every fenced block, with its tag and file hint (an unclosed fence runs to the end)."""
    present = set(split_lines(original).lines) if original else set()
    blocks: list[Block] = []
    i, hint = 0, None
    while i < len(lines):
        opened = _FENCE_OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        fence, info = opened["fence"], opened["info"]
        tag = _TAG.match(info)
        closer = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = next((j for j in range(i + 1, len(lines)) if closer.match(lines[j])), len(lines))
        body = lines[i + 1 : end]
        said = _INFO_PATH.search(info) or _prose_hint(lines, i)
        named = _COMMENT_PATH.match(body[0]) if body else None
        if named and body[0] not in present:
            body = body[1:]
        found = (named or said).group(1) if (named or said) else None
        hint = found or hint
        blocks.append(Block(_language(tag.group(0)) if tag else "", body, hint))
        i = end + 1
    return blocks


def _language(tag: str) -> str:
    """A fence tag's language: its name or alias, or the language of a file name (```` ```app.py ````)."""
    if re.fullmatch(_PATH, tag):
        language = detect_language(tag)
        return "" if language == "text" else language
    return resolve_language(tag) or tag.lower()


def _prose_hint(lines: list[str], fence: int):
    """A file name in backticks or bold on the last non-blank prose line before a fence: one
    with a folder or a known source extension (`reader.js`, not `Reader.prototype.peek`)."""
    before = next((l for l in reversed(lines[:fence]) if l.strip()), "")
    found = _PROSE_PATH.findall(before) if is_prose(before) or before.rstrip().endswith(":") else []
    found = [name for name in found if "/" in name or detect_language(name) != "text"
             or os.path.splitext(name)[1].lower() in _OTHER_FILES]
    return re.search(rf"(?:`|\*\*)({re.escape(found[0])})(?:`|\*\*)", before) if len(set(found)) == 1 else None


def _without_path_line(lines: list[str], path: str | None, original: str | None) -> list[str]:
    """An unfenced snippet's first line, when it is a comment naming this very file (`// app.ts`)
    that the original lacks, is a label, not code."""
    named = _COMMENT_PATH.match(lines[0]) if lines and path else None
    if named and same_file(named.group(1), path) and lines[0] not in set(split_lines(original or "").lines):
        return lines[1:]
    return lines
