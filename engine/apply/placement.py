"""Choosing one span of the original for every snippet segment, in order, or saying why not.

Each segment gets its `candidates.candidates`. Segments must land in snippet order without
overlapping, which prunes candidates (a forward pass keeps those that can follow some placement
of the segments before, a backward pass those that can precede the segments after). Then,
repeatedly, a segment whose best candidate scores strictly higher than its runner-up is fixed
there, and the pruning runs again. What is left with two equally good candidates is *ambiguous*
and is not guessed; a segment whose candidates were all pruned is *out of order*; one with none
gets a fuzzy search between its placed neighbours, or, at a file boundary the snippet pins down
(no marker before its first / after its last line), becomes a pure insertion there.

Boundaries. With markers, a snippet that does not start with one starts at the top of the file:
the first segment replaces everything above its head anchor (the dev set's top-of-file
deletions, reported as a warning with less confidence, since a model may just have left the
marker out); the same holds at the end. A snippet without any marker is either the whole new
file or a fragment whose markers the model left out (`_whole_file` decides); a fragment keeps
the code around it, as if the markers were there.

Edges. Segment lines outside the anchors are inserted, except that a changed edge line right
next to its anchor (the signature of `def f(x, y):` above unchanged body lines) replaces the
original line it resembles, and blank lines next to a marker that match nothing are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.apply.anchor import EXACT, FUZZY, SPACE, OriginalIndex, is_trivial
from engine.apply.candidates import Candidate, candidates, deleted_lines
from engine.apply.errors import Problem
from engine.apply.fuzzy import fuzzy_candidates, similarity
from engine.apply.indent import reindent
from engine.apply.snippet import Snippet
from engine.apply.text import indent_of

EXTEND_THRESHOLD = 0.75  # similarity for a changed edge line to replace its neighbour
_TIE = 0.01  # fuzzy ratios this close are a tie
WHOLE_FILE_SLACK = 2


@dataclass(frozen=True)
class Placement:
    """Segment `segment` replaces orig[start:end] with `lines`."""

    segment: int
    start: int
    end: int
    lines: tuple[str, ...]
    level: int
    confidence: float
    notes: tuple[Problem, ...] = field(default=())


@dataclass(frozen=True)
class Failure:
    """Segment `segment` could not be placed: `status` is ambiguous, unmatched or out_of_order."""

    segment: int
    status: str
    reason: str


def _prune(options: list[list[Candidate]], n: int) -> None:
    """Keep only candidates that fit in order with some candidate of every other segment."""
    earliest = 0
    for opts in options:
        kept = [c for c in opts if c.start >= earliest]
        opts[:] = kept
        if kept:
            earliest = min(c.end for c in kept)
    latest = n
    for opts in reversed(options):
        kept = [c for c in opts if c.end <= latest]
        opts[:] = kept
        if kept:
            latest = max(c.start for c in kept)


def resolve(options: list[list[Candidate]], n: int, segs, index: OriginalIndex) -> list[list[Candidate]]:
    """Prune and fix decisive segments until nothing changes; one candidate left = placed.

    A segment is decisive when its best candidate scores strictly higher than the runner-up, or,
    among equal scores, deletes strictly fewer original lines (`candidates.deleted_lines`).
    """
    opts = [list(o) for o in options]
    deleted: dict[Candidate, int] = {}
    while True:
        _prune(opts, n)
        picks = []
        for j, o in enumerate(opts):
            top = [c for c in o if c.score == o[0].score] if len(o) >= 2 else []
            if len(top) == 1:
                picks.append((o[0].score, -j, o[0]))
            elif top:
                best = _fewest_deleted(top, segs[j].lines, index, deleted)
                if best is not None:
                    picks.append((best.score, -j, best))
        if not picks:
            return opts
        _, j, chosen = max(picks, key=lambda p: p[:2])
        opts[-j] = [chosen]


def _fewest_deleted(tied: list[Candidate], seg, index: OriginalIndex, cache: dict) -> Candidate | None:
    """The one candidate deleting strictly fewest original lines, or None on a tie.

    A span longer than the segment deletes at least the difference, so candidates are measured
    in order of that bound, and measuring stops once the bound passes the runner-up.
    """
    def bound(c: Candidate) -> int:
        seg_from, seg_to, orig_from, orig_to = c.bounds
        return max(0, (orig_to - orig_from) - (seg_to - seg_from))

    measured: list[tuple[int, int]] = []  # (deleted, position in tied)
    for n, c in sorted(enumerate(tied), key=lambda nc: bound(nc[1])):
        if len(measured) >= 2 and bound(c) > sorted(measured)[1][0]:
            break
        if c not in cache:
            cache[c] = deleted_lines(c, seg, index)
        measured.append((cache[c], n))
    measured.sort()
    return tied[measured[0][1]] if measured[0][0] < measured[1][0] else None


def place(snippet: Snippet, index: OriginalIndex) -> list[Placement | Failure]:
    """A `Placement` or a `Failure` for every segment of `snippet`, in segment order."""
    n, segs = len(index), snippet.segments
    last = len(segs) - 1
    pins = [(j == 0 and snippet.has_markers and not snippet.leading_elision,
             j == last and snippet.has_markers and not snippet.trailing_elision) for j in range(len(segs))]
    found = [candidates(s.lines, index, pinned=pins[j]) for j, s in enumerate(segs)]
    resolved = resolve(found, n, segs, index)
    # The original span each segment holds so far: its one candidate, later its placement.
    spans = [(o[0].start, o[0].end) if len(o) == 1 else None for o in resolved]
    out: list[Placement | Failure] = []
    for j, opts in enumerate(resolved):
        if len(opts) > 1:
            where = ", ".join(str(c.start + 1) for c in opts[:4])
            out.append(Failure(j, "ambiguous", f"its anchors match equally well at {len(opts)} places (original lines {where})"))
            continue
        if found[j] and (not opts or opts[0].score < found[j][0].score):
            # Its best match contradicts the order of the other segments: placing it at a weaker
            # match instead would be a guess.
            where = found[j][0].start + 1
            out.append(Failure(j, "out_of_order", f"its best match (original line {where}) is out of the snippet's order"))
            spans[j] = None
            continue
        lo = max((sp[1] for sp in spans[:j] if sp), default=0)
        hi = min((sp[0] for sp in spans[j + 1 :] if sp), default=n)
        result = _place_one(snippet, j, opts[0] if opts else None, index, lo, hi)
        spans[j] = (result.start, result.end) if isinstance(result, Placement) else None
        out.append(result)
    return out


def _place_one(snippet: Snippet, j: int, cand: Candidate | None, index: OriginalIndex, lo: int, hi: int) -> Placement | Failure:
    """Place segment `j` inside orig[lo:hi] at `cand` (or by a fuzzy search when None)."""
    seg = snippet.segments[j].lines
    explicit = snippet.has_markers
    pinned_top = j == 0 and not snippet.leading_elision
    pinned_bottom = j == len(snippet.segments) - 1 and not snippet.trailing_elision
    confidence = 1.0
    if cand is None:
        found = _unanchored(snippet, j, index, lo, hi, pinned_top, pinned_bottom)
        if not isinstance(found, tuple):
            return found
        cand, confidence = found
    notes: list[Problem] = []
    level = cand.level
    lines = list(seg)
    i, start = cand.head.seg_start, cand.start
    k, end = cand.tail.seg_end, cand.end
    top_gap, bottom_gap = start - i, (len(index) - end) - (len(seg) - k)
    if not explicit and _whole_file(top_gap, bottom_gap, len(index), len(seg)):
        if max(top_gap, bottom_gap) > WHOLE_FILE_SLACK:
            notes.append(Problem("whole_file", "the snippet has no markers and reaches one end of the file, so it is taken as "
                                 f"the whole new file: {max(top_gap, bottom_gap)} original lines at the other end are dropped", "warning"))
            confidence *= 0.6
        confidence *= 0.95 if top_gap > 0 or bottom_gap > 0 else 1.0
        return Placement(j, 0, len(index), tuple(lines), level, confidence, tuple(notes))
    # Head side: where the segment starts in the original, and which leading lines are inserted.
    if pinned_top and (explicit or top_gap <= 0):
        if top_gap > 0:
            notes.append(Problem("top_deleted", f"the snippet has no marker before its first line, so original "
                                 f"lines 1-{start} above its first anchor are replaced", "warning"))
            # Or the model left out the leading marker: doubt grows with what would be lost.
            confidence *= 0.6 if top_gap > 2 else 1.0
        start = lo
    else:
        if pinned_top:
            confidence *= 0.9
            notes.append(Problem("implied_marker", "no elision marker before the snippet, but it anchors at original "
                                 f"line {start + 1}: the code above is kept", "warning"))
        i, start, fuzzy = _extend(lines, index, i, start, lo, step=-1)
        if fuzzy:
            level, confidence = FUZZY, confidence * 0.8
        if not any(l.strip() for l in lines[:i]):
            del lines[:i]  # blank lines next to the marker that match nothing
    # Tail side, mirrored (`k` counted from the end: head-side lines may have been dropped).
    k = len(lines) - (len(seg) - k)
    if pinned_bottom and (explicit or bottom_gap <= 0):
        if hi - end > len(lines) - k:
            notes.append(Problem("bottom_deleted", f"the snippet has no marker after its last line, so original "
                                 f"lines {end + 1}-{hi} below its last anchor are replaced", "warning"))
            confidence *= 0.6 if hi - end - (len(lines) - k) > 2 else 1.0
        end = hi
    else:
        if pinned_bottom:
            confidence *= 0.9
            notes.append(Problem("implied_marker", "no elision marker after the snippet, but it anchors at original "
                                 f"line {end}: the code below is kept", "warning"))
        k, end, fuzzy = _extend(lines, index, k, end, hi, step=+1)
        if fuzzy:
            level, confidence = FUZZY, confidence * 0.8
        if not any(l.strip() for l in lines[k:]):
            del lines[k:]
    if cand.level != EXACT and level != FUZZY:
        lines = reindent(lines, seg, [(b.seg_start, b.orig_start, b.length) for b in (cand.head, cand.tail)], index.lines)
    confidence *= 0.9 if cand.level == SPACE else 1.0
    return Placement(j, start, end, tuple(lines), level, confidence, tuple(notes))


def _unanchored(snippet, j, index, lo, hi, pinned_top, pinned_bottom) -> tuple[Candidate, float] | Placement | Failure:
    """A segment none of whose lines occurs in orig[lo:hi]: a fuzzy candidate and its confidence,
    else a pure insertion at the file edge the snippet pins it to, else a failure."""
    seg = snippet.segments[j].lines
    if not snippet.has_markers and len(index) == 0:
        return Placement(j, 0, 0, seg, EXACT, 1.0)  # a new file: the snippet is all of it
    ranked = fuzzy_candidates(seg, index, lo, hi)
    if snippet.has_markers:  # a pinned side must stay at the file's edge
        if pinned_top:
            ranked = [(c, r) for c, r in ranked if c.start <= c.head.seg_start]
        if pinned_bottom:
            ranked = [(c, r) for c, r in ranked if len(index) - c.end <= len(seg) - c.tail.seg_end]
    if ranked:
        if len(ranked) > 1 and ranked[1][1] >= ranked[0][1] - _TIE and ranked[1][0].start != ranked[0][0].start:
            return Failure(j, "ambiguous", "it only matches fuzzily, equally well at several places")
        cand, ratio = ranked[0]
        return cand, 0.7 * ratio
    if snippet.has_markers and (pinned_top or pinned_bottom):
        at = lo if pinned_top else hi
        note = Problem("unanchored_insert", "nothing in it matches the original; inserted at the "
                       f"{'top' if pinned_top else 'end'} of the file as the snippet's markers say", "warning")
        return Placement(j, at, at, seg, EXACT, 0.9, (note,))
    return Failure(j, "unmatched", "none of its lines occurs in the original, even fuzzily")


def _whole_file(top_gap: int, bottom_gap: int, n: int, length: int) -> bool:
    """Whether a snippet without markers is the whole new file rather than a fragment.

    The gaps count original lines above / below its anchors that its own lines do not account
    for. It is the whole file when it leaves only a few such lines at the two ends (up to
    WHOLE_FILE_SLACK each, 5% of the file in all, none in a file under 20 lines), or when it
    reaches one end of the file exactly and is at least half the file's length: what is left over
    at the other end is code it deleted.
    """
    if top_gap <= WHOLE_FILE_SLACK and bottom_gap <= WHOLE_FILE_SLACK and max(top_gap, 0) + max(bottom_gap, 0) <= n // 20:
        return True
    return min(top_gap, bottom_gap) <= 0 and 2 * length >= n


def _extend(lines, index, at, orig, limit, step):
    """Let changed edge lines next to an anchor replace the original lines they resemble.

    Moves outward from segment line `at` / original line `orig` (exclusive bounds on the tail
    side, `step` +1) while the next pair is equal up to whitespace or similar enough; never over a
    blank line (a blank usually separates a new definition from its neighbour, which must stay).
    Returns the new bounds and whether a merely similar line was taken.
    """
    fuzzy = False
    edge = at if step < 0 else at - 1
    if not (0 <= edge < len(lines)) or not lines[edge].strip():
        return at, orig, False
    while True:
        s, o = (at - 1, orig - 1) if step < 0 else (at, orig)
        if not (0 <= s < len(lines)) or (o < limit if step < 0 else o >= limit) or not lines[s].strip():
            return at, orig, fuzzy
        a, b = lines[s], index.lines[o]
        if index.level(a, o) is None:
            if is_trivial(a) or similarity(a, b) < EXTEND_THRESHOLD or indent_of(a) != indent_of(b):
                return at, orig, fuzzy
            fuzzy = True
        at, orig = at + step, orig + step
