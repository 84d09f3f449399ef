"""Re-indenting a segment that the model indented differently from the file.

Models dedent an excerpt of a method ("here is `area`", flush left), or write tabs as spaces.
The anchored lines show it: each pairs a snippet line with the original line it matched up to
whitespace. One consistent mapping over all of them is applied to the whole segment.
"""

from __future__ import annotations

from engine.apply.text import indent_of


def reindent(lines: list[str], seg, blocks, original) -> list[str]:
    """`lines` re-indented when the anchored lines differ from the original by one mapping.

    `blocks` are (segment start, original start, length) of the anchored runs of `seg`.

    Models sometimes dedent an excerpt of a method, or turn tabs into spaces. When every anchored
    line pair (two at least, one differing) fits the same mapping -- a prefix added, a prefix
    removed, or each tab written as N spaces -- every line of the segment gets it; otherwise the
    segment is left as written (a deliberate re-indent, e.g. code wrapped in a new `if`).
    """
    pairs = [(seg[s + d], original[o + d]) for s, o, length in blocks for d in range(length)]
    pairs = [(indent_of(s), indent_of(o)) for s, o in dict.fromkeys(pairs) if s.strip()]
    if len(pairs) < 2 or all(s == o for s, o in pairs):
        return lines
    added = {o[: len(o) - len(s)] if o.endswith(s) else None for s, o in pairs}
    if len(added) == 1 and None not in added:
        (prefix,) = added
        return [prefix + l if l.strip() else l for l in lines]
    removed = {s[: len(s) - len(o)] if s.endswith(o) else None for s, o in pairs}
    if len(removed) == 1 and None not in removed:
        (prefix,) = removed
        return [l[len(prefix) :] if l.startswith(prefix) else l for l in lines]
    if all(set(o) <= {"\t"} and set(s) <= {" "} and len(s) % max(len(o), 1) == 0 and bool(s) == bool(o) for s, o in pairs):
        widths = {len(s) // len(o) for s, o in pairs if o}
        if len(widths) == 1:  # the model turned tabs into spaces
            (width,) = widths
            return [_tabs(l, width) for l in lines]
    return lines


def _tabs(line: str, width: int) -> str:
    spaces = len(line) - len(line.lstrip(" "))
    return "\t" * (spaces // width) + " " * (spaces % width) + line[spaces:]
