"""Where a construct of the original ends: the one exception to "code beyond a segment's last
anchor is kept" (placement.py).

A segment that shows a construct from its first line -- `def loads(...)` with its docstring, a
`module.exports = [` statement, `double() {` -- and then new last lines for it, gives the
construct's new ending: its old ending is what those lines replace. Before a marker that is plain
only when the segment shows the construct whole (down to its closer); at the end of a snippet
without a trailing marker, also when the new lines are as long as the old ending. tree-sitter says which
constructs the segment opened (the smallest named nodes starting inside the segment's span and
running past its last anchor); the old ending is the rest of the outermost one. It is replaced
only when that is plain:

* when the construct ends with its own closer (`}` or `];` at its first line's indentation), the
  new lines end with a closer at that indentation too: the snippet shows the construct whole;
* without one (Python), the new lines hold at least as many statements as the old ending (a new
  docstring alone does not replace a docstring plus a body);
* the old ending defines no name the new lines do not (`drops_definitions`).

Languages without a grammar get no exception: the code beyond is kept, and the merge says it is
unsure.
"""

from __future__ import annotations

import re

from engine.apply.anchor import definition
from engine.apply.languages import node_at, parse_tree
from engine.apply.text import indent_of

# A line that only closes: brackets, Ruby's `end`, the end of a docstring or block comment (`"""`, `*/`).
_CLOSER = re.compile(r"^[\s\])}>;,]+$|^\s*(?:\"\"\"|\'\'\'|\*/|end)\s*$")


def is_closer(line: str) -> bool:
    """Whether `line` only closes (`}`, `});`, `end`, a docstring's last quotes)."""
    return bool(_CLOSER.match(line))


def open_constructs(original: str, lines, language: str | None, span_start: int, end: int, hi: int) -> list[tuple[int, int]]:
    """(first row, exclusive end row) of each construct that starts in orig[span_start:end] and
    runs past its last non-blank line but not past `hi`, innermost first (a docstring, its
    function, its class); [] without a grammar. `lines` are the original's lines."""
    anchor = next((r for r in range(end - 1, span_start - 1, -1) if lines[r].strip()), None)
    tree = parse_tree(original, language) if anchor is not None else None
    if tree is None:
        return []
    column = len(indent_of(lines[anchor]).encode("utf-8"))
    found = []
    node = node_at(tree, anchor, column)
    while node is not None and node.parent is not None:  # the root (the whole file) never counts
        first, last = node.start_point[0], node.end_point[0] + (node.end_point[1] > 0)
        if node.is_named and span_start <= first <= anchor and end < last <= hi and (first, last) not in found:
            found.append((first, last))
        node = node.parent
    return found


def construct_end(original: str, lines, language: str | None, row: int, tree=None) -> int | None:
    """The last row of the outermost construct that starts at original row `row` (where its
    first character is) and runs past it: `inherits(A, B, {` -> the row of its `});`. None
    without a grammar or such a construct. `tree`: the original's, when the caller has it."""
    ends = construct_ends(original, lines, language, row, tree)
    return ends[-1] if ends else None


def construct_ends(original: str, lines, language: str | None, row: int, tree=None) -> list[int]:
    """The last rows of the constructs that start at original row `row` and run past it,
    innermost first: a Ruby class's first `def` starts the method and the class body."""
    tree = tree or parse_tree(original, language)
    if tree is None or not lines[row].strip():
        return []
    column = len(indent_of(lines[row]).encode("utf-8"))
    node = node_at(tree, row, column)
    ends = []
    while node is not None and node.parent is not None and node.start_point == (row, column):
        end = node.end_point[0] - (node.end_point[1] == 0)
        if node.is_named and end > row and end not in ends:
            ends.append(end)
        node = node.parent
    return ends


def block_end(original: str, lines, language: str | None, row: int, hi: int) -> int | None:
    """The exclusive end row of the innermost block that holds original row `row` and goes on
    past it -- a function's body, a class's -- without its closer line (a `}` or `end` indented
    less than `row`: it closes the block); None without a grammar, or when that block runs past
    `hi`. At the top level the block is the file (`hi`)."""
    tree = parse_tree(original, language)
    if tree is None:
        return None
    column = len(indent_of(lines[row]).encode("utf-8"))
    node = node_at(tree, row, column)
    while node is not None and node.parent is not None:
        last = node.end_point[0] - (node.end_point[1] == 0)  # the node's last row
        if node.is_named and last > row:
            if last >= hi:
                return None
            closes = is_closer(lines[last]) and \
                len(indent_of(lines[last])) < len(indent_of(lines[row]))
            return last if closes else last + 1
        node = node.parent
    return hi


def replaces_ending(old: list[str], new: list[str], opener_indent: str, closed_only: bool = False) -> bool:
    """Whether `new` lines plainly replace `old`, the rest of a construct whose first line is
    indented by `opener_indent` (see the module docstring); `closed_only` asks for the closer
    form (a marker after the segment: only a construct shown whole is plain)."""
    old = [l for l in old if l.strip()]
    new = [l for l in new if l.strip()]
    if not old or not new or drops_definitions(old, new):
        return False
    if is_closer(old[-1]) and indent_of(old[-1]) == opener_indent:
        # The construct has its own closer: the snippet shows it whole when it closes it too.
        return is_closer(new[-1]) and indent_of(new[-1]) == opener_indent
    return not closed_only and statements(new) >= statements(old)


def drops_definitions(old: list[str], new: list[str]) -> bool:
    """Whether `old` lines define a name (`definition`) that `new` lines do not: replacing them
    would delete a whole method the snippet never showed."""
    return bool({d for l in old if (d := definition(l))} - {d for l in new if (d := definition(l))})


def statements(lines: list[str]) -> int:
    """Lines at the smallest indentation among those that are not closers alone."""
    body = [l for l in lines if not is_closer(l)]
    depth = min((len(indent_of(l)) for l in body), default=0)
    return sum(1 for l in body if len(indent_of(l)) == depth)
