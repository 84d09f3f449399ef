"""The changes from a file to its edited version one by one, for review: accept or reject each.

A hunk is a maximal run of changed lines: the rows between two runs of equal rows, with whole
lines and their endings compared (as `diff.unified_diff` compares them). `hunks(a, b)` lists them;
`take(a, b, chosen)` is `a` with only the `chosen` hunks of `b` in it. Accepting hunk k writes
`take(a, b, {k})`; rejecting it leaves `take(a, b, every other)` as the text still proposed, and
the hunks left are then those of `a` to that text, in the same order.

`diff_rows(diff_text, found)` says which rows of a unified diff of `a` to `b` show each hunk, so an
editor showing that diff can tell the hunk under the cursor (a diff's @@ block may hold several
hunks when they are close).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from engine.apply.text import line_matcher, split_lines

_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


@dataclass(frozen=True)
class Hunk:
    start: int  # rows of the original, [start, end), 0-based (start == end: an insertion before row start)
    end: int
    new_start: int  # rows of the edited text
    new_end: int

    def as_dict(self) -> dict:
        return {"start": self.start, "end": self.end, "newStart": self.new_start, "newEnd": self.new_end}


def described(diff_text: str, found: list[Hunk]) -> list[dict]:
    """The hunks as results list them: their rows, and the rows of `diff_text` that show each."""
    return [{**h.as_dict(), "diffRows": list(r)} for h, r in zip(found, diff_rows(diff_text, found))]


def _rows(text: str) -> list[str]:
    lines = split_lines(text)
    return [line + eol for line, eol in zip(lines.lines, lines.eols)]


def hunks(a: str, b: str) -> list[Hunk]:
    found: list[Hunk] = []
    for op, i1, i2, j1, j2 in line_matcher(_rows(a), _rows(b)).get_opcodes():
        if op == "equal":
            continue
        if found and found[-1].end == i1 and found[-1].new_end == j1:  # a delete next to an insert
            found[-1] = Hunk(found[-1].start, i2, found[-1].new_start, j2)
        else:
            found.append(Hunk(i1, i2, j1, j2))
    return found


def take(a: str, b: str, chosen: Collection[int]) -> str:
    """`a` with the hunks numbered in `chosen` (indexes into `hunks(a, b)`) as `b` has them."""
    rows_a, rows_b = _rows(a), _rows(b)
    out: list[str] = []
    at = 0
    for k, h in enumerate(hunks(a, b)):
        out += rows_a[at : h.start]
        out += rows_b[h.new_start : h.new_end] if k in chosen else rows_a[h.start : h.end]
        at = h.end
    out += rows_a[at:]
    return "".join(out)


def diff_rows(diff_text: str, found: list[Hunk]) -> list[tuple[int, int]]:
    """(first, last) row of `diff_text` (0-based) showing each hunk of `found`, the hunks the
    diff was written from. A removed line at original row r is the hunk holding r; an added line
    goes before original row r, which ends (or, for an insertion, is) its hunk."""
    rows: list[list[int]] = [[] for _ in found]
    original = 0
    for n, line in enumerate(diff_text.split("\n")):
        if header := _HEADER.match(line):
            start, length = int(header[1]), int(header[2] if header[2] is not None else 1)
            original = start - 1 if length else start  # an empty range names the row before it
        elif line.startswith(" "):
            original += 1
        elif line.startswith(("-", "+")) and not line.startswith(("--- ", "+++ ")):
            k = next((k for k, h in enumerate(found) if h.start <= original < h.end or
                      (line[0] == "+" and h.start <= original == h.end)), None)
            if k is not None:
                rows[k].append(n)
            if line[0] == "-":
                original += 1
    return [(r[0], r[-1]) if r else (-1, -1) for r in rows]
