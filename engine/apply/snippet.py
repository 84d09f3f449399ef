"""Parsing a lazy edit snippet into code segments separated by elisions.

A chat model's answer is, e.g.::

    Here is the fix:
    ```python
    # ... existing code ...
    def area(self):
        return self.w * self.h
    # ... existing code ...
    ```

`parse_snippet` strips the prose and the fence, finds the elision markers (`markers.py`), and
returns a `Snippet`: the ordered `Segment`s of literal code between elisions, whether an elision
comes first / last, and the snippet's line-ending facts. Several fences in one answer are several
excerpts of the same file, so they are joined with an elision between them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.apply.errors import EmptySnippetError, MarkerOnlySnippetError
from engine.apply.languages import fence_tag_matches, resolve_language
from engine.apply.markers import find_markers
from engine.apply.text import split_lines

_FENCE_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
_TAG = re.compile(r"[^\s:{,]+")


@dataclass(frozen=True)
class Segment:
    """Consecutive literal code lines of the snippet (no endings).

    `first_line` is the 0-based line of the first one in the snippet's code (fences removed;
    between two fenced excerpts the boundary counts as one line).
    """

    lines: tuple[str, ...]
    first_line: int


@dataclass(frozen=True)
class Snippet:
    """A parsed snippet. An elision stands between every two segments."""

    segments: tuple[Segment, ...]
    markers: tuple[str, ...]  # the marker lines as written, in order
    leading_elision: bool
    trailing_elision: bool
    eol: str
    final_newline: bool
    language: str | None
    fenced: bool

    @property
    def has_markers(self) -> bool:
        """Whether the snippet elides anything (a marker, or several fenced excerpts)."""
        return bool(self.markers) or len(self.segments) > 1


def _is_prose(line: str) -> bool:
    """A line of chat prose ("Here is the updated function:") rather than code."""
    text = line.strip()
    if not text or line[0] in " \t" or text[-1] in "{}[](),;=\\":
        return False
    words = text.split()
    return len(words) >= 3 or (text.endswith(":") and text[0].isupper() and not any(c in text for c in "()=[]"))


def _fenced_blocks(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(fence tag, inner lines) of every fenced block; an unclosed fence runs to the end."""
    blocks, i = [], 0
    while i < len(lines):
        opened = _FENCE_OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        fence = opened["fence"]
        tag = _TAG.match(opened["info"])
        closer = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = next((j for j in range(i + 1, len(lines)) if closer.match(lines[j])), len(lines))
        blocks.append((tag.group(0).lower() if tag else "", lines[i + 1 : end]))
        i = end + 1
    return blocks


def strip_fences(text: str, language: str | None = None) -> tuple[list[list[str]], bool]:
    """The code excerpts of `text` (lists of lines) and whether they came out of fences.

    Fences count when the text starts with one or only prose precedes the first (so a
    ```` ``` ```` line inside a docstring of an unfenced snippet is left alone). Among several
    blocks, those tagged with the file's language or untagged are kept, in order; a block tagged
    otherwise (a shell command, say) is dropped unless nothing else is left.
    """
    lines = list(split_lines(text).lines)
    first = next((i for i, line in enumerate(lines) if _FENCE_OPEN.match(line)), None)
    if first is None or not all(_is_prose(l) or not l.strip() for l in lines[:first]):
        return [lines], False
    blocks = _fenced_blocks(lines)
    wanted = (language or "").lower()
    chosen = [b for tag, b in blocks if not tag or tag == wanted or fence_tag_matches(tag, language)]
    return chosen or [b for _, b in blocks], True


def parse_snippet(text: str, language: str | None = None, *, original: str | None = None) -> Snippet:
    """Parse a lazy edit snippet. `original`, when given, settles doubtful marker lines.

    Raises `EmptySnippetError` for a snippet with no code and `MarkerOnlySnippetError` for one
    whose only lines are elision markers.
    """
    if not text.strip():
        raise EmptySnippetError()
    language = resolve_language(language) or language
    facts = split_lines(text)
    excerpts, fenced = strip_fences(text, language)
    # The snippet as one sequence: code lines, and None for each elision (a marker line, or the
    # boundary between two fenced excerpts).
    items: list[str | None] = []
    markers: list[str] = []
    for n, lines in enumerate(excerpts):
        if n:
            items.append(None)
        rows = set(find_markers(lines, language, original))
        items.extend(None if i in rows else line for i, line in enumerate(lines))
        markers.extend(lines[i] for i in sorted(rows))
    segments: list[Segment] = []
    start = 0
    for end in [i for i, item in enumerate(items) if item is None] + [len(items)]:
        lines = items[start:end]
        if any(line.strip() for line in lines):  # blank lines between two elisions say nothing
            segments.append(Segment(tuple(lines), start))
        start = end + 1
    if not segments:
        if markers:
            raise MarkerOnlySnippetError(len(markers))
        raise EmptySnippetError()
    return Snippet(
        segments=tuple(segments),
        markers=tuple(markers),
        leading_elision=None in items[: segments[0].first_line],
        trailing_elision=None in items[segments[-1].first_line + len(segments[-1].lines) :],
        eol=facts.eol,
        final_newline=facts.final_newline,
        language=language,
        fenced=fenced,
    )
