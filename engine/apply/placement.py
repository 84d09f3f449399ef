"""Choosing one span of the original for every snippet segment, in order, or saying why not.

Each segment gets its `candidates.candidates`. Segments must land in snippet order without
overlapping, which prunes candidates (a forward pass keeps those that can follow some placement
of the segments before, a backward pass those that can precede the segments after). Then,
repeatedly, a segment whose best candidate scores strictly higher than its runner-up is fixed
there, and the pruning runs again. What is left with two equally good candidates is *ambiguous*
and is not guessed; a segment whose candidates were all pruned is *out of order*; one with none
gets a fuzzy search between its placed neighbours, or, at a file edge the snippet leaves open
(no marker before its first / after its last line), becomes a pure insertion there -- or replaces
the lines there that its own lines resemble.

A placed segment's edges -- which original lines next to its anchors it replaces, what a
missing marker means, a whole-file snippet -- are `edges.py`'s; its indentation is the file's
(`indent.py`); its doubts lower its confidence (`confidence.py`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from engine.apply.anchor import EXACT, FUZZY, SPACE, TRIVIAL_WEIGHT, Block, OriginalIndex, is_trivial, normalize
from engine.apply.candidates import Candidate, candidates, dropped_lines
from engine.apply.confidence import FUZZY_PLACEMENT, SIMILAR_EDGE, UNANCHORED_INSERT, WHITESPACE_MATCH, Choices, Doubt
from engine.apply.edges import (
    blank_boundaries, extend, final_blank_lines, head_edge, join_blank_lines, rewritten_header, tail_edge,
    trim_blank_edges, whole_file,
)
from engine.apply.errors import Problem
from engine.apply.fuzzy import fuzzy_candidates
from engine.apply.gaps import keep_closing_blanks, keep_left_out, left_out
from engine.apply.indent import reindent
from engine.apply.scope import construct_ends
from engine.apply.snippet import Snippet
from engine.apply.text import indent_of, line_matcher

_TIE = 0.01  # fuzzy ratios this close are a tie
MAX_PLACES = 4  # equal places of one segment offered as readings

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
    among equal scores, deletes strictly fewer original lines (`candidates.dropped_lines`), or
    else has strictly more unanchored edge lines that resemble their neighbours (`_best_fit`) --
    but not when its best leads on its anchors' weight alone (`_rivals`): then it keeps those
    candidates, a decision point.
    """
    opts = [list(o) for o in options]
    deleted: dict[Candidate, int] = {}
    while True:
        _prune(opts, n)
        picks = []
        for j, o in enumerate(opts):
            top = [c for c in o if c.score == o[0].score] if len(o) >= 2 else []
            if len(top) == 1:
                rivals = _rivals(o[0], o)
                if rivals:
                    if len(o) > len(rivals) + 1:
                        o[:] = [o[0], *rivals]
                    continue
                picks.append((o[0].score, -j, o[0]))
            elif top:
                best = _fewest_deleted(top, segs[j].lines, index, deleted) or _best_fit(top, segs[j].lines, index)
                if best is not None:
                    picks.append((best.score, -j, best))
        if not picks:
            return opts
        _, j, chosen = max(picks, key=lambda p: p[:2])
        opts[-j] = [chosen]


def _rivals(best: Candidate, opts: list[Candidate]) -> list[Candidate]:
    """Candidates inside `best`'s span that reach as far and show as many of the segment's lines
    in order, deleting fewer: `best` leads on its anchors' weight alone."""
    return [c for c in opts if c is not best and best.start <= c.start and c.end <= best.end
            and c.score[:3] == best.score[:3] and c.shown >= best.shown and c.drops < best.drops]


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
            cache[c] = dropped_lines(c, seg, index)
        measured.append((cache[c], n))
    measured.sort()
    return tied[measured[0][1]] if measured[0][0] < measured[1][0] else None


def _best_fit(tied: list[Candidate], seg, index: OriginalIndex) -> Candidate | None:
    """The one candidate whose unanchored edge lines resemble the original lines next to its
    anchors strictly most (`edges.extend`), or None on a tie: `def f30000(x):` anchored with a
    changed `return x + 1` below it, against `return x + 1` of `f1` with `def f30000` above."""
    def fit(c: Candidate) -> int:
        lines = list(seg)
        i, _, _ = extend(lines, index, c.head.seg_start, c.start, 0, step=-1)
        k, _, _ = extend(lines, index, c.tail.seg_end, c.end, len(index), step=+1)
        return (c.head.seg_start - i) + (k - c.tail.seg_end)

    ranked = sorted(((fit(c), n) for n, c in enumerate(tied)), reverse=True)
    return tied[ranked[0][1]] if ranked[0][0] > ranked[1][0] else None


def place(snippet: Snippet, index: OriginalIndex, choices: Choices | None = None) -> list[Placement | Failure]:
    """A `Placement` or a `Failure` for every segment of `snippet`, in segment order; at a
    decision point (several equal places, an edge's reading) the option `choices` takes."""
    choices = choices if choices is not None else Choices()
    n, segs = len(index), snippet.segments
    found = [candidates(s.lines, index, fragment=not snippet.has_markers) for s in segs]
    resolved = resolve(found, n, segs, index)
    while (fixed := _closer_of_shown(resolved, segs, index) or _pick_tie(resolved, segs, choices)) is not None:
        j, chosen = fixed
        found[j] = [chosen]
        resolved = resolve(found, n, segs, index)
    # The original span each segment holds so far: its one candidate, later its placement.
    spans = [(o[0].start, o[0].end) if len(o) == 1 else None for o in resolved]
    out: list[Placement | Failure] = []
    for j, opts in enumerate(resolved):
        if len(opts) > 1:
            nested = [c for name, c in _places(opts).items() if "-" in name]
            if nested:  # `_rivals`
                where = ", ".join(f"{c.start + 1}-{c.end}" for c in nested)
                out.append(Failure(j, "ambiguous", f"it fits {len(nested)} stretches, one inside another, that "
                                                   f"delete different lines (original lines {where})"))
            else:
                where = ", ".join(str(c.start + 1) for c in opts[:4])
                out.append(Failure(j, "ambiguous", f"its anchors match equally well at {len(opts)} places "
                                                   f"(original lines {where})"))
            continue
        if found[j] and (not opts or opts[0].score[:-1] < found[j][0].score[:-1]):
            # Its best match contradicts the order of the other segments: placing it at a weaker
            # match instead would be a guess. A match better only by the blank lines and braces
            # it also covers (the score's last term) says nothing about position.
            where = found[j][0].start + 1
            out.append(Failure(j, "out_of_order", f"its best match (original line {where}) is out of the snippet's order"))
            spans[j] = None
            continue
        lo = max((sp[1] for sp in spans[:j] if sp), default=0)
        hi = min((sp[0] for sp in spans[j + 1 :] if sp), default=n)
        shown_from = next((sp[0] for sp in spans[:j] if sp), None)  # the snippet's first placed line
        result = _place_one(snippet, j, opts[0] if opts else None, index, lo, hi, choices, shown_from)
        spans[j] = (result.start, result.end) if isinstance(result, Placement) else None
        out.append(result)
    return out


def _closer_of_shown(resolved: list[list[Candidate]], segs, index: OriginalIndex) -> tuple[int, Candidate] | None:
    """The first segment left with several places that starts with a lone closer, right after a
    segment whose placed last line opens a construct: `def use(...)`, a marker, `end` -- that
    `end` is the one closing `use` (`scope.construct_ends`), not any other `end` further down."""
    for j in range(1, len(resolved)):
        opts, before = resolved[j], resolved[j - 1]
        seg, prev = segs[j].lines, segs[j - 1].lines
        first = next((i for i, line in enumerate(seg) if line.strip()), None)
        last = next((i for i in range(len(prev) - 1, -1, -1) if prev[i].strip()), None)
        if len(opts) < 2 or len(before) != 1 or first is None or last is None or not is_trivial(seg[first]) \
                or before[0].tail.seg_end != last + 1 or index.text is None:
            continue
        opener = before[0].end - 1
        end = next((end for end in construct_ends(index.text, index.lines, index.language, opener)
                    if index.normal[end] == normalize(seg[first])
                    and indent_of(index.lines[end]) == indent_of(index.lines[opener])), None)
        closing = [c for c in opts if c.head.seg_start == first and c.start == end]
        if len(closing) == 1:
            return j, closing[0]
    return None


def _pick_tie(resolved: list[list[Candidate]], segs, choices: Choices) -> tuple[int, Candidate] | None:
    """The first segment left with several equal candidates whose place `choices` fixes, and
    that candidate; None when every tie is left open (the first option: refuse to guess)."""
    for j, opts in enumerate(resolved):
        if len(opts) < 2:
            continue
        key = f"place@{segs[j].first_line}"
        options = {"refuse": f"snippet segment {j + 1} matches equally well at {len(opts)} places"}
        places = _places(opts)
        options.update({name: f"snippet segment {j + 1} " + (f"replaces original lines {c.start + 1}-{c.end}"
                                                             if "-" in name else f"goes at original line {c.start + 1}")
                        for name, c in places.items()})
        taken = choices.pick(key, options)
        if taken != "refuse":
            return j, places[taken]
    return None


def _places(opts: list[Candidate]) -> dict[str, Candidate]:
    """A segment's places to choose from, by name: the first option at each start, "at 12"
    (0-based), and that option's `_rivals`, which start there too: "at 12-17" then."""
    first: dict[int, Candidate] = {}
    kept = []
    for c in opts:
        if c.start not in first:
            first[c.start] = c
            kept.append(c)
        elif c in _rivals(first[c.start], opts):
            kept.append(c)
    kept = kept[:MAX_PLACES]
    shared = Counter(c.start for c in kept)
    return {f"at {c.start}" + (f"-{c.end}" if shared[c.start] > 1 else ""): c for c in kept}


def _place_one(snippet: Snippet, j: int, cand: Candidate | None, index: OriginalIndex, lo: int, hi: int,
               choices: Choices, shown_from: int | None = None) -> Placement | Failure:
    """Place segment `j` inside orig[lo:hi] at `cand` (or by a fuzzy search when None);
    `shown_from` is where the segments before it start in the original."""
    segment = snippet.segments[j]
    seg, row = segment.lines, segment.first_line  # `row`: decision points are keyed by snippet line
    open_top = j == 0 and not snippet.leading_elision
    open_bottom = j == len(snippet.segments) - 1 and not snippet.trailing_elision
    doubt = Doubt()
    if cand is None:
        found = _unanchored(snippet, j, index, lo, hi, open_top, open_bottom)
        if not isinstance(found, tuple):
            return found
        cand, ratio = found
        doubt.scale(FUZZY_PLACEMENT * ratio)
    level = cand.level
    lines = list(seg)
    if not snippet.has_markers and (missing := left_out(seg, index, cand)):
        lines, added = _left_out_choice(lines, index, missing, cand, choices, row)
        cand = replace(cand, tail=replace(cand.tail, seg_start=cand.tail.seg_start + added))
    # Changed edge lines next to the anchors replace the original lines they resemble, or sit
    # beside them: a choice.
    i, start, fuzzy_head = _edge(lines, index, cand.head.seg_start, cand.start, lo, -1, choices, row)
    k, end, fuzzy_tail = _edge(lines, index, cand.tail.seg_end, cand.end, hi, +1, choices, row)
    if fuzzy_head or fuzzy_tail:
        level = FUZZY
        doubt.scale(SIMILAR_EDGE)
    i, start = rewritten_header(lines, index, i, start, lo, choices, f"header@{row}")
    top = "keep"
    if not snippet.has_markers and whole_file(index, lines, i, start, k, end):
        start, end = 0, len(index)
        lines = final_blank_lines(lines, index, start, end)
    else:
        top = head_edge(lines, index, i, start, lo, open_top, doubt, choices, f"top@{row}")
        if top == "top":  # the new first lines go to `lo`, the code between them and the anchor stays
            lines, i, start = lines[:i] + list(index.lines[lo:start]) + lines[i:], 0, lo
        elif top == "replace":
            start = lo
        lines, i, k = trim_blank_edges(lines, index, i, start, k, end)
        start, end = blank_boundaries(lines, index, i, start, k, end)
        # Before a marker, only a construct this segment opens; at the snippet's open end, one the
        # segments before it opened too.
        shown = min(start, shown_from) if open_bottom and shown_from is not None else start
        moved = tail_edge(lines, index, k, shown, end, hi, open_bottom, doubt, choices, f"end@{row + len(seg) - 1}")
        if moved != end:  # the segment's blank last lines now meet the original's at `moved`
            lines, end = join_blank_lines(lines, index, moved), moved
        if open_bottom and end == len(index):
            lines = final_blank_lines(lines, index, start, end)
    lines = _file_indentation(lines, index, start, end)
    if cand.level == SPACE:
        doubt.scale(WHITESPACE_MATCH)
    return Placement(j, start, end, tuple(lines), level, doubt.confidence, tuple(doubt.notes))


def _left_out_choice(lines: list[str], index: OriginalIndex, missing, cand: Candidate, choices: Choices,
                     row: int) -> tuple[list[str], int]:
    """The segment's lines with the definitions it leaves out put back (`gaps.py`), and the blank
    lines above its closing anchor, or without them -- a choice only between two anchors that
    are more than lone braces -- and how many lines were put back."""
    spans: list[list[int]] = []
    for first, stop, _ in sorted(missing):
        if spans and spans[-1][1] == first:
            spans[-1][1] = stop
        else:
            spans.append([first, stop])
    rows = ", ".join(f"{first + 1}-{stop}" if stop - first > 1 else f"{stop}" for first, stop in spans)
    names = ", ".join(dict.fromkeys(key for first, stop, _ in missing for key in index.defines[first:stop] if key))
    what = f"original lines {rows}" + (f" ({names})" if names else "")
    options = {"keep": f"{what} are kept: the snippet, which has no markers, leaves them out as unchanged"}
    if not any(all(w == TRIVIAL_WEIGHT for w in b.weights) for b in (cand.head, cand.tail)):
        options["delete"] = f"{what} are deleted: the snippet, which has no markers, shows the code around them without them"
    if choices.pick(f"gap@{row}", options) != "keep":
        return lines, 0
    lines, added = keep_left_out(lines, index, missing)
    lines, blanks = keep_closing_blanks(lines, index, cand.tail.seg_start + added, cand.tail.orig_start)
    return lines, added + blanks


def _edge(lines: list[str], index: OriginalIndex, at: int, orig: int, limit: int, step: int, choices: Choices,
          row: int) -> tuple[int, int, bool]:
    """`edges.extend` from an anchor's edge, and the choice where it took a merely similar line:
    the changed line replaces it, or is inserted beside it (then only equal lines extend). Past
    an anchor that ends in a blank line the insertion is the first reading, the replacement the
    second (`TIMEOUT = 60` after `import os` and a blank line, above `TIMEOUT = 30`)."""
    found = similar = extend(lines, index, at, orig, limit, step)
    first = "replace"
    if not found[2]:
        similar = extend(lines, index, at, orig, limit, step, past_blank=True)
        if not similar[2]:
            return found
        first = "insert"
    s, o = similar[:2]
    seg_rows, orig_rows = (range(s, at), range(o, orig)) if step < 0 else (range(at, s), range(orig, o))
    where = f"original line(s) {orig_rows[0] + 1}-{orig_rows[-1] + 1}"
    options = {
        "replace": f"snippet line(s) {row + seg_rows[0] + 1}-{row + seg_rows[-1] + 1} replace the similar {where}",
        "insert": f"snippet line(s) {row + seg_rows[0] + 1}-{row + seg_rows[-1] + 1} are new and go beside {where}, "
                  "which are kept"}
    if first == "insert":
        options = {"insert": options["insert"], "replace": options["replace"]}
    taken = choices.pick(f"edge@{row + seg_rows[0 if step < 0 else -1]}", options)
    if taken == "replace":
        return similar
    return found if first == "insert" else extend(lines, index, at, orig, limit, step, similar=False)


def _unanchored(snippet, j, index, lo, hi, open_top, open_bottom) -> tuple[Candidate, float] | Placement | Failure:
    """A segment none of whose lines occurs in orig[lo:hi]: a fuzzy candidate and its similarity,
    else a pure insertion at the file edge the snippet leaves open, else a failure."""
    seg = snippet.segments[j].lines
    if not snippet.has_markers and len(index) == 0:
        return Placement(j, 0, 0, seg, EXACT, 1.0)  # a new file: the snippet is all of it
    ranked = fuzzy_candidates(seg, index, lo, hi)
    if ranked:
        if len(ranked) > 1 and ranked[1][1] >= ranked[0][1] - _TIE and ranked[1][0].start != ranked[0][0].start:
            return Failure(j, "ambiguous", "it only matches fuzzily, equally well at several places")
        return ranked[0]
    if snippet.has_markers and (open_top or open_bottom):
        at = lo if open_top else hi
        # An empty anchor at the open edge: changed lines there replace the lines they resemble.
        edge = Block(0 if open_top else len(seg), at, (), FUZZY)
        if extend(list(seg), index, edge.seg_start, at, hi if open_top else lo, 1 if open_top else -1)[2]:
            return Candidate(edge, edge, 0.0, FUZZY), 1.0
        note = Problem("unanchored_insert", "nothing in it matches the original; inserted at the "
                       f"{'top' if open_top else 'end'} of the file, where the snippet has no marker", "warning")
        return Placement(j, at, at, seg, EXACT, UNANCHORED_INSERT, (note,))
    return Failure(j, "unmatched", "none of its lines occurs in the original, even fuzzily")


def _file_indentation(lines: list[str], index: OriginalIndex, start: int, end: int) -> list[str]:
    """`lines` in the file's indentation (`indent.py`), from the segment lines that equal lines of
    orig[start:end] up to whitespace (the mapping is fitted on the significant ones)."""
    ours = [normalize(line) for line in lines]
    matcher = line_matcher(index.normal[start:end], ours)
    pairs = {b + d: index.lines[start + a + d] for a, b, size in matcher.get_matching_blocks() for d in range(size)}
    if all(lines[r] == o for r, o in pairs.items()):
        return lines
    return reindent(lines, pairs, index.uses_tabs, fit={r for r in pairs if not is_trivial(lines[r])})


