"""How far to trust a merge: the choices it made, one number in [0, 1], and the named doubts.

Where the snippet leaves several readings (an edge line that replaces its neighbour or sits
beside it, keep or delete what lies past a snippet end without a marker, which of several equal
places), placement asks `Choices` which option to take; `readings.py` runs the merge once per
option and keeps the readings that validate. One reading left: the merge is sure. Several: they
are the candidates the model ranks, or a refusal.

Confidence is what is left of doubts that are not choices: 1.0 is an exact merge with nothing
doubtful; each doubt multiplies it by its factor below, and a doubt that leaves no plain reading
(`Doubt.error`) sets it to 0 and makes the merge `ambiguous`. bench/RESULTS.md, "Merge
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
PARTIAL = 0.5  # times the placed share of segments: some segments could not be placed at all


@dataclass
class Choices:
    """The decision points of one merge run, and the option it takes at each.

    A point has a stable key (what is decided, at which snippet line: `end@12`) and its options
    by name, each with the sentence a user reads, the conservative one first (keep the
    original's lines; insert rather than replace; refuse a tie). `pick` returns the option that
    `fixed` names, else the first, and records the point in `seen`.
    """

    fixed: dict[str, str] = field(default_factory=dict)
    seen: dict[str, dict[str, str]] = field(default_factory=dict)
    taken: dict[str, str] = field(default_factory=dict)

    def pick(self, key: str, options: dict[str, str]) -> str:
        name = self.fixed.get(key)
        name = name if name in options else next(iter(options))
        if len(options) > 1:
            self.seen[key] = dict(options)
            self.taken[key] = name
        return name


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
