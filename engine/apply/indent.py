"""Writing a segment with the file's own indentation.

Models re-indent what they quote: they dedent an excerpt of a method ("here is `area`", flush
left), turn tabs into spaces, or indent by 2 where the file uses 4. The segment's context lines
show how: each is paired with the original line it equals up to whitespace (`pairs`). Measured
in columns (a tab is `width` columns, learned from the pairs), the pairs fit one mapping
`original = scale * snippet + shift`, or they do not (a deliberate re-indent: code wrapped in a
new `if`). Then every line of the segment is written so:

* a context line whose new depth is its original's depth takes the original's indentation
  string (tabs stay tabs, also where the snippet wrote spaces);
* any other line gets the mapped depth, written in the file's style (tabs or spaces) when the
  snippet wrote it in another style, else in its own -- the style of the file around it, in a
  file that mixes them (Emacs' tabs for every 8 columns under 2-space steps): a line written
  with a tab under a context line the original indents with a tab keeps it;
* with no single mapping, depths stay as written: only context lines at their original's depth
  take its indentation string, and lines in the other style are rewritten in the file's (a
  tabs-for-spaces swap is not an edit, a change of depth is).

    >>> reindent(["    x = 1", "\\ty = 2"], {0: "\\tx = 1"}, tabs=True)
    ['\\tx = 1', '\\ty = 2']
"""

from __future__ import annotations

from engine.apply.text import indent_of

DEFAULT_TAB = 4  # columns per tab when the pairs do not tell


def columns(indent: str, width: int) -> int:
    """The depth of an indentation string in columns (tabs to the next multiple of `width`)."""
    col = 0
    for ch in indent:
        col = (col // width + 1) * width if ch == "\t" else col + 1
    return col


def render(depth: int, width: int, tabs: bool) -> str:
    """`depth` columns of indentation, in tabs (and spaces for a remainder) or in spaces."""
    return "\t" * (depth // width) + " " * (depth % width) if tabs else " " * depth


def file_uses_tabs(lines) -> bool:
    """Whether most indented lines of the file start with a tab."""
    starts = [line[0] for line in lines if line[:1] in (" ", "\t") and line.strip()]
    return starts.count("\t") > len(starts) // 2


def tab_width(pairs: list[tuple[str, str]]) -> int:
    """Columns per tab: from pairs whose indentation is tabs on one side and spaces on the other
    (the snippet wrote each tab as N spaces), when they agree; else DEFAULT_TAB."""
    widths = set()
    for s, o in pairs:
        spaces, tabs = (s, o) if set(o) == {"\t"} else (o, s)
        if set(tabs) == {"\t"} and set(spaces) == {" "} and len(spaces) % len(tabs) == 0:
            widths.add(len(spaces) // len(tabs))
    return widths.pop() if len(widths) == 1 else DEFAULT_TAB


def _mapping(depths: list[tuple[int, int]]) -> tuple[int, int] | None:
    """(scale, shift) with original = scale * snippet + shift for every pair, or None."""
    distinct = sorted(set(depths))
    (s0, o0) = distinct[0]
    others = [(s, o) for s, o in distinct if s != s0]
    if not others:
        scale = 1
    else:
        s1, o1 = others[0]
        if (o1 - o0) % (s1 - s0):
            return None
        scale = (o1 - o0) // (s1 - s0)
    shift = o0 - scale * s0
    if scale < 1 or any(o != scale * s + shift for s, o in distinct):
        return None
    return scale, shift


def reindent(lines: list[str], pairs: dict[int, str], tabs: bool, fit: set[int] | None = None) -> list[str]:
    """`lines` written with the file's indentation (see the module docstring). `pairs` maps a row
    of `lines` to the original line it equals up to whitespace; `tabs` is the file's style; the
    mapping is fitted on the rows in `fit` (default: all pairs), e.g. to leave out lone braces."""
    indents = {r: (indent_of(lines[r]), indent_of(o)) for r, o in pairs.items() if lines[r].strip()}
    if all(s == o for s, o in indents.values()):
        return lines
    width = tab_width(list(indents.values()))
    fitted = [indents[r] for r in indents if fit is None or r in fit] or list(indents.values())
    mapping = _mapping([(columns(s, width), columns(o, width)) for s, o in fitted])
    style = "\t" if tabs else " "
    restyle = any(_swapped(s, o) for s, o in indents.values())
    local = _local_styles(lines, pairs)
    out = []
    for r, line in enumerate(lines):
        own = indent_of(line)
        depth = columns(own, width)
        target = depth if mapping is None else mapping[0] * depth + mapping[1]
        original = pairs.get(r)
        if not line.strip():
            out.append(line)
        elif original is not None and columns(indent_of(original), width) == target:
            # A context line at its own depth: the original's indentation, unless the snippet
            # changed only its whitespace mix on purpose ('    \t\t' for '\t\t\t').
            keep = mapping in (None, (1, 0)) and not _swapped(own, indent_of(original))
            out.append(line if keep else indent_of(original) + line[len(own) :])
        elif target != depth or (restyle and own[:1] not in ("", style, local[r])):
            out.append(render(target, width, tabs) + line[len(own) :])
        else:
            out.append(line)
    return out


def _local_styles(lines: list[str], pairs: dict[int, str]) -> list[str]:
    """Per row, the first indentation character of the original line paired with the nearest
    indented context row above it (below it, for rows above every such row); '' for none."""
    marks = [(r, indent_of(pairs[r])[:1]) for r in sorted(pairs) if indent_of(pairs[r])]
    if not marks:
        return [""] * len(lines)
    out, k = [], 0
    for r in range(len(lines)):
        while k + 1 < len(marks) and marks[k + 1][0] <= r:
            k += 1
        out.append(marks[k][1])
    return out


def _swapped(ours: str, theirs: str) -> bool:
    """Whether indentation `ours` is `theirs` with tabs written as spaces, or the reverse: all of
    one kind where the other has the other kind (a mix such as '    \\t\\t' is deliberate)."""
    return (set(ours) == {" "} and "\t" in theirs) or (set(ours) == {"\t"} and " " in theirs)
