"""Evidence about a candidate marker line: the snippet's own parse, and the original file.

`line_kinds` asks tree-sitter what a line of the snippet is (a comment, inside a string, a bare
`...` statement, other code, or inside a parse error). A snippet is a fragment, though, and its
parse can be wrong in ways that matter here: one that starts inside a docstring or a raw string
turns strings and code around. `OriginalEvidence` answers from the original file instead: which
lines it has, whether two lines sit in one of its strings, and how many lines lie between two
lines there (what a `...` between them would stand for).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.apply.languages import parse_tree


@dataclass(frozen=True)
class LineKind:
    """What tree-sitter says a line is; `header` is the block header row of a sole `...` body."""

    name: str  # comment | string | ellipsis | code | error
    header: int | None = None
    clean: bool = True  # the whole snippet parsed without errors


def line_kinds(lines: list[str], rows: list[int], language: str | None) -> dict[int, LineKind]:
    """Ask tree-sitter what each of `rows` is, parsing the (dedented) snippet once."""
    widths = [len(line) - len(line.lstrip(" \t")) for line in lines if line.strip()]
    cut = min(widths, default=0)
    common = lines[next(i for i, l in enumerate(lines) if l.strip())][:cut] if widths else ""
    dedented = [line[cut:] if line.startswith(common) else line.lstrip(" \t") for line in lines]
    tree = parse_tree("\n".join(dedented) + "\n", language)
    if tree is None:
        return {}
    kinds = {}
    for row in rows:
        line = dedented[row]
        col = len(line) - len(line.lstrip(" \t"))
        start = len(line[:col].encode("utf-8"))
        end = len(line.rstrip().encode("utf-8"))
        node = tree.root_node.descendant_for_point_range((row, start), (row, max(start, end - 1)))
        kind = _classify(node)
        kinds[row] = LineKind(kind.name, kind.header, clean=not tree.root_node.has_error)
    return kinds


def _classify(node) -> LineKind:
    if "comment" in node.type:
        return LineKind("comment")
    chain = []
    while node is not None:
        chain.append(node)
        node = node.parent
    if any("string" in n.type or "heredoc" in n.type for n in chain):
        return LineKind("string")
    if any(n.type == "ERROR" for n in chain):
        return LineKind("error")
    if chain[0].type == "ellipsis" and len(chain) > 1 and chain[1].type != "expression_statement" and chain[1].has_error:
        # `...` glued to the next line's code (`... t.Tuple[...]`): no element of a real expression.
        return LineKind("error")
    if chain[0].type == "ellipsis" and len(chain) > 1 and chain[1].type == "expression_statement":
        statement = chain[1]
        block = statement.parent
        siblings = [c for c in block.named_children if "comment" not in c.type] if block else []
        if block is not None and block.type == "block" and siblings == [statement] and block.parent:
            return LineKind("ellipsis", header=block.parent.start_point[0])
        return LineKind("ellipsis")
    return LineKind("code")


class OriginalEvidence:
    """What the original file says about candidate lines. It is a whole file, so its parse (and
    its string state) is reliable where a fragment's is not."""

    def __init__(self, original: str | None, language: str | None):
        self.text, self.language = original, language
        self.lines = [line.strip() for line in (original or "").split("\n")]
        self.present = set(self.lines)
        self.known = original is not None
        self._strings: dict[int, int] | None = None

    def body_after(self, header: str) -> set[str]:
        """First non-blank line after each occurrence of `header` in the original."""
        bodies = set()
        for i, line in enumerate(self.lines):
            if line == header:
                following = next((l for l in self.lines[i + 1 :] if l), "")
                bodies.add(following)
        return bodies

    def frames_string(self, lines: list[str], row: int, skip: set[int]) -> bool:
        """Whether snippet line `row` sits inside a string *of the original*: the nearest lines
        around it that the original has lie in one multi-line string there. The original is a
        whole file, so its string state is reliable where a fragment's is not."""
        if not self.known:
            return False
        strings = self._string_rows()
        around = []
        for step in (-1, 1):
            r = row + step
            while 0 <= r < len(lines) and (r in skip or lines[r].strip() not in self.present or not lines[r].strip()):
                r += step
            if not 0 <= r < len(lines):
                return False
            around.append({strings.get(i) for i, l in enumerate(self.lines) if l == lines[r].strip()} - {None})
        return bool(around[0] & around[1])

    def gap(self, lines: list[str], row: int) -> int | None:
        """For a bare `...` at snippet line `row`: how many original lines it could stand for.

        Its non-blank neighbours, when the original has both, are found there (the closest pair
        in order), and the non-blank original lines between them are counted: 0 when there are
        none or just the same `...` (code the edit inserted or kept). None: no evidence (the
        original lacks a neighbour).
        """
        between = self.between(lines, row)
        if between is None:
            return None
        return 0 if between == [lines[row].strip()] else len(between)

    def between(self, lines: list[str], row: int) -> list[str] | None:
        """The non-blank original lines (stripped) between where the non-blank neighbours of
        snippet line `row` are in the original (the closest pair in order); None when the
        original lacks a neighbour."""
        above = next((r for r in range(row - 1, -1, -1) if lines[r].strip()), None)
        below = next((r for r in range(row + 1, len(lines)) if lines[r].strip()), None)
        if above is None or below is None or not self.known:
            return None
        a, b = lines[above].strip(), lines[below].strip()
        starts = [i for i, l in enumerate(self.lines) if l == a]
        ends = [i for i, l in enumerate(self.lines) if l == b]
        pairs = [(q - p, p, q) for p in starts for q in ends if q > p]
        if not pairs:
            return None
        _, p, q = min(pairs)
        return [l for l in self.lines[p + 1 : q] if l]

    def _string_rows(self) -> dict[int, int]:
        """Row -> id of the innermost multi-line string node of the original covering it."""
        if self._strings is None:
            self._strings = {}
            tree = parse_tree(self.text, self.language)
            stack = [tree.root_node] if tree else []
            while stack:
                node = stack.pop()
                first, last = node.start_point[0], node.end_point[0]
                if last > first and ("string" in node.type or "heredoc" in node.type):
                    self._strings.update((r, node.start_byte) for r in range(first, last + 1))
                stack.extend(c for c in node.children if c.end_point[0] > c.start_point[0])
        return self._strings
