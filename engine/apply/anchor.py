"""Anchor blocks: where lines of a snippet segment sit in the original.

A segment is context lines (unchanged, present in the original) around changed lines. An
*anchor block* is a run of segment lines equal to a run of original lines (exactly, or up to
whitespace). `anchor_blocks` picks a few lines near the segment's head (or tail) -- the first
significant one that occurs in the original, and a few fallbacks -- finds every occurrence, and
grows each one line by line in both directions while segment and original agree. Example,
original `a b c d e f`, segment `b c X e`::

    head: 'b' at 1, grown to 'b c' (seg 0..2 = orig 1..3)
    tail: 'e' at 4, grown to 'e'   (seg 3..4 = orig 4..5)

`candidates.py` pairs head and tail blocks into spans. Significant means not trivial: a blank
line, a lone brace or `else:` anchors nothing by itself (unless it is rare in the file).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections import defaultdict
from dataclasses import dataclass

from engine.apply.indent import file_uses_tabs
from engine.apply.text import depth, indent_of

EXACT, SPACE, FUZZY = 0, 1, 2
LEVELS = ("exact", "whitespace", "fuzzy")
RARE = 3  # a trivial line occurring at most this often in the original can anchor
TRIVIAL_WEIGHT = 0.25  # what a matched trivial line (`}`, a blank) says about position; a significant one says 1
NEW_BODY_RUN = 3  # lines in a run that lets a line of a new definition anchor (a renamed function)
RUN_PROBES = 16  # occurrences of one line tried for such a run
MAX_GROWN = 32  # places of one anchor line a block is grown from at least (`_spread`) ...
GROWTH_BUDGET = 2_000_000  # ... and at most so many, times the segment's length, lines compared
RAREST_OF = 8  # significant lines near a segment's edge among which the rarest also anchors
RENAME_STEM = 3  # characters two names must share at one end for one to rename the other
_TRIVIAL_WORDS = frozenset(
    "pass else else: try: finally: end fi done return break continue default: begin do then esac".split()
)


# A definition starts its line, after modifiers (`pub(crate) fn`, `export default async function`):
# the same words inside a statement or a docstring ("creates a class with") define nothing.
_DEFINITION = re.compile(
    r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*"  # Kotlin's and Swift's annotations on the line: `@JvmStatic fun`
    r"(?:(?:pub(?:\([^)]*\))?|export|default|async|unsafe|extern(?:\s+\"[^\"]*\")?|(?:public|private|protected)(?:\[\w*\])?|"
    r"static|abstract|final|declare|override|open|internal|sealed|inline|const|"
    r"mutating|fileprivate|convenience|required|suspend|data|operator|infix|tailrec|implicit|case|local)\s+)*"
    r"((?:def|class|func|fun|fn|function\*?|interface|struct|enum|trait|type|module|impl|object|protocol|extension)"
    r"\s+(?:\([^)]*\)\s*)?(?:<[^>]*>\s*)?[A-Za-z_$][\w$]*(?:[.:][A-Za-z_$][\w$]*)*)"
)
# Swift's initializers and subscripts: a keyword and a parameter list, no name.
_NAMELESS = re.compile(r"^\s*(?:(?:public|private|fileprivate|internal|open|override|convenience|required|mutating)\s+)*"
                       r"(init|deinit|subscript)\s*(?=[(?!{<])(?:\(\s*([\w$]+))?")
# Kotlin's companion object, named `Companion` unless it says otherwise.
_COMPANION = re.compile(r"^\s*(?:(?:public|private|protected|internal)\s+)*companion\s+object(?:\s+([A-Za-z_]\w*))?")

# A Rust impl block: `impl<K, V> MutableEntryKey for OccupiedEntry<'_, K, V> {` -> its trait and type.
_IMPL = re.compile(r"^\s*(?:unsafe\s+)?impl\s*(?:<[^{]*?>)?\s+(?:([\w:]+)(?:<[^{]*?>)?\s+for\s+)?([\w:]+)")

# A method header of the C family (`  power(e) {`, `public int size() {`, `async load(): Promise<T> {`):
# a name and its parameters opening a block, the name not a control keyword.
_METHOD = re.compile(
    r"^\s*(?:(?:public|private|protected|internal|static|async|override|readonly|abstract|final|virtual|export|"
    r"default|get|set)\s+)*(?:[\w<>\[\],.?]+\s+)?([A-Za-z_$][\w$]*)\s*(?:<[^>]*>)?\s*\([^;{}]*\)\s*"
    r"(?::\s*[^{;=]+)?(?:throws\s+[\w., ]+)?\{\s*$"
)
# A function given a name by assignment or as an object's key (JavaScript, TypeScript):
# `_cast: function _cast(v) {`, `exports.parse = function (s) {`, `const load = async (p) => {`.
_ASSIGNED_FUNCTION = re.compile(
    r"^\s*(?:(?:export\s+)?(?:const|let|var)\s+)?([A-Za-z_$][\w$.]*)\s*[:=]\s*(?:async\s+)?"
    r"(?:function\b|\([^()]*\)\s*(?::\s*[^=]+)?=>|[A-Za-z_$][\w$]*\s*=>)"
)
# The first line of a C-family method header that goes on to the next line (Java, C#):
# `void emit(CodeWriter w, String name)` before `throws IOException {` -- a type, then the name.
_SIGNATURE = re.compile(
    r"^\s*(?:(?:public|private|protected|internal|static|final|abstract|synchronized|native|override|virtual|"
    r"async|default|sealed|extern|unsafe|partial)\s+)*(?!(?:return|new|throw|else|await|yield|case|goto|in|of|defer|go|delete|typeof|void|raise|assert|del|print)\b)"
    r"[\w<>\[\],.?]+\s+([A-Za-z_$][\w$]*)\s*(?:<[^>]*>)?\s*\((?:[^;{}=]*\)(?:\s*throws\s+[\w., ]+)?|[^;{}=)]*,)\s*$"
)
COMMENT_OPENERS = ("#", "//", "/*", "*", "--", ";", "<!--")
_CONTROL = frozenset("if for while switch catch with return else do try synchronized foreach using lock fixed elif".split())


# `NAME = value` (with `const` / `let` / `var` / `export`, or a type annotation): the name and the value.
_ASSIGNMENT = re.compile(r"^\s*(?:(?:export|const|let|var)\s+)*([A-Za-z_][\w.]*)\s*(?::[^=]+)?=(?![=>])(.*)$")
# An entry of a dict, an object or a struct literal, `'key': value,`: the key and the value.
_ENTRY = re.compile(r"""^\s*(['"]?)([\w$.-]+)\1\s*:(?!:)\s*(.+?),\s*$""")


def setting(line: str) -> tuple[str, str, str] | None:
    """What a line sets: ("=", name, value) for an assignment, (":", key, value) for an entry of
    a literal; None otherwise. Two lines that set the same name are one thing with two values."""
    if match := _ASSIGNMENT.match(line):
        return "=", match[1], match[2]
    if match := _ENTRY.match(line):
        return ":", match[2], match[3]
    return None


def definition(line: str) -> str | None:
    """'def main' for `def main(argv):`, 'func (c *Cache) Len' for a Go method, 'method power' for
    `  power(e) {`, 'impl Display for Error' for a Rust impl (generics left out), 'fun build' for
    Kotlin's `fun <T> build()`, 'init label' for Swift's `init(label: ...)`, 'function M.f' for
    Lua's `function M.f(a)`; None otherwise (also in a comment: prose says "the trait can")."""
    if line.lstrip().startswith(COMMENT_OPENERS):
        return None
    if match := _IMPL.match(line):
        return " ".join(filter(None, ("impl", match[1], match[1] and "for", match[2])))
    match = _DEFINITION.match(line)
    if match:
        return " ".join(re.sub(r"<[^>]*>", "", match.group(1)).split())
    if nameless := _NAMELESS.match(line):  # each overload by its first parameter: `init tasksToRequests`
        return " ".join(filter(None, nameless.groups()))
    if companion := _COMPANION.match(line):
        return f"object {companion.group(1) or 'Companion'}"
    assigned = _ASSIGNED_FUNCTION.match(line)
    if assigned:
        return f"function {assigned.group(1).split('.')[-1]}"
    method = _METHOD.match(line) or _SIGNATURE.match(line)
    return f"method {method.group(1)}" if method and method.group(1) not in _CONTROL else None


@functools.lru_cache(maxsize=8192)
def normalize(line: str) -> str:
    """`line` with all runs of whitespace collapsed and the ends stripped."""
    return " ".join(line.split())


@functools.lru_cache(maxsize=8192)
def is_trivial(line: str) -> bool:
    """Blank, punctuation only (`}`, `);`, a docstring quote), or a bare keyword (`else:`)."""
    text = line.strip()
    return sum(ch.isalnum() for ch in text) < 2 or text in _TRIVIAL_WORDS or bool(
        re.fullmatch(r"[\W_]*(?:else|end|return|pass)[\W_]*", text)
    )


class OriginalIndex:
    """The original's lines, with where each whitespace-normalized line occurs; `text` and
    `language` (when given) let placement ask tree-sitter about its structure."""

    def __init__(self, lines: tuple[str, ...], text: str | None = None, language: str | None = None):
        self.lines = lines
        self.text, self.language = text, language
        self.normal = [normalize(line) for line in lines]
        self.normal_at: dict[str, list[int]] = defaultdict(list)
        for i, line in enumerate(self.normal):
            self.normal_at[line].append(i)

    def __len__(self) -> int:
        return len(self.lines)

    @functools.cached_property
    def defines(self) -> tuple[str | None, ...]:
        """`definition` of each original line."""
        return tuple(definition(line) for line in self.lines)

    @functools.cached_property
    def definitions(self) -> frozenset[str]:
        """The definition keys of the original (`def main`, `type Options`)."""
        return frozenset(key for key in self.defines if key)

    @functools.cached_property
    def names(self) -> frozenset[str]:
        """The names the original defines, whatever the keyword (`Options` of `type Options`)."""
        return frozenset(key.split()[-1] for key in self.definitions)

    @functools.cached_property
    def skeletons(self) -> dict[str, list[tuple[str, int]]]:
        """Definition lines without their names -> (name, row) of each (`_renames`, `_twins_of`)."""
        out: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for row, (line, key) in enumerate(zip(self.lines, self.defines)):
            if key:
                name, skeleton = _skeleton(line)
                out[skeleton].append((name, row))
        return out

    @functools.cached_property
    def uses_tabs(self) -> bool:
        """Whether the file indents with tabs (`indent.file_uses_tabs`)."""
        return file_uses_tabs(self.lines)

    def level(self, line: str, at: int) -> int | None:
        """How `line` matches original line `at`: EXACT, SPACE, or None."""
        if self.lines[at] == line:
            return EXACT
        return SPACE if self.normal[at] == normalize(line) else None

    def occurrences(self, line: str, lo: int, hi: int) -> list[int]:
        """Positions in [lo, hi) where `line` occurs exactly or up to whitespace."""
        return [p for p in self.normal_at.get(normalize(line), ()) if lo <= p < hi]


def line_weight(line: str, level: int) -> float:
    """How much a matched line says about position: trivial lines little, inexact ones less."""
    if is_trivial(line):
        return TRIVIAL_WEIGHT
    return 1.0 if level == EXACT else 0.75


@dataclass(frozen=True)
class Block:
    """seg[seg_start : seg_start + length] matches orig[orig_start : ...] line by line.

    `weights` holds `line_weight` of each matched line, in order.
    """

    seg_start: int
    orig_start: int
    weights: tuple[float, ...]
    level: int  # the worst line level inside

    @property
    def length(self) -> int:
        return len(self.weights)

    @property
    def seg_end(self) -> int:
        return self.seg_start + self.length

    @property
    def orig_end(self) -> int:
        return self.orig_start + self.length

    def cut(self, length: int) -> Block:
        """The block's first `length` lines."""
        return Block(self.seg_start, self.orig_start, self.weights[:length], self.level)

    def drop(self, count: int) -> Block:
        """The block without its first `count` lines."""
        return Block(self.seg_start + count, self.orig_start + count, self.weights[count:], self.level)


def grow(seg: tuple[str, ...], index: OriginalIndex, s: int, p: int, lo: int, hi: int,
         skip: frozenset[int] | set[int] = frozenset()) -> Block:
    """Grow the one-line match seg[s] ~ orig[p] both ways, staying inside orig[lo:hi] and on
    one side of the edge of a new definition (rows in `skip`): the `return this;` and `}` of a
    new method are not the lines of the old method above it that they happen to equal."""
    inside = s in skip
    levels = [index.level(seg[s], p)]
    while s - len(levels) + 1 > 0 and p - len(levels) + 1 > lo and ((s - len(levels)) in skip) == inside:
        level = index.level(seg[s - len(levels)], p - len(levels))
        if level is None:
            break
        levels.append(level)
    back = len(levels) - 1
    levels.reverse()
    while (s + len(levels) - back < len(seg) and p + len(levels) - back < hi
           and ((s + len(levels) - back) in skip) == inside):
        level = index.level(seg[s + len(levels) - back], p + len(levels) - back)
        if level is None:
            break
        levels.append(level)
    s0, p0 = s - back, p - back
    weights = tuple(line_weight(seg[s0 + d], lv) for d, lv in enumerate(levels))
    return Block(s0, p0, weights, max(levels))


def new_definitions(seg: tuple[str, ...], index: OriginalIndex, lo: int, hi: int) -> set[int]:
    """Rows of `seg` inside definitions the original does not have (`func handleErr(...) {` and
    its body, down to its closing line at the header's depth) that match no run of NEW_BODY_RUN
    lines of orig[lo:hi].

    A line of a new function can happen to equal an original line (`return nil`, a log call the
    edit moved into it), but it says nothing about where the segment sits: such rows do not
    seed anchors. A renamed function keeps runs of its body, which still do. Indentation gives
    the extent, so no grammar is needed.
    """
    rows = new_definition_rows(seg, index)
    return {s for s in rows if not any(grow(seg, index, s, p, lo, hi, rows).length >= NEW_BODY_RUN
                                       for p in index.occurrences(seg[s], lo, hi)[:RUN_PROBES])}


def new_definition_rows(seg: tuple[str, ...], index: OriginalIndex) -> set[int]:
    """Every row of `seg` inside a definition the original does not have (nor renames): its
    header, its body by indentation, and its closing line."""
    rows: set[int] = set()
    for s, line in enumerate(seg):
        key = definition(line)
        # A name the original defines is not new, whatever the keyword (`type Options` made an
        # `interface Options`).
        if key is None or key.split()[-1] in index.names or s in rows or _renames(line, index) or _twins_of(seg, s, index):
            continue
        level = depth(line)
        end = s + 1
        while end < len(seg) and (not seg[end].strip() or depth(seg[end]) > level):
            end += 1
        if end < len(seg) and depth(seg[end]) == level and is_trivial(seg[end]):
            end += 1  # the closing brace
        rows.update(range(s, end))
    return rows


def twins(seg: tuple[str, ...], index: OriginalIndex) -> set[str]:
    """Original definitions that a new definition of `seg` renames whatever the names: the same
    header but for the name, and the same body line for line (`public boolean has(JsonElement e)
    { return elements.contains(e); }` for `contains`). The segment shows them renamed, so its
    lines anchor and a span may replace them."""
    return {key for s in range(len(seg)) for key in _twins_of(seg, s, index)}


def _twins_of(seg: tuple[str, ...], s: int, index: OriginalIndex) -> list[str]:
    """The original definitions that seg[s], a definition the original does not have, renames
    (`twins`)."""
    key = definition(seg[s])
    if not key or key in index.definitions:
        return []
    skeleton, level = _skeleton(seg[s])[1], depth(seg[s])
    body = [normalize(row) for row in itertools.takewhile(lambda row: row.strip() and depth(row) > level, seg[s + 1:])]
    if not body:
        return []
    return [index.defines[p] for _, p in index.skeletons.get(skeleton, ())
            if index.normal[p + 1 : p + 1 + len(body)] == body
            and p + 1 + len(body) < len(index) and depth(index.lines[p + 1 + len(body)]) <= level]


def _renames(line: str, index: OriginalIndex) -> bool:
    """Whether `line` renames an original definition line: the same line but for the name
    (`function mergeValues(prop) {` for `function mergeInstanceConfigWithDefaults(prop) {`), and
    the names share a stem of RENAME_STEM characters at either end -- with one original name
    only: a stem several share is a naming convention (`_InValidator` beside `_AndValidator`
    and `_OptionalValidator`), not a rename."""
    name, skeleton = _skeleton(line)
    return sum(_stem(name, other) >= RENAME_STEM for other, _ in index.skeletons.get(skeleton, ())) == 1


def _skeleton(line: str) -> tuple[str, str]:
    """(the name `line` defines, the line without it)."""
    name = (definition(line) or "").split(" ")[-1]
    return name, line.strip().replace(name, "", 1)


def _stem(a: str, b: str) -> int:
    """The longer of the common prefix and the common suffix of `a` and `b`."""
    prefix = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    suffix = next((i for i, (x, y) in enumerate(zip(reversed(a), reversed(b))) if x != y), min(len(a), len(b)))
    return max(prefix, suffix)


def anchor_blocks(seg, index: OriginalIndex, lo: int, hi: int, from_end: bool, skip: set[int] = frozenset()) -> list[Block]:
    """Blocks grown from every occurrence of a few anchor lines near the segment's edge.

    Lines are tried from the head (or the tail, `from_end`) inward. Anchor lines are: the
    edge-most one that is significant or rare (a trivial line occurring at most `RARE` times, such
    as `/// ```` in a Rust doc comment, still says where it is); the edge-most significant one; and
    when those only match up to whitespace (perhaps a changed line that happens to equal another
    one but for indentation), the edge-most one with an exact match; and the edge-most line of
    all, when its longest grown blocks are rare. A segment of common trivial lines only falls
    back to its edge-most non-blank line.
    """
    order = list(range(len(seg) - 1, -1, -1) if from_end else range(len(seg)))
    if any(s not in skip and seg[s].strip() for s in order):
        order = [s for s in order if s not in skip]
    found: dict[int, list[int]] = {}  # segment row -> where it occurs, looked up as rows are tried

    def occurs(s: int) -> list[int]:
        if s not in found:
            found[s] = index.occurrences(seg[s], lo, hi) if seg[s].strip() else []
        return found[s]

    def first(wanted):
        return next((s for s in order if occurs(s) and wanted(s)), None)

    significant = first(lambda s: not is_trivial(seg[s]))
    if significant is None and first(lambda s: True) is None:
        return []
    lines = [first(lambda s: not is_trivial(seg[s]) or len(index.normal_at.get(normalize(seg[s]), ())) <= RARE), significant]
    if significant is not None and all(index.lines[p] != seg[significant] for p in found[significant]):
        lines.append(first(lambda s: not is_trivial(seg[s]) and any(index.lines[p] == seg[s] for p in found[s])))
    cap = max(MAX_GROWN, GROWTH_BUDGET // len(seg))  # places a block is grown from, per anchor line
    if significant is not None and len(found[significant]) > cap:
        # The edge-most significant line is everywhere (`return nil` in a long file), so its
        # blocks grow from a few of its places only (`_spread`): the rarest of the next few
        # significant lines still finds the place.
        near = list(itertools.islice((s for s in order if occurs(s) and not is_trivial(seg[s])), RAREST_OF))
        lines.append(min(near, key=lambda s: len(found[s])))
    if all(s is None for s in lines):
        lines = [first(lambda s: True)]
    blocks = {grow(seg, index, s, p, lo, hi, skip): None for s in dict.fromkeys(lines) if s is not None
              for p in _spread(found[s], cap)}
    # The edge-most line, however common: the longest block grown from it can still be rare
    # (`fi`, `fi`, blank is unique where `fi` alone is everywhere).
    edge = first(lambda s: True)
    if edge not in lines:
        grown = [grow(seg, index, edge, p, lo, hi, skip) for p in found[edge]]
        longest = max(b.length for b in grown)
        best = [b for b in grown if b.length == longest]
        if longest >= 2 and len(best) <= RARE:
            blocks.update(dict.fromkeys(best))
    return list(blocks)


def _spread(positions: list[int], cap: int) -> list[int]:
    """At most `cap` of a line's positions, spread evenly over them: a block grown from each of
    a common line's places in a long, repetitive file can cost the segment's length each time,
    and a line that common only gives an ambiguity, which a few places show."""
    if len(positions) <= cap:
        return positions
    step = len(positions) / cap
    return [positions[int(k * step)] for k in range(cap)]
