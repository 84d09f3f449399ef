"""Minimal text edits: the lines an apply changed, as LSP-style ranges against the old text.

`line_edits(old, new)` compares the two texts line by line (each line with its own ending, so a
changed line ending is a change) and gives one `LineEdit` per changed stretch: the old lines it
replaces and the new lines' text. Unchanged lines are never part of an edit, so an editor keeps
its cursors, marks, folds and undo history on them, and the edit says exactly what the apply did.
Every range is against the *old* text, in order and without overlap, as LSP's `TextEdit[]`
requires (the client applies them all at once).

Lines are split as LSP counts them: at '\\r\\n', '\\n' and a lone '\\r' (not at form feeds or
U+2028, which `str.splitlines` would split at). Positions are (line, character); characters count
in the position encoding the client and server agreed on (UTF-16 code units by default), which
matters only at the end of a last line: one without a line break, or one before whose final
break an insertion at the end of the text is placed (`_before_final_break`, for Neovim); every
other position is a line start.

    >>> line_edits("a\\nb\\nc\\n", "a\\nB\\nc\\n")
    [LineEdit(start=(1, 0), end=(2, 0), text='B\\n')]

This module does not import pygls: the server turns `LineEdit`s into `lsprotocol` TextEdits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.apply.text import line_matcher

ENCODINGS = ("utf-16", "utf-8", "utf-32")
# A line with its ending: '\r\n', '\n' or a lone '\r' (LSP's line breaks); the last may have none.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


@dataclass(frozen=True)
class LineEdit:
    """Replace the old text from `start` to `end` (each `(line, character)`) with `text`."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str


def split_lsp_lines(text: str) -> list[str]:
    """`text` as LSP lines, each keeping its line break ('a\\rb\\r\\n' -> ['a\\r', 'b\\r\\n'])."""
    return _LINE.findall(text)


def units(text: str, encoding: str = "utf-16") -> int:
    """The length of `text` in the position encoding's units."""
    if encoding == "utf-16":
        return len(text.encode("utf-16-le")) // 2
    if encoding == "utf-8":
        return len(text.encode("utf-8"))
    if encoding == "utf-32":
        return len(text)
    raise ValueError(f"position encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")


def line_edits(old: str, new: str, encoding: str = "utf-16") -> list[LineEdit]:
    """The changed stretches of lines between `old` and `new` (none when they are equal)."""
    a, b = split_lsp_lines(old), split_lsp_lines(new)
    edits = []
    for tag, i1, i2, j1, j2 in line_matcher(a, b).get_opcodes():
        if tag != "equal":
            edits.append(_before_final_break(a, LineEdit(_position(a, i1, encoding), _position(a, i2, encoding),
                                                         "".join(b[j1:j2])), encoding))
    return edits


def _before_final_break(lines: list[str], edit: LineEdit, encoding: str) -> LineEdit:
    """An insertion at the very end of a text that ends with a line break, moved before that break.

    The end, (len(lines), 0), is a valid position, but Neovim (0.11, 0.12) appends the inserted
    lines there plus an empty one. Inserting before the final break is the same change everywhere:

        'a\n' + 'b\n' inserted at (1, 0)  ->  '\nb' inserted at (0, 1)
    """
    if edit.start != (len(lines), 0) or not lines:
        return edit
    content = lines[-1].rstrip("\r\n")
    brk = lines[-1][len(content):]
    inserted = split_lsp_lines(edit.text)
    if not inserted or inserted[-1][len(inserted[-1].rstrip("\r\n")):] != brk:
        return edit  # the new text ends with another line break: only the end is exact
    position = (len(lines) - 1, units(content, encoding))
    return LineEdit(position, position, brk + edit.text[: -len(brk)])


def _position(lines: list[str], index: int, encoding: str) -> tuple[int, int]:
    """Where old line `index` starts; `len(lines)` is the end of the text."""
    if index < len(lines) or not lines or lines[-1].endswith(("\n", "\r")):
        return index, 0
    # The end of a text whose last line has no line break: there is no line after it to start.
    return len(lines) - 1, units(lines[-1], encoding)


def apply_edits(text: str, edits: list[LineEdit], encoding: str = "utf-16") -> str:
    """`text` with `edits` applied as an LSP client applies a TextEdit[] (all ranges against
    `text`); what a client does with the server's edits, for tests and benchmarks."""
    lines = split_lsp_lines(text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(position: tuple[int, int]) -> int:
        line, character = position
        if line >= len(lines):
            return len(text)
        content = lines[line].rstrip("\r\n")
        column, used = 0, 0
        while column < len(content) and used < character:
            used += units(content[column], encoding)
            column += 1
        return starts[line] + column

    out, cursor = [], 0
    for edit in sorted(edits, key=lambda e: e.start):
        begin, end = offset(edit.start), offset(edit.end)
        if begin < cursor or end < begin:
            raise ValueError(f"edits overlap or run backwards at {edit.start}")
        out += [text[cursor:begin], edit.text]
        cursor = end
    out.append(text[cursor:])
    return "".join(out)
