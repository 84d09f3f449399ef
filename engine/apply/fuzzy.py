"""The last resort: lines that are merely similar to original lines.

A segment none of whose lines occurs in the original (exactly or up to whitespace) may still be
an edit of original code: `def main(argv, verbose=False):` for `def main(argv):`. Lines whose
difflib ratio (indentation ignored) reaches FUZZY_THRESHOLD match fuzzily, and two lines that
define the same name count as DEFINITION_SIMILARITY similar (a changed signature rarely keeps 80%
of its characters). Fuzzy placements are never reported as exact, and their span may not be much
longer or shorter than the segment: a loose match must not swallow unrelated code.
"""

from __future__ import annotations

from difflib import SequenceMatcher

from engine.apply.anchor import FUZZY, Block, OriginalIndex, definition, is_trivial, new_definitions
from engine.apply.candidates import Candidate, pair

FUZZY_THRESHOLD = 0.8  # difflib ratio for a line to match fuzzily
DEFINITION_SIMILARITY = 0.9  # two lines defining the same name (a changed signature)


def similarity(a: str, b: str) -> float:
    """difflib ratio of two lines ignoring indentation; at least DEFINITION_SIMILARITY when both
    define the same name, since a changed signature rarely keeps 80% of its characters."""
    ratio = SequenceMatcher(None, a.strip(), b.strip(), autojunk=False).ratio()
    key = definition(a)
    return max(ratio, DEFINITION_SIMILARITY) if key and key == definition(b) else ratio


def fuzzy_candidates(seg: tuple[str, ...], index: OriginalIndex, lo: int, hi: int) -> list[tuple[Candidate, float]]:
    """Candidates from the segment's first and last lines that have similar original lines in
    orig[lo:hi], best mean similarity first, each with that similarity."""
    # Only the first and the last segment lines with similar original lines are used: scan from
    # each end (each scan compares a line with all of orig[lo:hi]).
    new = new_definitions(seg, index, lo, hi)  # a line of a new function says nothing about where it goes
    lines = [s for s, line in enumerate(seg) if not is_trivial(line) and s not in new]
    first = next(((s, found) for s in lines if (found := _similar(seg[s], index, lo, hi))), None)
    if first is None:
        return []
    last = next(((s, found) for s in reversed(lines) if s > first[0] and (found := _similar(seg[s], index, lo, hi))),
                first)
    (first, first_hits), (last, last_hits) = first, last
    out = []
    for p, r in first_hits:
        for q, t in last_hits:
            head, tail = Block(first, p, (0.5,), FUZZY), Block(last, q, (0.5,), FUZZY)
            candidate = pair(head, tail)
            if candidate and candidate.deviation <= max(2, (last - first + 1) // 2):
                out.append((candidate, (r + t) / 2))
    return sorted(out, key=lambda ct: (ct[1], -ct[0].deviation), reverse=True)


def _similar(line: str, index: OriginalIndex, lo: int, hi: int) -> list[tuple[int, float]]:
    """(position, similarity) of the lines of orig[lo:hi] at least FUZZY_THRESHOLD similar to `line`."""
    key = definition(line)
    matcher = SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(line.strip())
    found = []
    for p in range(lo, hi):
        if key and definition(index.lines[p]) == key:
            found.append((p, similarity(line, index.lines[p])))
            continue
        matcher.set_seq1(index.lines[p].strip())
        # real_quick_ratio and quick_ratio are cheap upper bounds of ratio.
        if matcher.real_quick_ratio() >= FUZZY_THRESHOLD and matcher.quick_ratio() >= FUZZY_THRESHOLD:
            ratio = matcher.ratio()
            if ratio >= FUZZY_THRESHOLD:
                found.append((p, ratio))
    return found
