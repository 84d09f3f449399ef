"""Candidate spans: which stretch of the original a segment would replace.

A head block and a tail block (`anchor.py`) that fit together -- in order, or on one diagonal
when they overlap -- make a `Candidate`; so does a block alone (the rest of the segment is then
inserted). With the blocks of the example in `anchor.py`, orig[1:5] = `b c d e` is replaced by
`b c X e` (d became X).

Candidates are ranked by how far their anchors reach toward the segment's edges (the longest
prefix and suffix that match, as in the dev set's own mechanical check), then by whether they
write a definition header again beside the original's (`_misplaced`) or delete a copy of their
own anchor (`_echoes`), then by how many segment lines the anchors cover (weighted: a blank or a
brace says little about position, a line equal only up to whitespace less than an exact one),
and by how much original code they would drop (`dropped_lines`), see `Candidate.score`. A span whose anchors are too weak for what it deletes
is no candidate (`_drops_unshown`). Choosing among them, with the other segments' order, is
`placement.py`'s job.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections import Counter
from dataclasses import dataclass, replace

from engine.apply.anchor import (
    EXACT, RARE, TRIVIAL_WEIGHT, Block, OriginalIndex, anchor_blocks, definition, is_trivial, line_weight,
    new_definition_rows, new_definitions, normalize, twins,
)
from engine.apply.languages import parse_tree
from engine.apply.scope import construct_end, is_closer
from engine.apply.text import depth, line_matcher

NEAREST = 4  # with many anchor blocks, each is paired with this many nearest partners
WHOLE_SHARE = 0.5  # a segment sharing this share of its lines with the stretch's two ends is placed there,
WHOLE_EDGE = 3  # when each end shares at least this many significant lines
IN_PLACE_RUN = 3  # runs of braces this long on both sides of a line pin it (`_in_place`)


@dataclass(frozen=True)
class Candidate:
    """The original span [start, end) that a segment would replace, and its two anchors.

    `bounds` = (seg_from, seg_to, orig_from, orig_to) is what the splice covers: the anchors'
    outer edges.
    """

    head: Block
    tail: Block
    weight: float  # line weights of the segment lines the anchors cover
    level: int
    reach: int = 0  # non-blank segment lines outside the anchors
    drops: int = 0  # non-blank original lines in the span that no segment line matches
    echoes: int = 0  # of those, the ones that are nothing but a copy of an anchor (`_echoes`)
    misplaced: int = 0  # definition headers written anew whose one original copy is next to the span (`_misplaced`)
    unique: int = 0  # anchored lines that occur once in the original
    shown: int = 0  # significant segment lines in the span that original lines match, in order (`aligned`)

    @property
    def start(self) -> int:
        return self.head.orig_start

    @property
    def end(self) -> int:
        return self.tail.orig_end

    @property
    def bounds(self) -> tuple[int, int, int, int]:
        return self.head.seg_start, self.tail.seg_end, self.start, self.end

    @property
    def deviation(self) -> int:
        seg_from, seg_to, orig_from, orig_to = self.bounds
        return abs((orig_to - orig_from) - (seg_to - seg_from))

    @property
    def score(self) -> tuple[int, int, int, float, int, int, int, float]:
        """Higher is better: anchors reaching the segment's edges (the longest prefix and suffix
        that match); then fewer definitions the span writes again beside the original's
        (`_misplaced`); then fewer dropped copies of the anchors' own lines (`_echoes`); then the
        weight of their significant lines; then how many of them occur
        nowhere else in the original (a line found once says where it is; the asserts two tests
        share do not); then more significant segment lines the span shows in order (`shown`: of
        two spans anchored on `}` and `return None` alone, the one holding the segment's own
        lines); then fewer original code lines dropped (of two readings that differ by a
        blank or a brace, the one that keeps the second `return None` wins); then the whole
        anchor weight."""
        significant = sum(w for b in {self.head, self.tail} for w in b.weights if w > TRIVIAL_WEIGHT)
        return (-self.reach, -self.misplaced, -self.echoes, round(significant, 3), self.unique, self.shown,
                -self.drops, round(self.weight, 3))


def pair(head: Block, tail: Block) -> Candidate | None:
    """The best candidate made of `head` and `tail`, or None if they cannot fit together."""
    return _heaviest(pairs(head, tail))


def _heaviest(same_span: list[Candidate]) -> Candidate | None:
    """Of `pairs`' options, the one whose anchors keep more weight."""
    return max(same_span, key=lambda c: c.weight, default=None)


def pairs(head: Block, tail: Block) -> list[Candidate]:
    """The candidates made of `head` and `tail`, all over one span; none if they cannot fit
    together.

    Blocks on one diagonal may overlap (the segment is all context there). Otherwise they must be
    disjoint in both the segment and the original, and overlapping blocks give lines up: around a
    deletion, the context on both sides can repeat the deleted lines (`}`, a blank, a duplicated
    statement) and both anchors grow over them; around an insertion that repeats its context
    (a new block shaped like the one above it, a blank line on both sides), the tail grows back
    over the head's lines. Either the head gives up its last lines or the tail its first ones.
    """
    if head.seg_start > tail.seg_start:
        return []
    level = max(head.level, tail.level)
    if head.orig_start - head.seg_start == tail.orig_start - tail.seg_start and head.seg_end > tail.seg_start:
        weight = sum(head.weights) + sum(tail.weights[head.seg_end - tail.seg_start :])
        return [Candidate(head, tail, weight, level)]
    keep = min(tail.seg_start - head.seg_start, tail.orig_start - head.orig_start)
    drop = max(head.seg_end - tail.seg_start, head.orig_end - tail.orig_start, 0)
    options = [(head.cut(keep), tail)] if keep >= 1 else []
    options += [(head, tail.drop(drop))] if drop < tail.length else []
    return [
        Candidate(h, t, sum(h.weights) + sum(t.weights), level)
        for h, t in options
        if h.seg_end <= t.seg_start and h.orig_end <= t.orig_start
    ]


def _pairings(heads: list[Block], tails: list[Block]) -> list[tuple[Block, Block]]:
    """The (head, tail) pairs worth scoring. A common anchor line (`return nil`) yields hundreds of
    blocks, and far pairs only delete more: so each block of the scarcer side is paired with the
    NEAREST blocks of the other side (tails after a head, heads before a tail), plus all pairs of
    the NEAREST heaviest blocks of each side (the distinctive context)."""
    if len(heads) * len(tails) <= 64:
        return [(h, t) for h in heads for t in tails]
    out = set()
    if len(heads) <= len(tails):
        tails = sorted(tails, key=lambda b: b.orig_end)
        ends = [t.orig_end for t in tails]
        for h in heads:
            out.update((h, t) for t in tails[bisect.bisect_right(ends, h.orig_start) :][:NEAREST])
    else:
        heads = sorted(heads, key=lambda b: b.orig_start)
        starts = [h.orig_start for h in heads]
        for t in tails:
            k = bisect.bisect_left(starts, t.orig_end)
            out.update((h, t) for h in heads[max(0, k - NEAREST) : k])
    heavy_heads, heavy_tails = (sorted(blocks, key=lambda b: -sum(b.weights))[:NEAREST] for blocks in (heads, tails))
    out.update((h, t) for h in heavy_heads for t in heavy_tails)
    return list(out)


def _whole_span(seg: tuple[str, ...], index: OriginalIndex, lo: int, hi: int) -> Candidate | None:
    """The one candidate of a segment that starts and ends as orig[lo:hi] does and shares most
    of its lines with it at both ends (a whole file written back with a few lines changed): its
    common head and tail, found by one pass from each end -- where searching each line's places
    in a long, repetitive file would cost its length many times over."""
    ours = [normalize(line) for line in seg]
    theirs = index.normal[lo:hi]
    n = min(len(ours), len(theirs))
    head = next((i for i in range(n) if ours[i] != theirs[i]), n)
    tail = next((i for i in range(n - head) if ours[-1 - i] != theirs[-1 - i]), n - head)
    solid = lambda rows: sum(not is_trivial(seg[r]) for r in rows) >= WHOLE_EDGE
    if head + tail < WHOLE_SHARE * len(seg) or not solid(range(head)) or not solid(range(len(seg) - tail, len(seg))):
        return None
    level = lambda rows, at: tuple(line_weight(seg[r], index.level(seg[r], at + r - rows.start) or 1) for r in rows)
    h = Block(0, lo, level(range(0, head), lo), max(index.level(seg[r], lo + r) for r in range(head)))
    t_rows = range(len(seg) - tail, len(seg))
    t = Block(t_rows.start, hi - tail, level(t_rows, hi - tail), max(index.level(seg[r], hi - tail + r - t_rows.start)
                                                                      for r in t_rows))
    c = pair(h, t) if h.seg_end <= t.seg_start else Candidate(h, h, sum(h.weights), h.level)
    return None if c is None else replace(c, drops=dropped_lines(c, seg, index, code_only=True))


def _last_row(seg: tuple[str, ...]) -> int | None:
    """The segment's last non-blank row after its first; None for none."""
    return next((s for s in range(len(seg) - 1, 0, -1) if seg[s].strip()), None)


def _closing_tails(seg: tuple[str, ...], index: OriginalIndex, blocks: list[Block], hi: int, last: int | None,
                   ends) -> list[Block]:
    """A segment that ends with a lone closer (row `last`) and shows the line that opens it
    (`_opener_of`: `inherits(A, B, {` ... `});`, or `function alpha_4(x) {` below the end of the
    function before it): that closer is the construct's own, wherever the lines between went (a
    statement deleted above it) -- a tail anchor no line-by-line match finds, since `}` is
    everywhere. `blocks` are the anchor blocks, one of which must hold the opener; `ends(row)` is
    `construct_end` of an original row."""
    if last is None or not is_trivial(seg[last]) or index.text is None or (r := _opener_of(seg, last)) is None:
        return []
    out = []
    for b in blocks:
        if b.seg_start <= r < b.seg_end <= last:
            end = ends(b.orig_start + r - b.seg_start)
            if end is not None and b.orig_end <= end < hi and index.normal[end] == normalize(seg[last]):
                out.append(Block(last, end, (TRIVIAL_WEIGHT,), EXACT))
    return list(dict.fromkeys(out))


def _opener_of(seg: tuple[str, ...], last: int) -> int | None:
    """The row that opens the closer at row `last` by indentation: the nearest non-blank row above
    it at its depth, if that row ends with an opening bracket; else None."""
    above = next((r for r in range(last - 1, -1, -1) if seg[r].strip() and depth(seg[r]) <= depth(seg[last])), None)
    if above is None or depth(seg[above]) != depth(seg[last]) or not seg[above].rstrip().endswith(("{", "(", "[")):
        return None
    return above


def _drops_unshown(c: Candidate, seg: tuple[str, ...], index: OriginalIndex, ours: set[str], keys: set[str],
                   fragment: bool = False) -> bool:
    """Whether the span deletes what its anchors are too weak to say is deleted. Between two
    real anchors, code the snippet skips is plainly deleted (`def perimeter` between `area` and
    `main`); a lone brace is no such evidence: with two anchors of trivial lines only (`}`,
    blanks), no significant line the segment does not show may go. With one, no definition it
    does not show may go; likewise where an anchor's lines are all common (`return x;` `}`,
    each found more than RARE times: the end of any function), unless the segment writes a
    definition between its anchors (one renamed or moved there). In a snippet without markers
    (`fragment`), definitions a span leaves out are put back (`gaps.py`), so only the first rule
    holds there."""
    trivial = sum(all(w == TRIVIAL_WEIGHT for w in b.weights) for b in (c.head, c.tail))
    if trivial == 2 and c.head is not c.tail:
        if _in_place(c, seg):
            return False
        return any(not is_trivial(index.lines[p]) and index.normal[p] not in ours for p in range(c.start, c.end))
    common = any(_common(b, seg, index) for b in (c.head, c.tail)) \
        and not any(definition(line) for line in seg[c.head.seg_end : c.tail.seg_start])
    if fragment or not (trivial or common):
        return False
    return any(key and key not in keys for key in index.defines[c.start : c.end])


def _common(b: Block, seg: tuple[str, ...], index: OriginalIndex) -> bool:
    """Whether each line of the block is trivial or occurs more than RARE times in the original."""
    return all(is_trivial(seg[s]) or len(index.normal_at.get(normalize(seg[s]), ())) > RARE
               for s in range(b.seg_start, b.seg_end))


def _shifted_apart(c: Candidate, seg: tuple[str, ...], index: OriginalIndex) -> bool:
    """Whether the two anchors match at different depths (`shift`)."""
    shifts = {shift(c.head, seg, index), shift(c.tail, seg, index)}
    return c.head is not c.tail and None not in shifts and len(shifts) == 2


def _in_place(c: Candidate, seg: tuple[str, ...]) -> bool:
    """Whether the segment rewrites a line or few in place between two solid runs of braces and
    keywords: anchors on one diagonal, each of at least IN_PLACE_RUN non-blank lines, and as many
    lines written between them as the original has there (`i++; } else {`, one changed call,
    `} } } else {`)."""
    (seg_from, seg_to), (orig_from, orig_to) = (c.head.seg_end, c.tail.seg_start), (c.head.orig_end, c.tail.orig_start)
    solid = lambda b: sum(1 for s in range(b.seg_start, b.seg_end) if seg[s].strip()) >= IN_PLACE_RUN
    return 0 < seg_to - seg_from == orig_to - orig_from <= IN_PLACE_RUN and solid(c.head) and solid(c.tail)


def _misaligned(c: Candidate, seg: tuple[str, ...], index: OriginalIndex, last: int | None) -> bool:
    """Whether an anchor of braces and blanks alone sits at another depth than its partner: the
    head `i++;` matched where it is indented as written, the tail `}` `else {` matched eight
    columns deeper -- the closers of an inner block, not the segment's. Likewise the closer of
    the construct the segment's first line opens (`impl Method {` ... `}`), matched at another
    depth than that opener: a method's `}`, with the rest of the class beyond it (`last`: the
    segment's last non-blank row)."""
    if c.head is c.tail:
        return False
    if any(all(w == TRIVIAL_WEIGHT for w in b.weights) for b in (c.head, c.tail)) and _shifted_apart(c, seg, index):
        return True
    return _first_closer_shifted(c, seg, index, last)


def _first_closer_shifted(c: Candidate, seg: tuple[str, ...], index: OriginalIndex, last: int | None) -> bool:
    """Whether the tail matches row `last`, the closer of the construct the head's first row
    (the segment's first line) opens, at another depth than the head matches that opener."""
    if c.head.seg_start != 0 or last is None or not c.tail.seg_start <= last < c.tail.seg_end:
        return False
    opener, closer = seg[0], seg[last]
    if not opener.rstrip().endswith(("{", "(", "[")) or not is_closer(closer) or depth(closer) != depth(opener):
        return False
    matched = index.lines[c.tail.orig_start + last - c.tail.seg_start]
    return depth(matched) - depth(closer) != depth(index.lines[c.head.orig_start]) - depth(opener)


def shift(b: Block, seg, index: OriginalIndex) -> int | None:
    """How many columns deeper the original indents the block's first non-blank line than the
    segment; None for a block of blank lines."""
    s = next((s for s in range(b.seg_start, b.seg_end) if seg[s].strip()), None)
    if s is None:
        return None
    return depth(index.lines[b.orig_start + s - b.seg_start]) - depth(seg[s])


def _beheads(c: Candidate, seg: tuple[str, ...], index: OriginalIndex, keys: set[str], ends) -> bool:
    """Whether the span drops a definition's first line but keeps its end: `def post_dump` and the
    head of its docstring gone, the docstring's last lines kept as if they were the function's
    above (a new `.. versionchanged::` line matched in the wrong docstring). A deleted definition
    goes whole; its first line alone goes only where the segment writes a line in its place that
    defines something new or names it (a rename, `self.default = self.defaults = function`): a
    definition the original has elsewhere, written there, is context that did not anchor.
    `ends(row)` is `construct_end` of an original row."""
    written = seg[c.head.seg_end : c.tail.seg_start]
    if c.head is c.tail or any((key := definition(line)) and key not in index.definitions for line in written):
        return False
    written = " ".join(written)
    for p in range(c.head.orig_end, c.tail.orig_start):
        key = index.defines[p]
        if key and key not in keys and not re.search(rf"\b{re.escape(key.split()[-1])}\b", written) \
                and (end := ends(p)) is not None and end >= c.end:
            return True
    return False


def _blank_edges_given_up(c: Candidate, seg: tuple[str, ...]) -> Candidate | None:
    """`c` with the blank lines at its outer edges left unanchored, or None if it has none. A
    blank line written on both sides of a marker that elides nothing matches the one blank line
    between two segments' spans: both anchored on it, the spans overlap, and the segment that
    gives way would fall back to a far worse span. Unanchored, the blank line joins the
    original's (`edges.join_blank_lines`)."""
    head, tail = c.head, c.tail
    lead = next((k for k in range(head.length) if seg[head.seg_start + k].strip()), head.length)
    trail = next((k for k in range(tail.length) if seg[tail.seg_end - 1 - k].strip()), tail.length)
    if (not lead and not trail) or lead == head.length or trail == tail.length:
        return None
    if head == tail:
        block = head.drop(lead).cut(head.length - lead - trail)
        return _alone(block) if block.length else None
    return pair(head.drop(lead), tail.cut(tail.length - trail))


def _nearer_braces(c: Candidate, seg: tuple[str, ...], index: OriginalIndex,
                   pinned: list[Block] = ()) -> Candidate | None:
    """`c` with each anchor of braces and blanks alone moved to the copy of its lines nearest its
    partner (the same lines, indentation included), if that drops less original code; else None.
    Such an anchor says little about where it is: the segment `}` `}` `` `return None` over the
    original `}` `}` `` `}` `` `return None` grows its head `}` `}` `` on the first brace; cut
    where the tail `}` `` `return None` begins, it stands on the first brace and the span deletes
    the second, where the copy next to the tail deletes a blank line only. `c` is any of `pairs`'
    options (the same, upside down, needs the tail's). A closer found as its construct's end
    (`_closing_tails`, in `pinned`) stays where it is."""
    head, tail = c.head, c.tail
    if head == tail or head.seg_end > tail.seg_start or head.orig_end > tail.orig_start:
        return None
    trivial = lambda b: all(w == TRIVIAL_WEIGHT for w in b.weights)
    rows = lambda b, at: index.lines[at : at + b.length]
    moved = lambda b, at: replace(b, orig_start=at)
    if trivial(head):
        at = next((q for q in range(tail.orig_start - head.length, head.orig_start, -1)
                   if rows(head, q) == rows(head, head.orig_start)), None)
        head = head if at is None else moved(head, at)
    if trivial(tail) and tail not in pinned:
        at = next((q for q in range(head.orig_end, tail.orig_start) if rows(tail, q) == rows(tail, tail.orig_start)), None)
        tail = tail if at is None else moved(tail, at)
    if (head, tail) == (c.head, c.tail):
        return None
    v = Candidate(head, tail, c.weight, c.level)
    fewer = len(dropped_rows(v, seg, index, code_only=True)) < len(dropped_rows(c, seg, index, code_only=True))
    return v if fewer else None


def _alone(block: Block) -> Candidate:
    """`block` as both anchors: the rest of the segment inserted around it."""
    return Candidate(block, block, sum(block.weights), block.level)


def _singles(blocks: list[Block]) -> list[Block]:
    """Blocks to offer alone (the rest of the segment inserted): all of them, or when there are
    many, the heaviest NEAREST * 4."""
    unique = list(dict.fromkeys(blocks))
    if len(unique) <= 4 * NEAREST:
        return unique
    return sorted(unique, key=lambda b: -sum(b.weights))[: 4 * NEAREST]


def candidates(seg: tuple[str, ...], index: OriginalIndex, lo: int = 0, hi: int | None = None,
               fragment: bool = False) -> list[Candidate]:
    """Candidates for `seg` inside orig[lo:hi], best score first, one per distinct splice.

    Every fitting (head, tail) pair, plus each block alone (the other side inserted: a segment
    whose last lines are all new). `fragment`: a snippet without markers (`_drops_unshown`).
    """
    hi = len(index) if hi is None else hi
    if (whole := _whole_span(seg, index, lo, hi)) is not None:
        return [whole]
    new = new_definitions(seg, index, lo, hi)
    heads = anchor_blocks(seg, index, lo, hi, from_end=False, skip=new)
    tails = anchor_blocks(seg, index, lo, hi, from_end=True, skip=new)
    last = _last_row(seg)
    tree = functools.cache(lambda: parse_tree(index.text, index.language) if index.text is not None else None)
    ends = functools.cache(lambda row: tree() and construct_end(index.text, index.lines, index.language, row, tree()))
    closing = _closing_tails(seg, index, heads + tails, hi, last, ends)
    if closing:  # they outrank lone braces, and any tail that puts the closer elsewhere
        at = {c.orig_start for c in closing}
        tails = [t for t in tails if any(w > TRIVIAL_WEIGHT for w in t.weights)
                 and not (t.seg_start <= last < t.seg_end and t.orig_start + last - t.seg_start not in at)] + closing
    ours = {normalize(line) for line in seg}
    keys = {key for line in seg if (key := definition(line))} | twins(seg, index)

    def fits(c: Candidate) -> bool:
        return (not _drops_unshown(c, seg, index, ours, keys, fragment) and not _beheads(c, seg, index, keys, ends)
                and not _misaligned(c, seg, index, last))

    options = [pairs(h, t) for h, t in _pairings(heads, tails)]
    found = [c for same_span in options if (c := _heaviest(same_span)) is not None and fits(c)]
    found += [_alone(b) for b in _singles(heads + tails)]
    unblanked = [v for c in found if (v := _blank_edges_given_up(c, seg)) is not None]
    found += [v for v in unblanked if v.head == v.tail or fits(v)]
    found += [v for c in itertools.chain(*options, unblanked)
              if (v := _nearer_braces(c, seg, index, pinned=closing)) is not None and fits(v)]
    # Lines inside a new definition matched elsewhere (its `__call__` like every class's) say
    # nothing about where the segment goes when lines outside it anchor.
    fresh = new_definition_rows(seg, index)
    outside = [c for c in found if not all(r in fresh for r in range(c.head.seg_start, c.tail.seg_end))]
    found = outside or found
    nonblank = [i for i, line in enumerate(seg) if line.strip()]
    counted = Counter(normalize(line) for line in seg)
    once = {s: p for s, line in enumerate(seg) if counted[key := normalize(line)] == 1 and definition(line)
            and len(places := index.normal_at.get(key, ())) == 1 and lo <= (p := places[0]) < hi}
    best: dict[tuple[int, int, int, int], Candidate] = {}
    for c in found:
        reach = sum(1 for i in nonblank if not c.head.seg_start <= i < c.tail.seg_end)
        unmatched, shown = aligned(c, seg, index)
        dropped = [p for p in unmatched if index.normal[p]]
        c = replace(c, reach=reach, drops=len(dropped), echoes=_echoes(c, seg, index, dropped), shown=shown,
                    misplaced=_misplaced(c, seg, index, once),
                    unique=sum(len(index.normal_at.get(normalize(seg[s]), ())) == 1 and not is_trivial(seg[s])
                               for b in {c.head, c.tail} for s in range(b.seg_start, b.seg_end)))
        if c.bounds not in best or c.score > best[c.bounds].score:
            best[c.bounds] = c
    return sorted(best.values(), key=lambda c: c.score, reverse=True)


def dropped_lines(c: Candidate, seg: tuple[str, ...], index: OriginalIndex, code_only: bool = False) -> int:
    """How many original lines in the candidate's span no segment line matches (up to
    whitespace); `code_only` leaves blank lines out. Deleting original code is the destructive
    reading of a snippet: of two readings otherwise equal, the one that keeps more of the
    original wins."""
    return len(dropped_rows(c, seg, index, code_only))


def aligned(c: Candidate, seg: tuple[str, ...], index: OriginalIndex) -> tuple[list[int], int]:
    """The original rows in the candidate's span that no segment line matches (up to whitespace,
    in order; difflib's alignment), and how many significant segment lines original lines of the
    span match in order, at most (`common_length` of the two's significant lines: exact, so a
    span inside another never shows fewer; difflib's greedy blocks, in repeated code, can match a
    segment's second function to the first's body and show fewer in the smaller span)."""
    seg_from, seg_to, orig_from, orig_to = c.bounds
    ours = [normalize(line) for line in seg[seg_from:seg_to]]
    theirs = index.normal[orig_from:orig_to]
    matched = set()
    for a, _, size in line_matcher(theirs, ours).get_matching_blocks():
        matched.update(range(a, a + size))
    shown = common_length([line for line in ours if not is_trivial(line)],
                          [line for line in theirs if not is_trivial(line)])
    return [orig_from + p for p in range(len(theirs)) if p not in matched], shown


def common_length(a: list[str], b: list[str]) -> int:
    """The length of the longest common subsequence of `a` and `b`, bit-parallel (Allison and
    Dix; Hyyrö, "Bit-parallel LCS-length computation revisited", 2004): one bit per element of
    `a` in a Python integer, a few integer operations per element of `b`.

    A common prefix and suffix are counted first, without the bits (a whole file written back
    with one line changed costs nothing). Example: a = [x, y, z], b = [y, x, z] -> 2."""
    n = min(len(a), len(b))
    head = next((i for i in range(n) if a[i] != b[i]), n)
    tail = next((i for i in range(n - head) if a[len(a) - 1 - i] != b[len(b) - 1 - i]), n - head)
    a, b = a[head : len(a) - tail], b[head : len(b) - tail]
    if not a or not b:
        return head + tail
    where: dict[str, int] = {}
    for i, line in enumerate(a):
        where[line] = where.get(line, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full  # a 0 bit: an element of `a` in the common subsequence so far
    for line in b:
        u = v & where.get(line, 0)
        v = ((v + u) | (v - u)) & full
    return head + tail + len(a) - v.bit_count()


def dropped_rows(c: Candidate, seg: tuple[str, ...], index: OriginalIndex, code_only: bool = False) -> list[int]:
    """The original rows `dropped_lines` counts."""
    return [p for p in aligned(c, seg, index)[0] if index.normal[p] or not code_only]


def _misplaced(c: Candidate, seg: tuple[str, ...], index: OriginalIndex, once: dict[int, int]) -> int:
    """How many definition headers the splice writes anew that occur once in the segment and
    once in the original, just outside the span (within the segment's length of it): the span
    sits beside where the segment's own headers say it goes, and the result would define them
    twice (anchored on an earlier copy of a repeated body line, the segment's `def alpha_2(x):`
    written again under the original's). `once` maps such segment rows to their original row.
    Other lines written again nearby are no such evidence: a new docstring repeats its
    neighbour's `:param` lines."""
    seg_from, seg_to, orig_from, orig_to = c.bounds
    near = seg_to - seg_from
    return sum(1 for s, p in once.items() if seg_from <= s < seg_to
               and (orig_from - near <= p < orig_from or orig_to <= p < orig_to + near))


def _echoes(c: Candidate, seg: tuple[str, ...], index: OriginalIndex, dropped: list[int]) -> int:
    """How many significant rows the span drops when they are, in order, nothing but a copy of
    one of its anchors' significant lines, else 0: the span reaches past a first copy of its
    anchor to a second one and deletes the first (`}` `a = 1` `b = 2` written; the original has
    `}` `a = 1` `b = 2` `a = 1` `b = 2`). The anchor fits either copy, so which one the snippet
    shows is no evidence of a deletion, and the reading that keeps the copy comes first. Lines
    written between the anchors replace what is dropped (a copy-pasted body rewritten below the
    one the anchor is in), and a dropped line that repeats only part of an anchor (a rewritten
    signature, like the next function's) is an edit: those count nothing."""
    if c.head.seg_end < c.tail.seg_start:  # lines written between the anchors replace what is dropped
        return 0
    shown = [index.normal[p] for p in dropped if not is_trivial(index.lines[p])]
    copies = ([normalize(seg[s]) for s in range(b.seg_start, b.seg_end) if not is_trivial(seg[s])]
              for b in {c.head, c.tail})
    return len(shown) if shown and shown in copies else 0
