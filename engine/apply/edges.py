"""The edges of a placed segment: which original lines next to its anchors it replaces.

`place` (placement.py) finds where a segment's anchors sit; what lies beyond them is decided
here. Changed edge lines replace the original lines they resemble (`extend`). Lines past the
anchors are kept: above and below a marker they are what it stands for, and at a snippet end
without a marker the marker is implied, since the snippet shows none of that code -- except
where the snippet plainly gives new last lines for a construct it opened (`scope.py`) or ends
with the file's own last lines. New lines at such an open end, with code beyond them, may have
been meant to replace it: that is not plain, so it is an error (`Doubt.error`), never a guess.
"""

from __future__ import annotations

import itertools
import re

from engine.apply import brackets
from engine.apply.anchor import OriginalIndex, definition, is_trivial, normalize, setting
from engine.apply.confidence import IMPLIED_MARKER, Choices, Doubt
from engine.apply.fuzzy import similarity
from engine.apply.languages import parser_for
from engine.apply.scope import block_end, construct_end, drops_definitions, open_constructs, replaces_ending, statements
from engine.apply.text import indent_of

EXTEND_THRESHOLD = 0.75  # similarity for a changed edge line to replace its neighbour
PROSE_THRESHOLD = 0.5  # the same for two comment or string lines opened alike (`_threshold`)
_PROSE = re.compile(r'^(?:"""|\'\'\'|///|//|/\*|\*|#|--|"|\')')
WHOLE_FILE_SLACK = 2  # blank lines a whole-file snippet may leave out at each end
FEW = 3  # statements a reading past an open snippet end may delete beyond those it writes there


def whole_file(index: OriginalIndex, lines: list[str], i: int, start: int, k: int, end: int) -> bool:
    """Whether a snippet without markers is plainly the whole new file: its anchors leave no
    original code line unaccounted for at either end (at most WHOLE_FILE_SLACK blank lines).
    Anything else is a fragment, and the code beyond its ends is kept, as if markers stood there:
    a whole file that lacks its first import may have deleted it or just left it out.
    """
    top_gap, bottom_gap = start - i, (len(index) - end) - (len(lines) - k)
    dropped = [*index.lines[: max(top_gap, 0)], *index.lines[len(index) - max(bottom_gap, 0) :]]
    return max(top_gap, bottom_gap) <= WHOLE_FILE_SLACK and not any(line.strip() for line in dropped)


def rewritten_header(lines: list[str], index: OriginalIndex, i: int, start: int, lo: int, choices: Choices,
                     key: str) -> tuple[int, int]:
    """(segment row, original row) where the segment starts, given a definition header written
    above its first anchor (row `i`, original row `start`) with the name of the original's
    nearest definition above the anchor (at or below `lo`). Kept beside it, the old header would
    define that name twice, so:

    * where the old definition runs past the anchor, the header is its changed header
      (`function b(x, y) {` above a changed first line and `return 2;`, where the original has
      `function b(x) {`, its old first line, `return 2;`): the header and the lines after it
      replace the original's from its header to the anchor, as a similar edge line next to an
      anchor does (`extend`);
    * where it ends above the anchor (only blank lines between), the segment may rewrite it
      whole or add a second one (a property's setter below its getter): a choice, keeping it
      first.

    (i, start) unchanged where there is no such header, or the segment writes another
    definition between it and the anchor."""
    if i == 0 or index.text is None:
        return i, start
    r = next((r for r in range(start - 1, lo - 1, -1) if index.defines[r]), None)
    h, header = next(((h, name) for h in range(i - 1, -1, -1) if (name := definition(lines[h]))), (None, None))
    if r is None or h is None or header != index.defines[r]:
        return i, start
    end = construct_end(index.text, index.lines, index.language, r)
    if end is None:
        return i, start
    if end >= start:
        return h, r
    if any(index.lines[p].strip() for p in range(end + 1, start)):
        return i, start
    name = index.defines[r]
    options = {"keep": f"the snippet's `{name}` is new: original lines {r + 1}-{end + 1}, an older `{name}`, are kept",
               "replace": f"the snippet's `{name}` replaces original lines {r + 1}-{end + 1}, the `{name}` there"}
    return (h, r) if choices.pick(key, options) == "replace" else (i, start)


def head_edge(lines: list[str], index: OriginalIndex, i: int, start: int, lo: int, open_top: bool, doubt: Doubt,
              choices: Choices, key: str) -> str:
    """Where new lines above the segment's first anchor go, when the snippet starts without a
    marker: `keep` (right above the anchor, where the snippet writes them), `top` (at the top
    of the stretch, original line `lo`: new imports at the head of the file) or `replace` (they
    replace the code above, when that is no bigger than they are plus FEW lines). The code
    above is otherwise kept: above a marker it is what the marker stands for; without one the
    marker is implied, since the snippet shows no line of it.
    """
    above = [r for r in range(lo, start) if index.lines[r].strip()]
    if not open_top or not above:
        return "keep"
    doubt.note("implied_marker", f"no elision marker before the snippet, but it anchors at original line {start + 1}: "
               "the code above is kept", IMPLIED_MARKER)
    new = [line for line in lines[:i] if line.strip()]
    if not new:
        return "keep"
    first = f"the snippet's first {len(new)} line(s), new, with no marker before them"
    options = {"keep": f"{first} go right above original line {start + 1}, where the snippet anchors",
               "top": f"{first} go {'at the top of the file' if lo == 0 else f'above original line {lo + 1}'}, "
                      f"above original lines {lo + 1}-{start}, which are kept"}
    if statements([index.lines[r] for r in above]) <= statements(new) + FEW:
        options["replace"] = f"{first} replace original lines {lo + 1}-{start}"
    return choices.pick(key, options)


def tail_edge(lines: list[str], index: OriginalIndex, k: int, shown: int, end: int, hi: int, open_bottom: bool,
               doubt: Doubt, choices: Choices, key: str) -> int:
    """Where the segment ends: the code below its last anchor is kept (above a marker it is what
    the marker stands for), except

    * new last lines that close a construct the snippet opened (at or after original line
      `shown`) with its own closer replace the rest of it: the snippet shows it whole
      (`scope.py`);
    * at a snippet end without a marker, the code below may be deleted (or replaced by the new
      last lines) up to the end of the block the last anchor is in, of the construct the snippet
      opened, or of the file -- each a choice (`Choices`), offered when it deletes no
      definition and at most FEW lines more than the new lines write. The first option keeps the
      code (an implied marker: chat answers often leave the last marker out).
    """
    new = [line for line in lines[k:] if line.strip()]
    if not any(index.lines[r].strip() for r in range(end, hi)):
        return end
    construct = None
    if new and index.text is not None:
        constructs = open_constructs(index.text, index.lines, index.language, shown, end, hi)
        construct = constructs[-1] if constructs else None
        closed = next((c for c in constructs if replaces_ending(list(index.lines[end : c[1]]), lines[k:],
                                                                indent_of(index.lines[c[0]]), closed_only=True)), None)
        if closed:
            first, last = closed
            doubt.note("construct_ending", f"the snippet shows original lines {first + 1}-{end} and new last lines that "
                       f"close that construct: they replace the rest of it (original lines {end + 1}-{last})")
            end, new, construct = last, [], None
            if not open_bottom or not any(index.lines[r].strip() for r in range(end, hi)):
                return end
    if not open_bottom:
        return end
    stops = [construct[1]] if construct else []
    anchor = next((r for r in range(end - 1, -1, -1) if index.lines[r].strip()), None)
    if anchor is not None and index.text is not None and (inner := block_end(index.text, index.lines, index.language,
                                                                              anchor, hi)) is not None:
        stops.append(inner)
    if hi == len(index) and index.text is not None and not _structure_unknown(index.language):
        stops.append(hi)
    last = f"the snippet's last {len(new)} line(s), new," if new else "the snippet's last line"
    options = {"keep": f"{last} with no marker after {'them' if new else 'it'}: original lines {end + 1}-{hi} below "
                       "are kept"}
    for stop in sorted(set(stops)):
        gone = [index.lines[r] for r in range(end, stop) if index.lines[r].strip()]
        # New last lines that end with the very closer the stretch ends with show where it ends:
        # what lies between goes, definitions too (`}` closing a module below a deleted `impl`).
        closes = bool(new and gone) and is_trivial(new[-1]) and new[-1] == gone[-1]
        if gone and statements(gone) <= statements(new) + FEW and (closes or not drops_definitions(gone, new)):
            options[f"to {stop}"] = (f"{last} {'replace' if new else 'ends'} {'the file' if stop == len(index) else 'its block'}"
                                     f": original lines {end + 1}-{stop} are {'replaced' if new else 'deleted'}")
    taken = choices.pick(key, options)
    if taken == "keep":
        doubt.note("implied_marker", f"no elision marker after the snippet, but it anchors at original line {end}: "
                   "the code below is kept", IMPLIED_MARKER)
        return end
    doubt.note("snippet_end", options[taken])
    return int(taken.split()[1])


def _structure_unknown(language: str | None) -> bool:
    """Code without a grammar: where its constructs end is not known, so no snippet end deletes
    the code below it (scope.py); prose has no constructs to misread."""
    return brackets.applies(language) and parser_for(language) is None


def final_blank_lines(lines: list[str], index: OriginalIndex, start: int, end: int) -> list[str]:
    """A segment that ends the file ends with no more blank lines than the part it replaces:
    blank lines after a chat answer's last line are not an edit."""
    def trailing(rows) -> int:
        return len(rows) - len(list(itertools.dropwhile(lambda l: not l.strip(), reversed(rows))))

    extra = trailing(lines) - trailing(index.lines[start:end])
    return lines[: len(lines) - extra] if extra > 0 else lines


def blank_boundaries(lines: list[str], index: OriginalIndex, i: int, start: int, k: int, end: int) -> tuple[int, int]:
    """The span moved off a blank line that separates new lines from the code beyond a marker.

    New lines inserted above the anchors (`lines[:i]`) when the anchors start with a blank line
    matched to the original's blank after the elided code: that blank stays after the elided
    code and the segment's blank after the new lines, so the new method is set off on both sides
    (neither a blank lost nor one doubled). Mirrored below.
    """
    if (0 < i < len(lines) and lines[0].strip() and not lines[i].strip() and start < end
            and not index.lines[start].strip() and start > 0 and index.lines[start - 1].strip()):
        start += 1
    if (0 < k < len(lines) and lines[-1].strip() and not lines[k - 1].strip() and start < end
            and not index.lines[end - 1].strip() and end < len(index) and index.lines[end].strip()):
        end -= 1
    return start, end


def trim_blank_edges(lines: list[str], index: OriginalIndex, i: int, start: int, k: int, end: int
                     ) -> tuple[list[str], int, int]:
    """Blank lines written at the segment's edges, next to a marker (or an implied one), are
    the blank lines the code beyond it already has there, not new ones: unanchored blank edges
    say nothing and are dropped, and blank lines between the marker and new lines count only
    beyond those the original has at that join (a blank after `// ... existing code ...` above a
    new method joins the blank line that ends the elided code: one, not two). Returns the lines
    and the new bounds of the anchored part."""
    if not any(l.strip() for l in lines[k:]):
        lines = lines[:k]
    else:
        drop = min(_blank_run(reversed(lines[k:])), _blank_run(index.lines[end:]))
        lines = lines[: len(lines) - drop]
    if not any(l.strip() for l in lines[:i]):
        lines, i, k = lines[i:], 0, k - i
    else:
        drop = min(_blank_run(lines[:i]), _blank_run(reversed(index.lines[:start])))
        lines, i, k = lines[drop:], i - drop, k - drop
    return lines, i, k


def join_blank_lines(lines: list[str], index: OriginalIndex, end: int) -> list[str]:
    """The segment's lines without the blank lines at its end that the original already has
    from `end` on (the rule of `trim_blank_edges`, where an end moved later: new last lines that
    close a construct, then a blank line before the marker, meet the blank line after it)."""
    drop = min(_blank_run(reversed(lines)), _blank_run(index.lines[end:]))
    return lines[: len(lines) - drop] if any(line.strip() for line in lines[: len(lines) - drop]) else lines


def _blank_run(lines) -> int:
    """How many blank lines `lines` starts with."""
    return sum(1 for _ in itertools.takewhile(lambda line: not line.strip(), lines))


def extend(lines, index, at, orig, limit, step, similar: bool = True, past_blank: bool = False):
    """Let changed edge lines next to an anchor replace the original lines they resemble.

    Moves outward from segment line `at` / original line `orig` (exclusive bounds on the tail
    side, `step` +1) while the next pair is equal up to whitespace or (with `similar`) similar
    enough; never over a blank line (a blank usually separates a new definition from its
    neighbour, which must stay), nor from an anchor that ends in one unless `past_blank` (then
    the caller offers the replacement as the second reading). Returns the new bounds and whether
    a merely similar line was taken.
    """
    fuzzy = False
    edge = at if step < 0 else at - 1  # the anchor's outermost line (none for an empty anchor)
    if 0 <= edge < len(lines) and not lines[edge].strip() and not past_blank:
        return at, orig, False
    if 0 <= edge < len(lines) and _documents(lines, edge, step):
        # A definition's doc comment (above it) or docstring (below it) is one thing: a
        # different one in the snippet replaces the original's whole, however long each is
        # (also when the anchor took its last lines, the same in both).
        # Both at one depth: their first lines (a Javadoc's ` */` is one space in).
        ours, theirs = doc_block(lines, at, step), doc_block(index.lines, orig, step, limit)
        if ours and theirs and indent_of(lines[at if step > 0 else at - ours]) == indent_of(index.lines[orig if step > 0 else orig - theirs]):
            return at + step * ours, orig + step * theirs, False
    while True:
        s, o = (at - 1, orig - 1) if step < 0 else (at, orig)
        if not (0 <= s < len(lines)) or (o < limit if step < 0 else o >= limit) or not lines[s].strip():
            return at, orig, fuzzy
        a, b = lines[s], index.lines[o]
        if index.level(a, o) is None:
            if (not similar or is_trivial(a) or indent_of(a) != indent_of(b)
                    or (not _same_setting(a, b) and similarity(a, b) < _threshold(a, b)) or _elsewhere(a, b, index)):
                return at, orig, fuzzy
            fuzzy = True
        at, orig = at + step, orig + step


_DOC_COMMENT = re.compile(r"^\s*(?:#(?!!)|//|/\*|\*|--)")
_DOCSTRING = re.compile(r'^\s*[rRbBuU]?("""|\'\'\')')


def _documents(lines, edge: int, step: int) -> bool:
    """Whether the comment lines next to an anchor whose outermost line is `edge` document it:
    below it, a definition's docstring; above it, the comment of the code line it starts with
    (a definition, a field, an object's entry), also when the anchor took the comment's last
    lines."""
    if step > 0:
        return definition(lines[edge]) is not None
    row = edge
    while row < len(lines) and _DOC_COMMENT.match(lines[row]):
        row += 1
    return row < len(lines) and lines[row].strip() != "" and not is_trivial(lines[row])


def doc_block(lines, at: int, step: int, limit: int | None = None) -> int:
    """How many lines of doc comment start next to a definition, going `step` from line `at`
    (exclusive bound on the -1 side): comment lines above it, or comment lines or a docstring
    (through its closing quotes) below it; 0 when there are none. Stays inside `limit`."""
    limit = (0 if step < 0 else len(lines)) if limit is None else limit
    rows = range(at - 1, limit - 1, -1) if step < 0 else range(at, limit)
    first = next(iter(rows), None)
    if first is None:
        return 0
    quote = _DOCSTRING.match(lines[first]) if step > 0 else None
    if quote:
        closed = lines[first].count(quote.group(1)) >= 2
        end = next((r for r in rows if r == first and closed or r > first and quote.group(1) in lines[r]), None)
        return 0 if end is None else end - first + 1
    n = 0
    for r in rows:
        if not _DOC_COMMENT.match(lines[r]):
            break
        n += 1
    return n


_EXIT = re.compile(r"^\s*(return|raise|throw)\b")


def _same_setting(a: str, b: str) -> bool:
    """Whether `a` and `b` set the same thing: the same name (`x1 = 'one'` and `x1 = 1`), or the
    value a block exits with (`return 'new'` and `return 0`). A changed value, however little of
    the line is left (short lines keep few characters); kept beside it, one of the two is dead."""
    ours = setting(a)
    if ours is not None:
        return ours[:2] == (setting(b) or ())[:2]
    exits = _EXIT.match(a)
    return exits is not None and (theirs := _EXIT.match(b)) is not None and exits[1] == theirs[1]


def _elsewhere(a: str, b: str, index: OriginalIndex) -> bool:
    """Whether `a` defines a name that `b` does not and the original defines elsewhere: then `a`
    is that other definition (`def f100` is not a changed `def f1`)."""
    key = definition(a)
    return key is not None and key != definition(b) and key in index.definitions


def _threshold(a: str, b: str) -> float:
    """How similar edge line `a` must be to original line `b` to replace it: EXTEND_THRESHOLD,
    or PROSE_THRESHOLD when both are comments or strings opened the same way (a reworded
    docstring keeps few of its characters, but is still the docstring)."""
    opener = _PROSE.match(a.strip())
    return PROSE_THRESHOLD if opener and b.strip().startswith(opener.group(0)) else EXTEND_THRESHOLD
