"""Search/replace blocks as the edit (Aider, Cline, Roo Code write them):

    <<<<<<< SEARCH              (Cline: ------- SEARCH)
    lines of the file as they are
    =======
    what they become
    >>>>>>> REPLACE             (Cline: +++++++ REPLACE)

An answer may hold several blocks, fenced or not, with prose and file names around them, in any
order. `blocks(text, path)` reads them (a block under a line or fence naming another file than
`path` is left out; Roo Code's `:start_line:N` and `-------` lines are read as its hint and its
separator); `apply_blocks(original, found)` applies them.

Each block's SEARCH must match one place: exactly; else with trailing whitespace ignored; else
with all whitespace ignored. Its lines that REPLACE repeats (context) stay the file's own lines,
byte for byte; the new ones take the file's indentation where SEARCH was quoted with another
(a method quoted out of its class), as Aider does. A block that matches nowhere, or at several places (no `:start_line:` naming one of
them), is refused with its first lines (`SearchBlockError`), never guessed. Blocks are applied one
after the other; one that matches nowhere yet is tried again after the others (a block may match
what an earlier one wrote, and answers list blocks in any order); a start line names a line of
the original, so it moves with the blocks applied above it. An empty SEARCH (no lines) writes the
file only when the file is empty.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from difflib import SequenceMatcher

from engine.apply.errors import ApplyError
from engine.apply.fences import same_file
from engine.apply.text import indent_of, split_lines

# Aider's and Roo Code's `<<<<<<< SEARCH` ... `>>>>>>> REPLACE`; Cline's `------- SEARCH` ... `+++++++ REPLACE`.
_SEARCH = re.compile(r"^\s*(?:<{5,9}|-{5,9}) ?SEARCH>?\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*(?:>{5,9}|\+{5,9}) ?REPLACE<?\s*$")
_START_LINE = re.compile(r"^\s*:start_line:\s*(\d+)\s*$")
_ROO_SEPARATOR = re.compile(r"^\s*-{5,9}\s*$")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_FILE_LINE = re.compile(r"^\s*(?:\*\*|`)?((?:[\w.@-]+/)*[\w@-][\w.@-]*\.[A-Za-z]\w{0,9})(?:\*\*|`)?:?\s*$")


class SearchBlockError(ApplyError):
    """A search/replace block that cannot be placed: it matches nowhere, or at several places."""


@dataclass(frozen=True)
class Block:
    search: list[str]
    replace: list[str]
    start_line: int | None = None  # Roo Code's hint: 1-based line where SEARCH starts
    number: int = 0  # 1-based, among the answer's blocks for this file

    def shown(self) -> str:
        first = next((line.strip() for line in self.search if line.strip()), "")
        return f"block {self.number} (SEARCH {first[:60]!r}{'...' if len(first) > 60 else ''})"


def looks_like_search_replace(text: str) -> bool:
    lines = text.split("\n")
    return any(_SEARCH.match(line) for line in lines) and any(_REPLACE.match(line) for line in lines)


def blocks(text: str, path: str | None = None) -> list[Block]:
    lines = split_lines(text).lines
    found: list[Block] = []
    named: str | None = None  # the file the latest name line or fence said
    i = 0
    while i < len(lines):
        line = lines[i]
        named = _named_file(line) or named
        if not _SEARCH.match(line):
            i += 1
            continue
        search, replace, hint = [], [], None
        i += 1
        if i < len(lines) and (m := _START_LINE.match(lines[i])):
            hint, i = int(m[1]), i + 1
        if i < len(lines) and _ROO_SEPARATOR.match(lines[i]) and hint is not None:
            i += 1
        while i < len(lines) and not _DIVIDER.match(lines[i]):
            search.append(lines[i])
            i += 1
        i += 1
        while i < len(lines) and not _REPLACE.match(lines[i]):
            replace.append(lines[i])
            i += 1
        if i >= len(lines):
            raise SearchBlockError(f"block {len(found) + 1} has no '>>>>>>> REPLACE' line: the answer was cut short?")
        i += 1
        if path is None or named is None or same_file(named, path):
            found.append(Block(search, replace, hint, len(found) + 1))
    if not found:
        raise SearchBlockError(f"no search/replace block is for {path}" if path else "no search/replace block found")
    return found


def _named_file(line: str) -> str | None:
    """A file named on a line of its own (`src/app.py`, **app.py**:) or in a fence's info string
    (```python src/app.py), as answers name the file their next blocks are for."""
    fence = _FENCE.match(line)
    words = line[fence.end():].split() if fence else [line.strip()]
    return next((m[1] for word in words if (m := _FILE_LINE.match(word))), None)


def apply_blocks(original: str, found: list[Block]) -> str:
    split = split_lines(original)
    rows = list(split.lines)
    eol = max(set(split.eols) - {""}, key=split.eols.count, default="\n")
    final_newline = split.final_newline or not rows
    pending = list(found)
    applied: list[tuple[int, int]] = []  # (row, rows added) of each block applied, in order
    while pending:
        progress = False
        for block in list(pending):
            place = _place(rows, _moved(block, applied), last_try=False)
            if place is None:
                continue
            start, end = place
            rows[start:end] = new = _replacement(rows[start:end], block)
            applied.append((start, len(new) - (end - start)))
            pending.remove(block)
            progress = True
        if not progress:
            _place(rows, _moved(pending[0], applied), last_try=True)  # raises, saying why
    if not rows:
        return ""
    return eol.join(rows) + (eol if final_newline else "")


def _moved(block: Block, applied: list[tuple[int, int]]) -> Block:
    """`block` with its start line (a line of the original) moved past the blocks applied above it."""
    if block.start_line is None:
        return block
    line = block.start_line - 1
    for row, added in applied:
        if row < line:
            line += added
    return dataclasses.replace(block, start_line=line + 1)


def _place(rows: list[str], block: Block, last_try: bool) -> tuple[int, int] | None:
    """[start, end) of the one place `block`'s SEARCH matches in `rows`; None when it matches
    nowhere (yet), unless `last_try`, which raises instead; raises when it matches several."""
    search = block.search
    if not search:
        if not any(line.strip() for line in rows):
            return 0, len(rows)
        raise SearchBlockError(f"{block.shown()} has an empty SEARCH, which only writes an empty file")
    for same in (lambda a, b: a == b, lambda a, b: a.rstrip() == b.rstrip(), lambda a, b: a.split() == b.split()):
        places = [i for i in range(len(rows) - len(search) + 1)
                  if all(same(rows[i + k], search[k]) for k in range(len(search)))]
        if block.start_line is not None and block.start_line - 1 in places:
            places = [block.start_line - 1]
        if len(places) > 1:
            lines = ", ".join(str(p + 1) for p in places[:5])
            raise SearchBlockError(f"{block.shown()} matches {len(places)} places (at lines {lines}); which one is "
                                   "meant is not plain: give more lines around it")
        if places:
            return places[0], places[0] + len(search)
    if last_try:
        raise SearchBlockError(f"{block.shown()} matches nowhere in the file, not even with whitespace ignored")
    return None


def _replacement(matched: list[str], block: Block) -> list[str]:
    """The lines that take `matched`'s place: a REPLACE line that repeats its SEARCH line exactly
    (context) is the file's own line, as it is (it may differ from the quote by whitespace); the
    others are REPLACE's, re-indented by what the file has and SEARCH lacks (`_shift`). A line
    whose whitespace REPLACE changes is a change."""
    search, replace = block.search, block.replace
    shift = _shift(matched, search, replace, block)
    out: list[str] = []
    for op, i1, i2, j1, j2 in SequenceMatcher(None, search, replace, autojunk=False).get_opcodes():
        out += matched[i1:i2] if op == "equal" else [_shifted(line, shift) for line in replace[j1:j2]]
    return out


def _shift(matched: list[str], search: list[str], replace: list[str], block: Block) -> tuple[str, str]:
    """(taken, added): SEARCH quoted with less indentation than the file has (a method quoted out
    of its class) gets `added` in front of REPLACE's new lines, quoted with more gets `taken` off
    them: REPLACE is read as written in SEARCH's frame, as assistants write both. Refused when the
    quote's indentation is no prefix of the file's or the reverse, or a REPLACE line lacks what
    would be taken off."""
    k = next((k for k, line in enumerate(search) if line.strip()), None)
    have, want = (indent_of(matched[k]), indent_of(search[k])) if k is not None else ("", "")
    if have == want:
        return "", ""
    unclear = SearchBlockError(f"{block.shown()} is quoted with other indentation than the file's, and how its "
                               "REPLACE lines are to be indented is not plain")
    if have.startswith(want):
        return "", have[len(want):]
    taken = want[len(have):] if want.startswith(have) else None
    if taken is None or any(line.strip() and not line.startswith(taken) for line in replace):
        raise unclear
    return taken, ""


def _shifted(line: str, shift: tuple[str, str]) -> str:
    taken, added = shift
    if not line.strip():
        return line
    if taken and line.startswith(taken):
        line = line[len(taken):]
    return added + line
