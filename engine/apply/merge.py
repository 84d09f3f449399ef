"""Deterministic merge of a lazy edit snippet into the original file.

`merge(original, snippet)` parses the snippet, places every segment (`placement.py`), and splices:
original text between placed segments (where elisions stand) is kept byte for byte, each placed
segment replaces the original span it anchors to, so lines the snippet dropped between two of its
context lines are deleted. New lines take the original's dominant line ending; the file's final
newline convention is the original's (a snippet always ends with a newline, the file may not).

The result says how far to trust it. `status`:

* `exact`     every segment placed on exact (or whitespace-only) matches;
* `fuzzy`     every segment placed, some by similarity;
* `partial`   some segments placed, the others matched nowhere or out of order;
* `ambiguous` some segment matches at several places equally well, or its edge has no plain
              reading (`edges.py`: new lines at a snippet end without a marker, code beyond);
* `unmatched` no segment could be placed.

Ambiguous and unmatched segments are never guessed: the text then holds only what was placed
(the original where nothing was), which the model path still uses as its predicted output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.apply.anchor import LEVELS, OriginalIndex
from engine.apply.confidence import PARTIAL, Choices
from engine.apply.errors import Problem
from engine.apply.languages import resolve_language
from engine.apply.placement import Failure, Placement, place
from engine.apply.snippet import Snippet, parse_snippet
from engine.apply.text import join_lines, line_matcher, split_lines

SUCCESS = ("exact", "fuzzy")
STATUSES = ("exact", "fuzzy", "partial", "ambiguous", "unmatched")


@dataclass(frozen=True)
class SegmentReport:
    """Where one segment went: it replaced original lines [`start`, `end`) (0-based; None when not
    placed) with `written` lines, `confidence` sure."""

    segment: int
    status: str  # exact | whitespace | fuzzy | ambiguous | unmatched | out_of_order
    start: int | None = None
    end: int | None = None
    written: int = 0
    confidence: float = 0.0


@dataclass(frozen=True)
class MergeResult:
    """The merged file and how far to trust it.

    `text` is the best merge (the original where nothing could be placed); `confidence` in [0, 1]
    (`confidence.py`) is 1.0 only for an exact merge with nothing doubtful, and 0.0 for ambiguous
    and unmatched results; `problems` explains every failure and doubt (warnings included); `segments` says
    where each snippet segment went.
    """

    text: str
    confidence: float
    status: str
    problems: tuple[Problem, ...] = ()
    segments: tuple[SegmentReport, ...] = field(default=())
    snippet: Snippet | None = None

    @property
    def ok(self) -> bool:
        """Whether every segment was placed (`exact` or `fuzzy`)."""
        return self.status in SUCCESS

    def merged_line(self, x: int, after_inserts: bool = True) -> int:
        """Where original line `x`, one outside every placed span, is in `text`: shifted by what
        the placements before it added or removed, insertions at `x` included (after them) or not."""
        return x + sum(r.written - (r.end - r.start) for r in self.segments if r.start is not None and (
            r.end < x or r.end == x and (after_inserts or r.start < r.end)))

    def placed_lines(self, report: SegmentReport) -> tuple[str, ...]:
        """The lines `text` holds for a placed segment."""
        at = report.start + sum(
            r.written - (r.end - r.start) for r in self.segments
            if r.start is not None and r is not report
            and (r.end < report.start or r.end == report.start and (r.start < r.end or r.segment < report.segment)))
        return split_lines(self.text).lines[at : at + report.written]


def merge(original: str, snippet: str | Snippet, language: str | None = None, path: str | None = None,
          choices: Choices | None = None) -> MergeResult:
    """Merge `snippet` (text, or an already parsed `Snippet`) into `original`; `path`, the
    file's name, picks its blocks out of a chat answer with code for several files. At each
    decision point the option `choices` fixes, else the first (`readings.explore` runs them all).

    Raises `EmptySnippetError` / `MarkerOnlySnippetError` for snippets with nothing to apply.
    """
    language = resolve_language(language) or language
    if not isinstance(snippet, Snippet):
        snippet = parse_snippet(snippet, language, original=original, path=path)
    choices = choices if choices is not None else Choices()
    orig = split_lines(original)
    outcomes = place(snippet, OriginalIndex(orig.lines, original, language), choices)
    placed = [o for o in outcomes if isinstance(o, Placement)]
    failed = [o for o in outcomes if isinstance(o, Failure)]
    text = _splice(orig, placed, snippet)

    problems: list[Problem] = [note for p in placed for note in p.notes]
    for f in failed:
        first = snippet.segments[f.segment].first_line + 1
        problems.append(Problem(f.status, f"snippet segment {f.segment + 1} (snippet line {first}): {f.reason}", line=first))
    status = _status(placed, failed)
    confidence = min((p.confidence for p in placed), default=0.0)
    if status not in SUCCESS:
        confidence = 0.0 if status != "partial" else PARTIAL * confidence * len(placed) / len(outcomes)
    reports = tuple(
        SegmentReport(o.segment, LEVELS[o.level], o.start, o.end, len(o.lines), o.confidence) if isinstance(o, Placement)
        else SegmentReport(o.segment, o.status)
        for o in outcomes
    )
    return MergeResult(text, round(confidence, 4), status, tuple(problems), reports, snippet)


def _status(placed: list[Placement], failed: list[Failure]) -> str:
    if any(f.status == "ambiguous" for f in failed) or any(n.severity == "error" for p in placed for n in p.notes):
        return "ambiguous"
    if not placed:
        return "unmatched"
    if failed:
        return "partial"
    return "exact" if all(LEVELS[p.level] != "fuzzy" for p in placed) else "fuzzy"


def _endings(orig, p: Placement, new_eol: str) -> list[str]:
    """Line endings for a placement's lines: the original's own ending for each line that is an
    unchanged original line of the span (mixed-ending files stay as they were), else `new_eol`."""
    eols = [new_eol] * len(p.lines)
    matcher = line_matcher(orig.lines[p.start : p.end], p.lines)
    for a, b, size in matcher.get_matching_blocks():
        eols[b : b + size] = orig.eols[p.start + a : p.start + a + size]
    return eols


def _splice(orig, placed: list[Placement], snippet: Snippet) -> str:
    """Original lines outside the placements (with their own endings), segments inside them."""
    lines: list[str] = []
    eols: list[str] = []
    new_eol = orig.eol if orig.lines else snippet.eol
    cursor = 0
    for p in sorted(placed, key=lambda p: (p.start, p.segment)):
        lines.extend(orig.lines[cursor : p.start])
        eols.extend(orig.eols[cursor : p.start])
        lines.extend(p.lines)
        eols.extend(_endings(orig, p, new_eol))
        cursor = max(cursor, p.end)
    lines.extend(orig.lines[cursor:])
    eols.extend(orig.eols[cursor:])
    if not lines:
        return ""
    # Only the last line may lack an ending, and it does exactly when the original's does.
    final_newline = orig.final_newline if orig.lines else snippet.final_newline
    eols = [e or new_eol for e in eols]
    if not final_newline:
        eols[-1] = ""
    return join_lines(lines, eols)
