"""Members that a snippet without markers leaves out between two of its anchors.

A snippet that elides with markers and shows two methods together deletes what lay between them:
its author marks what is left out, so a gap without a marker is a deletion (`def perimeter`
between `area` and `main`). A snippet with no marker at all -- a class rewritten with only its
changed methods -- may leave the others out because they are untouched, or because they are
gone: two readings (`Choices` key `gap@<snippet line>`, placement.py), the first keeping them
(`keep_left_out`). Between a real anchor and a lone closer (`});` of the object the snippet
rewrote) only the first is a reading: a brace says too little to delete whole definitions by.
In the first reading the snippet is an abridged rewrite, so the blank lines it leaves out above
its closing anchor (`}` of the class, after the last member it shows) stay too
(`keep_closing_blanks`).
"""

from __future__ import annotations

import re

from engine.apply.anchor import COMMENT_OPENERS, RENAME_STEM, OriginalIndex, _skeleton, _stem, definition, normalize
from engine.apply.candidates import Candidate, shift
from engine.apply.languages import node_at, parse_tree
from engine.apply.scope import is_closer
from engine.apply.text import depth, indent_of


def left_out(seg, index: OriginalIndex, cand: Candidate) -> list[tuple[int, int, int]]:
    """What the segment's middle leaves out of the original region it replaces (between its
    head and tail anchors): (first, stop, at) for each member there -- a class's method or
    field, an object's entry (tree-sitter says; without a grammar, each outermost definition)
    -- that the segment does not show (nor rename): its original rows, from the blank lines,
    comments and decorators before it to the next member's, and the segment row before which it
    goes back: before the next member of the region that the segment shows, else before the
    tail anchor."""
    lo, hi = cand.head.orig_end, cand.tail.orig_start
    if cand.head is cand.tail or hi <= lo:
        return []
    # Decorators and doc-comment openers that end the head anchor go with the member below
    # them: a shared `@property` or `/**` matched to the first member's says nothing about which
    # member follows it.
    start = cand.head.seg_end
    while lo - 1 > cand.head.orig_start and index.lines[lo - 1].lstrip().startswith(("@", "/**")):
        lo, start = lo - 1, start - 1
    units = _members(index, lo, hi)
    if units is None:
        units = _definitions(index, lo, hi)
    ours = [line for line in seg if definition(line)]
    mid = range(start, cand.tail.seg_start)
    moved = shift(cand.head, seg, index) or 0
    rows = [next((s for s in mid if _shows(seg[s], index.lines[key], name, moved)), None) for _, key, _, name in units]
    out = []
    for n, (first, key, stop, name) in enumerate(units):
        # A member running into the tail anchor is the segment's; one the segment shows is too.
        if stop > hi or rows[n] is not None or (definition(index.lines[key]) and _renamed(index.lines[key], ours, index)):
            continue
        later = next((row for row in rows[n + 1 :] if row is not None), None)
        # Before the next member the segment shows, above its comments and blank lines; else
        # before the tail anchor, above a doc comment's opener it starts under (`/**` above
        # ` * {@inheritDoc}`), not above the blank lines there.
        at = _seg_trivia_start(seg, later, start) if later is not None else \
            _seg_trivia_start(seg, cand.tail.seg_start, start, blanks=False)
        # What lies between two members left out (a commented-out member, `/* ... */`) goes with them.
        begin = out[-1][1] if out and out[-1][2] == at and n and units[n - 1][2] == out[-1][1] else _trivia_start(index, first, lo)
        if later is not None and n + 1 < len(units) and rows[n + 1] == later:
            # The comments and blank lines above the next member that the segment does not
            # show (a `//-----` separator above its doc comment) go back with this one.
            stop = _shown_trivia_start(seg, later, at, index, units[n + 1][1], stop)
        out.append((begin, stop, at))
    return out


def _shown_trivia_start(seg, row: int, seg_lo: int, index: OriginalIndex, key: int, lo: int) -> int:
    """The original row where the lines above member row `key` that the segment shows above
    its row `row` begin, when every original line from `lo` to there is a blank or comment
    line the segment does not write there; else `lo`."""
    s, o = row, key
    while s > seg_lo and o > lo and normalize(seg[s - 1]) == index.normal[o - 1]:
        s, o = s - 1, o - 1
    written = {normalize(line) for line in seg[seg_lo:row] if line.strip()}
    return o if all(_leading(line) and normalize(line) not in written for line in index.lines[lo:o]) else lo


# Tree-sitter node types whose named children are members: left out of a rewrite, they stay.
_CONTAINERS = frozenset("object class_body declaration_list interface_body field_declaration_list dictionary "
                        "literal_value enum_body object_type enum_variant_list body_statement".split())


def _members(index: OriginalIndex, lo: int, hi: int) -> list[tuple[int, int, int, str]] | None:
    """(first row, naming row, end row, name) of each member of a class, trait, object or dict
    that starts in orig[lo:hi], in order: [] when the region holds none (a function's statements
    are no members: deleting one between two anchors is what the snippet says), None without a
    grammar."""
    tree = parse_tree(index.text, index.language) if index.text is not None else None
    if tree is None:
        return None
    out, r = [], lo
    while r < hi:
        line = index.lines[r]
        column = len(indent_of(line).encode("utf-8"))
        node = node_at(tree, r, column) if line.strip() else None
        while node is not None and "comment" in node.type and node.end_point[0] == r and node.end_point[1] < len(line.encode("utf-8")):
            # `/*public*/ CharRange[] getCharRanges() {`: the member starts after the comment.
            rest = line.encode("utf-8")[node.end_point[1]:]
            column = node.end_point[1] + len(rest) - len(rest.lstrip())
            node = node_at(tree, r, column)
        while node is not None and node.parent is not None and node.start_point == (r, column) \
                and not _container(node.parent):
            node = node.parent
        if node is None or node.parent is None or node.start_point != (r, column) or not _container(node.parent) \
                or not node.is_named or any(t in node.type for t in ("comment", "attribute", "decorator")):
            r += 1
            continue
        last = node.end_point[0] - (node.end_point[1] == 0)
        # A decorated or annotated member is known by its definition's line, not by the
        # `@property` or `@Override` above it that its neighbours share (`left_out` puts
        # those lines back with it, as trivia).
        named = node.child_by_field_name("definition") or node
        key = next((c for f in _NAME_FIELDS if (c := named.child_by_field_name(f)) is not None), named)
        out.append((r, max(r, min(key.start_point[0], last)), last + 1, _name(named)))
        r = last + 1
    return out


def _container(node) -> bool:
    return node.type in _CONTAINERS or (node.type == "block" and node.parent is not None
                                        and node.parent.type == "class_definition")


_NAME_FIELDS = ("name", "key", "property", "left")


def _name(node) -> str:
    """A member's name: its name, key or property field, else its first identifier."""
    for field in _NAME_FIELDS:
        child = node.child_by_field_name(field)
        if child is not None:
            return child.text.decode("utf-8", "replace").strip("[]'\"` ")
    found = re.search(r"[A-Za-z_$][\w$]*", node.text.decode("utf-8", "replace"))
    return found.group(0) if found else ""


def _definitions(index: OriginalIndex, lo: int, hi: int) -> list[tuple[int, int, int, str]]:
    """(first row, naming row, end row, name) of each outermost definition in orig[lo:hi] (no
    grammar): it runs to the next one's comments and blank lines."""
    keys = {r: key for r in range(lo, hi) if (key := definition(index.lines[r]))}
    level = min((len(indent_of(index.lines[r])) for r in keys), default=0)
    heads = [r for r in keys if len(indent_of(index.lines[r])) == level]
    ends = [_trivia_start(index, r, lo) for r in heads[1:]] + [hi]
    return [(r, r, end, keys[r].split()[-1]) for r, end in zip(heads, ends)]


def _shows(ours: str, theirs: str, name: str, moved: int = 0) -> bool:
    """Whether segment line `ours` shows the member whose first original line is `theirs`: the
    same line, the same definition, or a line whose head (before its first `(`, `:`, `=`, `{`)
    names it, no deeper than the member (`let validate = ...` inside `test()` is no `validate()`);
    `moved`: how much deeper the original indents the segment's lines."""
    if normalize(ours) == normalize(theirs):
        return True
    key = definition(theirs)
    if key is not None:
        return definition(ours) == key
    if ours.lstrip().startswith(COMMENT_OPENERS):
        return False  # a doc comment that mentions `#getCharRanges()` shows no member
    if depth(ours) + moved > depth(theirs):
        return False
    head = re.split(r"[(:={]", ours, maxsplit=1)[0]
    return bool(name) and name in re.findall(r"[\w$]+", head)  # a key may be a number (`13: "frozen"`)


def keep_left_out(seg: list[str], index: OriginalIndex, found: list[tuple[int, int, int]]) -> tuple[list[str], int]:
    """`seg` with each definition `left_out` found put back, verbatim, where it stood; and how
    many lines that added."""
    out = list(seg)
    for at in sorted({at for _, _, at in found}, reverse=True):
        group = sorted((first, stop) for first, stop, a in found if a == at)
        kept = [line for first, stop in group for line in index.lines[first:stop]]
        # Blank lines the original has around what comes back, where the segment has none.
        first, stop = group[0][0], group[-1][1]
        if at > 0 and seg[at - 1].strip() and kept[0].strip():
            kept = _blank_run(index.lines, first - 1, -1) + kept
        if (at == len(seg) or seg[at].strip()) and kept[-1].strip():
            kept += _blank_run(index.lines, stop, +1)
        out[at:at] = kept
    return out, len(out) - len(seg)


def keep_closing_blanks(seg: list[str], index: OriginalIndex, tail_seg: int, tail_orig: int) -> tuple[list[str], int]:
    """`seg` with the blank lines the original has right above the tail anchor (segment row
    `tail_seg`, original row `tail_orig`) put back, where that anchor is the segment's last line,
    a closer shallower than the line above it (the class's `}`), and the segment goes from the
    original's line above the blank lines straight to it; and how many lines that added."""
    blanks = _blank_run(index.lines, tail_orig - 1, -1)
    above = tail_orig - 1 - len(blanks)
    if not blanks or tail_seg < 1 or above < 0 or any(line.strip() for line in seg[tail_seg + 1 :]) \
            or not is_closer(seg[tail_seg]) or not seg[tail_seg - 1].strip() \
            or depth(seg[tail_seg]) >= depth(seg[tail_seg - 1]) or normalize(seg[tail_seg - 1]) != index.normal[above]:
        return seg, 0
    return seg[:tail_seg] + blanks + seg[tail_seg:], len(blanks)


def _blank_run(lines, at: int, step: int) -> list[str]:
    """The blank lines of `lines` from row `at` on, going `step`."""
    run = []
    while 0 <= at < len(lines) and not lines[at].strip():
        run.append(lines[at])
        at += step
    return run


def _trivia_start(index: OriginalIndex, r: int, lo: int) -> int:
    """Where the lines that go with the definition at row `r` start: the blank lines, comments
    and decorators right above it (not above `lo`)."""
    while r > lo and not definition(index.lines[r - 1]) and _leading(index.lines[r - 1]):
        r -= 1
    return r


def _seg_trivia_start(seg, row: int, lo: int, blanks: bool = True) -> int:
    """Where the comments, decorators (and, with `blanks`, blank lines) above segment row `row`
    start, not above `lo`."""
    while row > lo and (blanks or seg[row - 1].strip()) and not definition(seg[row - 1]) and _leading(seg[row - 1]):
        row -= 1
    return row


def _leading(line: str) -> bool:
    """A line that goes with the definition below it: blank, a comment, a decorator."""
    text = line.strip()
    return not text or text.startswith(("#", "//", "/*", "*", "@", "--"))


def _renamed(line: str, ours: list[str], index: OriginalIndex) -> bool:
    """Whether a definition line of `ours` renames original definition `line`: one line only,
    of a name the original does not define, the same but for the name, sharing a stem with it
    (`visit_tuple` beside `visit_bool` is a naming convention, not a rename)."""
    name, skeleton = _skeleton(line)
    return sum(_skeleton(o)[1] == skeleton and _stem(_skeleton(o)[0], name) >= RENAME_STEM
               and definition(o) not in index.definitions for o in ours) == 1
