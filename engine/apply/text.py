"""Lines of a text file together with their line endings.

A merge must give back the original file byte for byte wherever the edit did not touch it: CRLF
files stay CRLF (even files with mixed endings keep each untouched line's own ending), and a file
without a final newline keeps lacking one. So text is split into content lines plus the ending of
each line, and rebuilt from the same two lists.

`str.splitlines` is not used on purpose: it also splits on form feeds, vertical tabs and U+2028,
which occur inside real source files as ordinary characters.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from difflib import Match, SequenceMatcher

LF, CRLF = "\n", "\r\n"
# A UTF-8 byte order mark (Windows tools and some clipboards start text with it): not code. A
# snippet's is dropped where the snippet comes in; a file's is kept, as every other byte of it.
BOM = "\ufeff"
LONG = 4000  # lines, see line_matcher


@dataclass(frozen=True)
class Lines:
    """`text` as content lines (no endings) and the ending of each ('\\n', '\\r\\n', or '' last)."""

    lines: tuple[str, ...]
    eols: tuple[str, ...]

    @property
    def eol(self) -> str:
        """The dominant line ending, used for lines that an edit adds (LF on a tie or no break)."""
        crlf = sum(1 for e in self.eols if e == CRLF)
        lf = sum(1 for e in self.eols if e == LF)
        return CRLF if crlf > lf else LF

    @property
    def final_newline(self) -> bool:
        """Whether the text ends with a line break (False for empty text)."""
        return bool(self.eols) and self.eols[-1] != ""

    def __len__(self) -> int:
        return len(self.lines)


@functools.lru_cache(maxsize=16)  # the pipeline splits the same original and result many times
def split_lines(text: str) -> Lines:
    """Split on '\\n' only; a '\\r' just before it belongs to the ending.

    >>> split_lines("a\\r\\nb").lines, split_lines("a\\r\\nb").eols
    (('a', 'b'), ('\\r\\n', ''))
    """
    if not text:
        return Lines((), ())
    parts = text.split(LF)
    last = parts.pop()  # text after the final '\n' ('' when the text ends with one)
    lines, eols = [], []
    for part in parts:
        if part.endswith("\r"):
            lines.append(part[:-1])
            eols.append(CRLF)
        else:
            lines.append(part)
            eols.append(LF)
    if last:
        lines.append(last)
        eols.append("")
    return Lines(tuple(lines), tuple(eols))


def join_lines(lines, eols) -> str:
    return "".join(line + eol for line, eol in zip(lines, eols, strict=True))


def indent_of(line: str) -> str:
    """The leading whitespace of `line`."""
    return line[: len(line) - len(line.lstrip(" \t"))]


def depth(line: str) -> int:
    """The columns `line` is indented by, a tab counting 4: chat answers write a tab-indented
    file's lines with four spaces."""
    return len(indent_of(line).expandtabs(4))


def original_span(start: int, end: int) -> str:
    """Original rows [start, end) (0-based) as a reason names them: "original line 5", "original
    lines 5-9", or where there are none, the place between two lines."""
    if end - start == 1:
        return f"original line {start + 1}"
    if end > start:
        return f"original lines {start + 1}-{end}"
    return f"the place after original line {start}" if start else "the top of the original"


def line_matcher(a, b) -> SequenceMatcher:
    """difflib's matcher over two sequences of lines, its matching blocks computed on the part
    between their common prefix and suffix only.

    Without difflib's "popular line" heuristic (autojunk) matching is exact but quadratic on long
    repetitive files (30 s for 12k lines of similar functions); with it, 0.1 s. So it is used only
    past LONG lines in the middle part, where a slightly less minimal alignment is the better
    trade. The common ends cost nothing: a 3 MB file with a one-line edit aligns at once.
    """
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    n = min(len(a), len(b))
    head = next((i for i in range(n) if a[i] != b[i]), n)
    tail = next((i for i in range(n - head) if a[len(a) - 1 - i] != b[len(b) - 1 - i]), n - head)
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    inner = SequenceMatcher(None, a_mid, b_mid, autojunk=len(a_mid) + len(b_mid) > LONG)
    blocks = [(0, 0, head)] + [(i + head, j + head, size) for i, j, size in inner.get_matching_blocks()]
    blocks.append((len(a) - tail, len(b) - tail, tail))
    merged: list[list[int]] = []
    for i, j, size in blocks:
        if merged and merged[-1][0] + merged[-1][2] == i and merged[-1][1] + merged[-1][2] == j:
            merged[-1][2] += size
        elif size:
            merged.append([i, j, size])
    matcher.matching_blocks = [Match(i, j, size) for i, j, size in merged] + [Match(len(a), len(b), 0)]
    return matcher
