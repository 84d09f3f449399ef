"""The edges of a placed segment: which original lines next to its anchors it replaces.

`place` (placement.py) finds where a segment's anchors sit; what lies beyond them is decided
here. Changed edge lines replace the original lines they resemble (`extend`). Lines past the
anchors are kept: above and below a marker they are what it stands for, and at a snippet end
without a marker the marker is implied, since the snippet shows none of that code -- except
where the snippet plainly gives new last lines for a construct it opened (`scope.py`) or ends
with the file's own last lines. New lines at such an open end, with code beyond them, may have
been meant to replace it: that is not plain, so it is an error (`Doubt.error`), never a guess.
"""

from __future__ import annotations

import itertools
import re

from engine.apply.anchor import OriginalIndex, definition, is_trivial, normalize
from engine.apply.confidence import IMPLIED_MARKER, NEW_ENDING, Doubt
from engine.apply.fuzzy import similarity
from engine.apply.scope import drops_definitions, open_construct, replaces_ending
from engine.apply.text import indent_of

EXTEND_THRESHOLD = 0.75  # similarity for a changed edge line to replace its neighbour
PROSE_THRESHOLD = 0.5  # the same for two comment or string lines opened alike (`_threshold`)
_PROSE = re.compile(r'^(?:"""|\'\'\'|///|//|/\*|#|--|"|\')')
WHOLE_FILE_SLACK = 2  # blank lines a whole-file snippet may leave out at each end


def whole_file(index: OriginalIndex, lines: list[str], i: int, start: int, k: int, end: int) -> bool:
    """Whether a snippet without markers is plainly the whole new file: its anchors leave no
    original code line unaccounted for at either end (at most WHOLE_FILE_SLACK blank lines).
    Anything else is a fragment, and the code beyond its ends is kept, as if markers stood there:
    a whole file that lacks its first import may have deleted it or just left it out.
    """
    top_gap, bottom_gap = start - i, (len(index) - end) - (len(lines) - k)
    dropped = [*index.lines[: max(top_gap, 0)], *index.lines[len(index) - max(bottom_gap, 0) :]]
    return max(top_gap, bottom_gap) <= WHOLE_FILE_SLACK and not any(line.strip() for line in dropped)


def head_edge(lines: list[str], index: OriginalIndex, i: int, start: int, lo: int, open_top: bool, doubt: Doubt) -> None:
    """The doubts about the code above the segment's first anchor, which is kept.

    Above a marker it is what the marker stands for. Without one (a snippet that starts
    mid-file), the marker is implied: the snippet shows no line of that code, so nothing says it
    is deleted. Unanchored snippet lines above the anchor are inserted there; when code lies
    above them, whether they were meant to replace it is not plain: an error.
    """
    above = [r for r in range(lo, start) if index.lines[r].strip()]
    if not open_top or not above:
        return
    doubt.note("implied_marker", f"no elision marker before the snippet, but it anchors at original line {start + 1}: "
               "the code above is kept", IMPLIED_MARKER)
    if any(line.strip() for line in lines[:i]):
        doubt.error("uncertain_edge", f"the snippet starts with {i} new line(s) above original line {start + 1} and has "
                    "no marker before them: they are inserted and the code above is kept, but they may have been "
                    "meant to replace it")


def tail_edge(lines: list[str], index: OriginalIndex, k: int, shown: int, end: int, hi: int, open_bottom: bool,
               doubt: Doubt) -> int:
    """Where the segment ends, and the doubts about the code below its last anchor.

    Above a marker that code is kept, as at the head. Without one, new last lines (`lines[k:]`)
    replace what lies between the anchor and the end of a construct the snippet opened (at or
    after original line `shown`, `scope.py`), or between the anchor and the file's last lines
    when the segment ends with them (`_file_end`); otherwise the marker is implied, and new last
    lines make the reading doubtful as at the head.
    """
    new = any(line.strip() for line in lines[k:])
    if not any(index.lines[r].strip() for r in range(end, hi)):
        return end
    if new and index.text is not None:
        construct = open_construct(index.text, index.lines, index.language, shown, end, hi)
        if construct and replaces_ending(list(index.lines[end : construct[1]]), lines[k:],
                                         indent_of(index.lines[construct[0]]), closed_only=not open_bottom):
            first, last = construct
            doubt.note("construct_ending", f"the snippet shows original lines {first + 1}-{end} and new last lines with no "
                       f"marker after them: they replace the rest of that construct (original lines {end + 1}-{last})",
                       NEW_ENDING)
            end, new = last, False
            if not open_bottom or not any(index.lines[r].strip() for r in range(end, hi)):
                return end
    if not open_bottom:
        return end
    if new and hi == len(index) and (last := _file_end(lines, index, k, end)) is not None:
        doubt.note("file_end", f"the snippet has no marker after its last lines, which are the file's last lines: "
                   f"what lies between (original lines {end + 1}-{last}) is replaced", NEW_ENDING)
        return last
    doubt.note("implied_marker", f"no elision marker after the snippet, but it anchors at original line {end}: "
               "the code below is kept", IMPLIED_MARKER)
    if new:
        doubt.error("uncertain_edge", f"the snippet ends with {len(lines) - k} new line(s) below original line {end} "
                    "and has no marker after them: they are inserted and the code below is kept, but they may have "
                    "been meant to replace it")
    return end


def _file_end(lines: list[str], index: OriginalIndex, k: int, end: int) -> int | None:
    """The end of the file when the segment's last lines equal the file's last lines (blank
    lines aside) and what they would replace is no bigger than the new lines before them and
    defines nothing they do not (a replacement, not a removal: `};` alone must not swallow the
    methods above it); else None."""
    ours = [r for r in range(k, len(lines)) if lines[r].strip()]
    theirs = [r for r in range(end, len(index)) if index.lines[r].strip()]
    same = 0
    while same < min(len(ours), len(theirs)) and normalize(lines[ours[-1 - same]]) == index.normal[theirs[-1 - same]]:
        same += 1
    if not same or len(theirs) - same > len(ours) - same:
        return None
    if drops_definitions([index.lines[r] for r in theirs], [lines[r] for r in ours]):
        return None
    return len(index)


def final_blank_lines(lines: list[str], index: OriginalIndex, start: int, end: int) -> list[str]:
    """A segment that ends the file ends with no more blank lines than the part it replaces:
    blank lines after a chat answer's last line are not an edit."""
    def trailing(rows) -> int:
        return len(rows) - len(list(itertools.dropwhile(lambda l: not l.strip(), reversed(rows))))

    extra = trailing(lines) - trailing(index.lines[start:end])
    return lines[: len(lines) - extra] if extra > 0 else lines


def blank_boundaries(lines: list[str], index: OriginalIndex, i: int, start: int, k: int, end: int) -> tuple[int, int]:
    """The span moved off a blank line that separates new lines from the code beyond a marker.

    New lines inserted above the anchors (`lines[:i]`) when the anchors start with a blank line
    matched to the original's blank after the elided code: that blank stays after the elided
    code and the segment's blank after the new lines, so the new method is set off on both sides
    (neither a blank lost nor one doubled). Mirrored below.
    """
    if (0 < i < len(lines) and lines[0].strip() and not lines[i].strip() and start < end
            and not index.lines[start].strip() and start > 0 and index.lines[start - 1].strip()):
        start += 1
    if (0 < k < len(lines) and lines[-1].strip() and not lines[k - 1].strip() and start < end
            and not index.lines[end - 1].strip() and end < len(index) and index.lines[end].strip()):
        end -= 1
    return start, end


def trim_blank_edges(lines: list[str], i: int, k: int) -> tuple[list[str], int, int]:
    """Unanchored blank lines at the segment's edges (next to a marker, or an implied one) say
    nothing: dropped. Returns the lines and the new bounds of the anchored part."""
    if not any(l.strip() for l in lines[k:]):
        lines = lines[:k]
    if not any(l.strip() for l in lines[:i]):
        lines, i, k = lines[i:], 0, k - i
    return lines, i, k


def extend(lines, index, at, orig, limit, step):
    """Let changed edge lines next to an anchor replace the original lines they resemble.

    Moves outward from segment line `at` / original line `orig` (exclusive bounds on the tail
    side, `step` +1) while the next pair is equal up to whitespace or similar enough; never over a
    blank line (a blank usually separates a new definition from its neighbour, which must stay).
    Returns the new bounds and whether a merely similar line was taken.
    """
    fuzzy = False
    edge = at if step < 0 else at - 1  # the anchor's outermost line (none for an empty anchor)
    if 0 <= edge < len(lines) and not lines[edge].strip():
        return at, orig, False
    while True:
        s, o = (at - 1, orig - 1) if step < 0 else (at, orig)
        if not (0 <= s < len(lines)) or (o < limit if step < 0 else o >= limit) or not lines[s].strip():
            return at, orig, fuzzy
        a, b = lines[s], index.lines[o]
        if index.level(a, o) is None:
            if is_trivial(a) or indent_of(a) != indent_of(b) or similarity(a, b) < _threshold(a, b) or _elsewhere(a, b, index):
                return at, orig, fuzzy
            fuzzy = True
        at, orig = at + step, orig + step


def _elsewhere(a: str, b: str, index: OriginalIndex) -> bool:
    """Whether `a` defines a name that `b` does not and the original defines elsewhere: then `a`
    is that other definition (`def f100` is not a changed `def f1`)."""
    key = definition(a)
    return key is not None and key != definition(b) and key in index.definitions


def _threshold(a: str, b: str) -> float:
    """How similar edge line `a` must be to original line `b` to replace it: EXTEND_THRESHOLD,
    or PROSE_THRESHOLD when both are comments or strings opened the same way (a reworded
    docstring keeps few of its characters, but is still the docstring)."""
    opener = _PROSE.match(a.strip())
    return PROSE_THRESHOLD if opener and b.strip().startswith(opener.group(0)) else EXTEND_THRESHOLD
