"""How far to trust a merge: one number in [0, 1] and the named doubts that lowered it.

1.0 is an exact merge with nothing doubtful; each doubt multiplies it by its factor below, and a
doubt that leaves no plain reading (`Doubt.error`) sets it to 0 and makes the merge `ambiguous`.
`auto` mode takes the merge without the model only at HIGH_CONFIDENCE or above. The factors were
set by what separates right from wrong merges on the dev sets: bench/RESULTS.md, "Merge
confidence", has the calibration table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.apply.errors import Problem

HIGH_CONFIDENCE = 0.9  # `auto` takes the merge as it is from here up

WHITESPACE_MATCH = 0.95  # anchors equal only up to whitespace: re-indented or tabs turned into spaces
SIMILAR_EDGE = 0.8  # an edge line replaced the original line it resembles: a replacement, or an insertion?
FUZZY_PLACEMENT = 0.7  # times the similarity: nothing anchors, the segment sits where similar lines are
UNANCHORED_INSERT = 0.9  # nothing anchors; inserted at the file edge the snippet leaves open
IMPLIED_MARKER = 0.95  # no marker at a snippet end that anchors mid-file: the code beyond is kept
NEW_ENDING = 0.95  # new last lines replace the rest of a construct the snippet opened (scope.py)
PARTIAL = 0.5  # times the placed share of segments: some segments could not be placed at all


@dataclass
class Doubt:
    """What placing one segment found doubtful: the notes, and the confidence they leave.

    An error note makes the merge `ambiguous`: its text keeps every original line, but no
    reading of the snippet is plainly right, so it must not be used as it is.
    """

    confidence: float = 1.0
    notes: list[Problem] = field(default_factory=list)

    def scale(self, factor: float) -> None:
        self.confidence *= factor

    def note(self, name: str, reason: str, factor: float = 1.0) -> None:
        self.notes.append(Problem(name, reason, "warning"))
        self.scale(factor)

    def error(self, name: str, reason: str) -> None:
        self.notes.append(Problem(name, reason, "error"))
        self.confidence = 0.0
