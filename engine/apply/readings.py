"""Readings: the files a snippet can mean, where the merge has a real choice.

    found = explore(original, snippet, "python")
    found.result        # the merge: the one reading left, else `ambiguous` with the readings
    found.readings      # every reading that validates, the one keeping most original lines first

The merge runs once with the first option at every decision point (`confidence.Choices`: keep
the original's lines, insert rather than replace, refuse to pick among equal places), then with
each other option, breadth first, at most MAX_RUNS runs. Runs that write the same text are one
reading; a reading must place every segment and validate (`validate.py`). A reading whose
blank edge line next to a marker may stand for lines now gone (`blank_edges.py`) brings the
reading without them. One reading left is the merge's answer, whatever option made it -- except
a deletion of what a marker-less snippet leaves out, which is refused alone (`unsure_deletion`);
several are an ambiguity -- the model ranks them (`ranking.py`), a user picks one, deterministic
mode refuses; none is the first run's failure.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from engine.apply.errors import Problem
from engine.apply.confidence import Choices
from engine.apply.merge import SUCCESS, MergeResult, merge
from engine.apply.blank_edges import deleted_beyond, restored, without
from engine.apply.snippet import Snippet, parse_snippet
from engine.apply.anchor import is_trivial, setting
from engine.apply.text import indent_of, line_matcher, split_lines
from engine.apply.validate import Validation, validate

MAX_RUNS = 24  # merge runs per request: the first, then one per other option, breadth first
MAX_READINGS = 6  # readings kept (a pick list, and what the model ranks)


@dataclass(frozen=True)
class Reading:
    """One reading of the snippet: its merge, and the options that made it."""

    merge: MergeResult
    validation: Validation
    choices: tuple[tuple[str, str], ...]  # (decision point, option) where there was a choice
    labels: tuple[str, ...]  # the sentence of each of those options

    @property
    def text(self) -> str:
        return self.merge.text

    @property
    def label(self) -> str:
        return "; ".join(self.labels) or "the only reading"


@dataclass(frozen=True)
class Exploration:
    """What `explore` found: `result` is the merge to use (the one reading's, or the first run's
    marked `ambiguous` with an error naming the readings), `validation` its validation."""

    result: MergeResult
    validation: Validation
    readings: tuple[Reading, ...]
    runs: int

    @property
    def ambiguous(self) -> bool:
        return len(self.readings) > 1

    @property
    def rankable(self) -> bool:
        """Whether the model may choose among the readings. Not where code may have moved: the
        model sees a window around the old copy, not the snippet's new one, and kept the old
        copy of a moved block by a clear margin (1.5B, gorilla/mux@de7178dc9d): offered only."""
        return self.ambiguous and not any(k.startswith("moved@") for r in self.readings for k, _ in r.choices)


def explore(original: str, snippet: str | Snippet, language: str | None = None, path: str | None = None) -> Exploration:
    """Every reading of `snippet` in `original` (see the module docstring). Raises what
    `parse_snippet` raises for a snippet with nothing to apply."""
    if not isinstance(snippet, Snippet):
        snippet = parse_snippet(snippet, language, original=original, path=path)
    queue: list[dict[str, str]] = [{}]
    tried: set[frozenset] = {frozenset()}
    options: dict[str, dict[str, str]] = {}
    runs: list[tuple[MergeResult, dict[str, str]]] = []
    while queue and len(runs) < MAX_RUNS:
        fixed = queue.pop(0)
        choices = Choices(dict(fixed))
        result = merge(original, snippet, language, path, choices)
        options.update({k: v for k, v in choices.seen.items() if k not in options})
        runs.append((result, {**choices.taken, **fixed}, {**options, **choices.seen}))
        for key, named in choices.seen.items():
            for name in named:
                if key not in fixed and name != choices.taken[key] and (sig := frozenset({**fixed, key: name}.items())) not in tried:
                    tried.add(sig)
                    queue.append({**fixed, key: name})
    first = runs[0][0]
    # A reading that leaves code after a `return`, or assigns a name twice in a row (an edge
    # line inserted beside the one it changes), is not what anyone meant, unless the original
    # or the snippet has such code too.
    dead_before = functools.cache(lambda: _dead_lines(original) + sum(_dead_lines("\n".join(s.lines))
                                                                      for s in snippet.segments))
    readings: dict[str, Reading] = {}
    for result, taken, said in runs:
        if result.status not in SUCCESS or result.text in readings:
            continue
        check = validate(original, result, language=language)
        if check.ok and (not (dead := _dead_lines(result.text)) or dead <= dead_before()):
            picked = tuple((k, taken[k]) for k in sorted(taken, key=_snippet_line) if k in said)
            readings[result.text] = Reading(result, check, picked, tuple(said[k][v] for k, v in picked))
    for reading in list(readings.values()):
        _offer_deletion(original, reading, readings, language, dead_before)
    found = sorted(readings.values(), key=lambda r: -_kept(original, r.text))[:MAX_READINGS]
    if len(found) == 1:
        only = found[0]
        deleted = [label for (key, option), label in zip(only.choices, only.labels)
                   if key.startswith("gap@") and option == "delete"]
        if not deleted:
            return Exploration(only.merge, only.validation, tuple(found), len(runs))
        # Definitions a snippet without markers leaves out are deleted only beside the reading
        # that keeps them: where keeping them does not validate, that is the merge's failure
        # (a member put back out of order), not evidence that the snippet deleted them.
        problem = Problem("unsure_deletion", f"the only reading that validates deletes what the snippet leaves out "
                          f"({deleted[0]}); keeping it did not validate")
        return Exploration(replace(only.merge, confidence=0.0, problems=(*only.merge.problems, problem), snippet=snippet),
                           Validation.of([*only.validation.problems, problem]), (), len(runs))
    if not found:
        check = validate(original, first, language=language)
        if check.ok and first.status in SUCCESS and _dead_lines(first.text) > dead_before():
            # Its only reading leaves such code: not what anyone meant, so not a result.
            check = Validation.of([*check.problems, Problem(
                "dead_code", "the merge leaves code that never runs or a value overwritten before it is read "
                "(a changed line kept beside the line it changes?)")])
        return Exploration(first, check, (), len(runs))
    listed = " | ".join(f"({n}) {r.label}" for n, r in enumerate(found, 1))
    problem = Problem("ambiguous_reading", f"the snippet can be read {len(found)} ways, and nothing in it says which "
                      f"is meant: {listed}")
    result = replace(found[0].merge, status="ambiguous", confidence=0.0, problems=(*found[0].merge.problems, problem),
                     snippet=snippet)
    return Exploration(result, Validation.of([*found[0].validation.problems, problem]), tuple(found), len(runs))


def _offer_deletion(original: str, reading: Reading, readings: dict[str, Reading], language: str | None, dead_before) -> None:
    """Where the lines beyond a blank edge line of `reading`'s segments may be gone
    (`blank_edges.py`: moved elsewhere, or shown gone), the reading without them, beside it."""
    beyond = deleted_beyond(original, reading.merge)
    variant = without(original, reading.merge, beyond) if beyond else None
    if variant is None or variant.text in readings:
        return
    check = validate(original, variant, language=language)
    if not check.ok or _dead_lines(variant.text) > dead_before():
        return
    keys = tuple((f"{'moved' if b.why == 'moved' else 'beyond'}@{b.line}", "delete") for b in beyond)
    rows = [(b.start, b.stop - b.inserted) for b in beyond]  # the run, without the original's edge lines past it
    many = len(rows) > 1 or rows[0][1] - rows[0][0] > 1
    span = ("original lines " if many else "original line ") + ", ".join(
        f"{start + 1}-{stop}" if stop - start > 1 else f"{stop}" for start, stop in rows)
    be, they, them = ("are", "they", "them") if many else ("is", "it", "it")
    moved = any(b.why == "moved" for b in beyond)
    edge = "edge line" if any(b.inserted for b in beyond) else "blank line"
    gone = (f"{span} {be} moved: deleted where {they} stood, where the snippet's {edge} is" if moved else
            f"{span} {be} deleted: the snippet's blank line next to its marker is the one past {them}")
    kept = (f"{span} {be} copied: kept where {they} stood as well as where the snippet writes {them}" if moved else
            f"{span} {be} kept: the snippet's blank line next to its marker is decoration")
    readings[variant.text] = Reading(variant, check, reading.choices + keys, reading.labels + (gone,))
    kept_merge = restored(reading.merge, beyond)
    if kept_merge is not reading.merge:
        # The edge lines the merge wrote new are the original's, past the lines kept.
        del readings[reading.text]
        kept_check = validate(original, kept_merge, language=language)
        if not kept_check.ok:
            return
        reading = replace(reading, merge=kept_merge, validation=kept_check)
    readings[reading.text] = replace(reading, choices=reading.choices + tuple((k, "keep") for k, _ in keys),
                                     labels=reading.labels + (kept,))


def _snippet_line(key: str) -> int:
    """The snippet line a decision point's key names (`end@12` -> 12): labels in snippet order."""
    return int(key.split("@")[1])


def _kept(original: str, text: str) -> int:
    """How many original lines `text` keeps, in order."""
    a, b = split_lines(original).lines, split_lines(text).lines
    return sum(size for _, _, size in line_matcher(a, b).get_matching_blocks())


_EXITS = ("return", "raise", "throw", "break", "continue")
_GOES_ON = ("else", "elif", "except", "finally", "catch", "case", "default", "#", "//", "/*", "*", "end")


def _dead_lines(text: str) -> int:
    """Lines right after a `return` / `raise` / `throw` / `break` / `continue` at its depth that
    are not a closer or the next branch (`else`, `case`, a comment): code that never runs; and
    assignments overwritten by the next line at their depth before anything reads them
    (`TIMEOUT = 60` above `TIMEOUT = 30`), and entries of a literal whose next entry has the same
    key."""
    rows = [line for line in split_lines(text).lines if line.strip()]
    dead = 0
    for line, after in zip(rows, rows[1:]):
        word = line.strip().split(" ", 1)[0].rstrip(";")
        if indent_of(after) != indent_of(line):
            continue
        if word in _EXITS and not is_trivial(after) and not after.strip().startswith(_GOES_ON):
            dead += 1
        elif (first := setting(line)) and (second := setting(after)) and first[:2] == second[:2] and (
                first[0] == ":" or not re.search(rf"\b{re.escape(first[1])}\b", second[2])):
            dead += 1  # overwritten before it is read; a literal's key twice does not even compile in most languages
    return dead
