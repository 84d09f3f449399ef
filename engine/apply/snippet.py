"""Parsing a lazy edit snippet into code segments separated by elisions.

A chat model's answer is, e.g.::

    Here is the fix:
    ```python
    # ... existing code ...
    def area(self):
        return self.w * self.h
    # ... existing code ...
    ```

`parse_snippet` strips the prose and the fences (`fences.py`, which also drops blocks meant for
other files), finds the elision markers (`markers.py`), and returns a `Snippet`: the ordered
`Segment`s of literal code between elisions, whether an elision comes first / last, and the
snippet's line-ending facts. Several fences for one file are several excerpts of it, joined with
an elision between them.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.apply.errors import EmptySnippetError, MarkerOnlySnippetError
from engine.apply.fences import excerpts
from engine.apply.languages import language_spec, resolve_language
from engine.apply.markers import find_markers
from engine.apply.text import BOM, split_lines


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

    def render(self, shown) -> str:
        """The segments `shown` (indices, in order) as the snippet wrote them, for a prompt: an
        elision marker between two of them, and at an end where the snippet elides (a segment
        before or after, or its own marker there), none where it does not -- whether a snippet
        ends with a marker is what some readings turn on."""
        comments = language_spec(self.language).line_comments
        marker = f"{comments[0] if comments else '//'} ... existing code ..."
        out: list[str] = []
        for j in shown:
            if j > 0 or self.leading_elision:
                out.append(marker)
            out.extend(self.segments[j].lines)
        last = len(self.segments) - 1
        if shown and (shown[-1] < last or self.trailing_elision):
            out.append(marker)
        return "\n".join(out) + "\n"


def parse_snippet(text: str, language: str | None = None, *, original: str | None = None,
                  path: str | None = None) -> Snippet:
    """Parse a lazy edit snippet. `original`, when given, settles doubtful marker lines; `path`
    picks the fenced blocks for this file out of an answer that holds several (`fences.py`).

    Raises `EmptySnippetError` for a snippet with no code and `MarkerOnlySnippetError` for one
    whose only lines are elision markers.
    """
    text = text.removeprefix(BOM)  # else the first marker line reads as code
    if not text.strip():
        raise EmptySnippetError()
    language = resolve_language(language) or language
    facts = split_lines(text)
    code, fenced = excerpts(text, language, path, original)
    # The snippet as one sequence: code lines, and None for each elision (a marker line, or the
    # boundary between two fenced excerpts).
    items: list[str | None] = []
    markers: list[str] = []
    for n, lines in enumerate(code):
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
