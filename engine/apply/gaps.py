"""Definitions that a snippet without markers leaves out between two of its anchors.

A snippet that elides with markers and shows two methods together deletes what lay between them:
its author marks what is left out, so a gap without a marker is a deletion (`def perimeter`
between `area` and `main`). A snippet with no marker at all -- a class rewritten with only its
changed methods -- may leave the others out because they are untouched or because they are
gone: two readings (`Choices` key `gap@<snippet line>`, placement.py). The untouched one reads
the snippet as if a marker stood where the definition was (`Snippet.split`).
"""

from __future__ import annotations

from engine.apply.anchor import RENAME_STEM, OriginalIndex, _skeleton, _stem, definition, is_trivial, normalize
from engine.apply.text import indent_of, line_matcher


def left_out(seg: tuple[str, ...], index: OriginalIndex, start: int, end: int, seg_from: int,
             seg_to: int) -> list[tuple[int, int, int]]:
    """(first row, end row, segment row) for each outermost definition in orig[start:end] that
    seg[seg_from:seg_to] neither defines nor renames: its original rows, and the segment row
    before which it stood (the first segment line matched to an original line after it)."""
    ours = [line for line in seg if definition(line)]
    keys = {definition(line) for line in ours}
    matcher = line_matcher(index.normal[start:end], [normalize(line) for line in seg[seg_from:seg_to]])
    blocks = [(start + a, seg_from + b) for a, b, size in matcher.get_matching_blocks() if size]
    out, r = [], start
    while r < end:
        key = index.defines[r]
        if key is None or key in keys or _renamed(index.lines[r], ours):
            r += 1
            continue
        stop = _extent(index, r, end)
        at = next((s for o, s in blocks if o >= stop), None)
        if at is not None and seg_from < at < seg_to:
            out.append((r, stop, at))
        r = stop
    return out


def _extent(index: OriginalIndex, r: int, end: int) -> int:
    """The end row of the definition at row `r`: its deeper-indented body and a closer at its
    depth, without trailing blank lines; at most `end`."""
    depth = len(indent_of(index.lines[r]))
    e = r + 1
    while e < end and (not index.lines[e].strip() or len(indent_of(index.lines[e])) > depth):
        e += 1
    if e < end and len(indent_of(index.lines[e])) == depth and is_trivial(index.lines[e]) and index.lines[e].strip():
        e += 1
    while e > r + 1 and not index.lines[e - 1].strip():
        e -= 1
    return e


def _renamed(line: str, ours: list[str]) -> bool:
    """Whether a definition line of the segment renames original definition `line`."""
    name, skeleton = _skeleton(line)
    return any(_skeleton(o)[1] == skeleton and _stem(_skeleton(o)[0], name) >= RENAME_STEM for o in ours)
