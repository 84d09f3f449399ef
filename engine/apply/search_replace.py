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
with all whitespace ignored (the REPLACE lines then take the file's indentation, shifted as the
match was). A block that matches nowhere, or at several places (no `:start_line:` naming one of
them), is refused with its first lines (`SearchBlockError`), never guessed. Blocks are applied one
after the other; one that matches nowhere yet is tried again after the others (a block may match
what an earlier one wrote, and answers list blocks in any order). An empty SEARCH writes the
file only when the file is empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    number: int = 0  # 1-based, in the answer's order

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
    while pending:
        progress = False
        for block in list(pending):
            place = _place(rows, block, last_try=False)
            if place is None:
                continue
            start, end, shift = place
            rows[start:end] = [_shifted(line, shift) for line in block.replace]
            pending.remove(block)
            progress = True
        if not progress:
            _place(rows, pending[0], last_try=True)  # raises, saying why
    if not rows:
        return ""
    return eol.join(rows) + (eol if final_newline else "")


def _place(rows: list[str], block: Block, last_try: bool) -> tuple[int, int, tuple[str, str]] | None:
    """(start, end, indentation shift) of the one place `block`'s SEARCH matches in `rows`; None
    when it matches nowhere (yet), unless `last_try`, which raises instead; raises when ambiguous."""
    search = block.search
    if not any(line.strip() for line in search):
        if not any(line.strip() for line in rows):
            return 0, len(rows), ("", "")
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
            return places[0], places[0] + len(search), _shift(rows[places[0]:places[0] + len(search)], search)
    if last_try:
        raise SearchBlockError(f"{block.shown()} matches nowhere in the file, not even with whitespace ignored")
    return None


def _shift(matched: list[str], search: list[str]) -> tuple[str, str]:
    """(taken, added): the indentation the file has where SEARCH has less (added) or more (taken)."""
    k = next((k for k, line in enumerate(search) if line.strip()), None)
    if k is None:
        return "", ""
    have, want = indent_of(matched[k]), indent_of(search[k])
    if have.startswith(want):
        return "", have[len(want):]
    if want.startswith(have):
        return want[len(have):], ""
    return "", ""


def _shifted(line: str, shift: tuple[str, str]) -> str:
    taken, added = shift
    if not line.strip():
        return line
    if taken and line.startswith(taken):
        line = line[len(taken):]
    return added + line
