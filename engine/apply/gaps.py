"""Definitions that a snippet without markers leaves out between two of its anchors.

A snippet that elides with markers and shows two methods together deletes what lay between them:
its author marks what is left out, so a gap without a marker is a deletion (`def perimeter`
between `area` and `main`). A snippet with no marker at all -- a class rewritten with only its
changed methods -- may leave the others out because they are untouched, or because they are
gone: two readings (`Choices` key `gap@<snippet line>`, placement.py), the first keeping them
(`keep_left_out`). Between a real anchor and a lone closer (`});` of the object the snippet
rewrote) only the first is a reading: a brace says too little to delete whole definitions by.
"""

from __future__ import annotations

from engine.apply.anchor import RENAME_STEM, OriginalIndex, _skeleton, _stem, definition
from engine.apply.candidates import Candidate
from engine.apply.text import indent_of


def left_out(seg, index: OriginalIndex, cand: Candidate) -> list[tuple[int, int, int]]:
    """What the segment's middle leaves out of the original region it replaces (between its
    head and tail anchors): (first, stop, at) for each outermost definition there that the
    segment neither defines nor renames -- its original rows, from the blank lines, comments and
    decorators before it to the next definition's, and the segment row before which it goes
    back: before the next definition of the region that the segment shows, else before the
    tail anchor."""
    lo, hi = cand.head.orig_end, cand.tail.orig_start
    if cand.head is cand.tail or hi <= lo:
        return []
    ours = [line for line in seg if definition(line)]
    keys = {definition(line) for line in ours}
    heads = [r for r in range(lo, hi) if index.defines[r]]
    depth = min((len(indent_of(index.lines[r])) for r in heads), default=0)
    heads = [r for r in heads if len(indent_of(index.lines[r])) == depth]
    starts = [_trivia_start(index, r, lo) for r in heads] + [hi]
    shown = {index.defines[r]: r for r in heads if index.defines[r] in keys}
    out = []
    for n, r in enumerate(heads):
        key = index.defines[r]
        if key in keys or _renamed(index.lines[r], ours):
            continue
        later = next((index.defines[q] for q in heads[n + 1 :] if index.defines[q] in shown), None)
        at = cand.tail.seg_start
        if later is not None:
            row = next(s for s in range(cand.head.seg_end, cand.tail.seg_start) if definition(seg[s]) == later)
            at = _seg_trivia_start(seg, row, cand.head.seg_end)
        out.append((starts[n], starts[n + 1], at))
    return out


def keep_left_out(seg: list[str], index: OriginalIndex, found: list[tuple[int, int, int]]) -> tuple[list[str], int]:
    """`seg` with each definition `left_out` found put back, verbatim, where it stood; and how
    many lines that added."""
    out = list(seg)
    for at in sorted({at for _, _, at in found}, reverse=True):
        group = sorted((first, stop) for first, stop, a in found if a == at)
        kept = [line for first, stop in group for line in index.lines[first:stop]]
        # Blank lines the original has around what comes back, where the segment has none.
        first, stop = group[0][0], group[-1][1]
        if at > 0 and seg[at - 1].strip() and kept[0].strip():
            kept = _blank_run(index.lines, first - 1, -1) + kept
        if (at == len(seg) or seg[at].strip()) and kept[-1].strip():
            kept += _blank_run(index.lines, stop, +1)
        out[at:at] = kept
    return out, len(out) - len(seg)


def _blank_run(lines, at: int, step: int) -> list[str]:
    """The blank lines of `lines` from row `at` on, going `step`."""
    run = []
    while 0 <= at < len(lines) and not lines[at].strip():
        run.append(lines[at])
        at += step
    return run


def _trivia_start(index: OriginalIndex, r: int, lo: int) -> int:
    """Where the lines that go with the definition at row `r` start: the blank lines, comments
    and decorators right above it (not above `lo`)."""
    while r > lo and not index.defines[r - 1] and _leading(index.lines[r - 1]):
        r -= 1
    return r


def _seg_trivia_start(seg, row: int, lo: int) -> int:
    while row > lo and not definition(seg[row - 1]) and _leading(seg[row - 1]):
        row -= 1
    return row


def _leading(line: str) -> bool:
    """A line that goes with the definition below it: blank, a comment, a decorator."""
    text = line.strip()
    return not text or text.startswith(("#", "//", "/*", "*", "@", "--"))


def _renamed(line: str, ours: list[str]) -> bool:
    """Whether a definition line of `ours` renames original definition `line`."""
    name, skeleton = _skeleton(line)
    return any(_skeleton(o)[1] == skeleton and _stem(_skeleton(o)[0], name) >= RENAME_STEM for o in ours)
