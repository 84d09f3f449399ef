"""Lines beyond a segment's blank edge line: kept, or deleted (moved elsewhere, or shown gone).

A segment that ends (or starts) with a blank line next to a marker can mean two things where
the original has a few more lines between that anchor and its next blank line: the blank line
is decoration, and the lines beyond the anchor are elided by the marker (kept: what the merge
does, as it never drops what a snippet does not plainly remove); or it is the original's blank
line, and those lines are gone. The merge keeps them; this module finds where the text gives
real evidence for the second reading, which `readings.explore` then offers beside the first:

* **moved**: every significant line there is one the snippet writes elsewhere (the result holds
  it more often than the original does, or it resembles a line the snippet writes new: a moved
  line edited on the way), at least one an exact copy. A chat answer that moves code shows it
  where it goes and elides where it came from:

      # ... existing code ...                  original:   path := r.URL.Path
                                                         <blank>
      <blank>                                              rctx := chi.RouteContext(ctx)   <- moved up
      rctx.RoutePath = path[:idx]                          rctx.RoutePath = path[:idx]

* **shown**: the segment changes nothing where it stands (all its lines are the original's), so
  what it can show is the deletion at its edge (`use std::time::Duration;` and a blank line,
  where the original goes on with `use std;`). Not for a definition or a comment there: a class
  header shown alone above its docstring is orientation, not a deletion.

In both, the lines must be at most MAX_ROWS, and a blank line must follow them in the original
(the snippet's blank line is that one, if they are gone). A segment may also end with a brace or
a comment opener before its marker (`/**` above a class's doc comment) that the merge writes new:
where the original has those lines a few lines on, past lines the snippet writes elsewhere, they
are the original's, and the lines before them moved (`restored` is the reading that keeps them).
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, replace

from engine.apply.anchor import COMMENT_OPENERS, definition, is_trivial, normalize
from engine.apply.fuzzy import similarity
from engine.apply.merge import MergeResult
from engine.apply.text import join_lines, split_lines

MAX_ROWS = 12  # lines between the anchor and the blank line beyond them: a block, not a region
SIMILAR = 0.75  # a moved line edited on the way (`pattern.String()` became `patternStr`)


@dataclass(frozen=True)
class Beyond:
    """Original lines [`start`, `stop`) beyond a blank edge line that the snippet may delete;
    `line` is that blank line (0-based, in the snippet's code), `why` 'moved' or 'shown'."""

    start: int
    stop: int
    line: int
    why: str
    inserted: int = 0  # edge lines the merge wrote new that are the original's last `inserted` of the run


def deleted_beyond(original: str, merge: MergeResult) -> list[Beyond]:
    """The lines beyond the blank edge lines of `merge`'s segments that its snippet gives
    evidence of deleting (see the module docstring), in original order."""
    snippet = merge.snippet
    if snippet is None:
        return []
    orig = split_lines(original).lines

    # Counted only where a blank edge line has a run of lines beyond it: most merges have none.
    @functools.cache
    def counts() -> tuple[Counter, Counter, set[str]]:
        in_orig = Counter(normalize(line) for line in orig)
        in_text = Counter(normalize(line) for line in split_lines(merge.text).lines)
        new = {normalize(line) for seg in snippet.segments for line in seg.lines
               if line.strip() and normalize(line) not in in_orig}
        return in_orig, in_text, new

    def copied(line: str) -> bool:
        in_orig, in_text, _ = counts()
        return in_text[normalize(line)] > in_orig[normalize(line)]

    def written_elsewhere(line: str) -> bool:
        return copied(line) or any(similarity(line, other) >= SIMILAR for other in counts()[2])

    placed = sorted((r for r in merge.segments if r.start is not None), key=lambda r: (r.start, r.end))
    last = len(snippet.segments) - 1
    found = []
    for n, report in enumerate(placed):
        lines = snippet.segments[report.segment].lines
        first = snippet.segments[report.segment].first_line
        lo = placed[n - 1].end if n else 0
        hi = placed[n + 1].start if n + 1 < len(placed) else len(orig)
        sides = []
        if lines and not lines[0].strip() and (report.segment > 0 or snippet.leading_elision):
            sides.append((report.start - 1, -1, lo, first))
        if lines and not lines[-1].strip() and (report.segment < last or snippet.trailing_elision):
            sides.append((report.end, 1, hi, first + len(lines) - 1))
        unchanged = None
        for x, step, limit, edge in sides:
            rows = []
            while (x >= limit if step < 0 else x < limit) and orig[x].strip() and len(rows) <= MAX_ROWS:
                rows.append(x)
                x += step
            if not rows or len(rows) > MAX_ROWS or not (x >= limit if step < 0 else x < limit):
                continue  # no blank line within reach beyond them
            rows.sort()
            significant = [orig[y] for y in rows if not is_trivial(orig[y])]
            if significant and any(map(copied, significant)) and all(map(written_elsewhere, significant)):
                found.append(Beyond(rows[0], rows[-1] + 1, edge, "moved"))
                continue
            if unchanged is None:
                unchanged = merge.placed_lines(report) == orig[report.start : report.end]
            if unchanged and not any(definition(orig[y]) or _comment(orig[y]) for y in rows):
                found.append(Beyond(rows[0], rows[-1] + 1, edge, "shown"))
        if lines and lines[-1].strip() and is_trivial(lines[-1]) and (report.segment < last or snippet.trailing_elision):
            found += _moved_past_edge(orig, merge, report, lines, first, hi, copied, written_elsewhere)
    return sorted(found, key=lambda b: b.start)


def _moved_past_edge(orig, merge: MergeResult, report, lines, first: int, hi: int, copied, written_elsewhere) -> list[Beyond]:
    """The same for a segment that ends with a brace or comment opener next to its marker (`/**`
    above a class's doc comment) that the merge wrote new: when the original has those edge
    lines a few lines past the anchor, after lines the snippet writes elsewhere (an import moved
    up), the edge lines are the original's, and those lines moved."""
    n = next((i for i, line in enumerate(reversed(lines)) if not is_trivial(line)), len(lines))  # the trivial last lines
    edge = [normalize(line) for line in lines[len(lines) - n :]]
    written = merge.placed_lines(report)
    if not n or [normalize(line) for line in written[len(written) - n :]] != edge \
            or [normalize(line) for line in orig[max(report.end - n, 0) : report.end]] == edge:
        return []  # not written new
    for x in range(report.end + 1, min(hi, report.end + MAX_ROWS + 1) - n + 1):
        if [normalize(line) for line in orig[x : x + n]] == edge:
            significant = [line for line in orig[report.end : x] if not is_trivial(line)]
            if significant and any(map(copied, significant)) and all(map(written_elsewhere, significant)):
                return [Beyond(report.end, x + n, first + len(lines) - 1, "moved", inserted=n)]
            return []
    return []


def _comment(line: str) -> bool:
    """A comment or docstring line (a Rust attribute `#[cfg(...)]` is code)."""
    text = line.lstrip()
    return text.startswith((*COMMENT_OPENERS, '"""', "'''")) and not text.startswith(("#[", "#!["))


def without(original: str, merge: MergeResult, beyond: list[Beyond]) -> MergeResult | None:
    """`merge` with the lines `beyond` deleted: each run becomes part of the span of the segment
    beside it (its blank edge line was the original's blank line past them). None where the
    merge does not hold them verbatim where the spans say."""
    lines, orig = split_lines(merge.text), split_lines(original).lines
    drop = {merge.merged_line(x): x for b in beyond for x in range(b.start, b.stop)}
    if any(not 0 <= i < len(lines.lines) or lines.lines[i] != orig[x] for i, x in drop.items()):
        return None
    kept = [i for i in range(len(lines.lines)) if i not in drop]
    text = join_lines([lines.lines[i] for i in kept], [lines.eols[i] for i in kept])
    segments = []
    for r in merge.segments:
        for b in beyond:
            if r.start is not None and b.stop == r.start:
                r = replace(r, start=b.start)
            elif r.start is not None and b.start == r.end:
                r = replace(r, end=b.stop)
        segments.append(r)
    return replace(merge, text=text, segments=tuple(segments))


def restored(merge: MergeResult, beyond: list[Beyond]) -> MergeResult:
    """`merge` without the edge lines it wrote new where `beyond` found them to be the
    original's (`_moved_past_edge`): the reading that keeps the lines past the anchor, and the
    original's own edge lines after them."""
    lines = split_lines(merge.text)
    drop = {i for b in beyond if b.inserted for i in range(merge.merged_line(b.start) - b.inserted, merge.merged_line(b.start))}
    if not drop:
        return merge
    kept = [i for i in range(len(lines.lines)) if i not in drop]
    text = join_lines([lines.lines[i] for i in kept], [lines.eols[i] for i in kept])
    fewer = {b.start: b.inserted for b in beyond if b.inserted}
    segments = tuple(replace(r, written=r.written - fewer[r.end]) if r.start is not None and r.end in fewer else r
                     for r in merge.segments)
    return replace(merge, text=text, segments=segments)
