"""Unified diffs both ways: original -> result for previews, and a diff as the edit itself.

`unified_diff` writes a standard diff (difflib's grouping, `\\ No newline at end of file` where a
side lacks a final newline, CRLF kept inside lines as git does) and checks it by parsing it back
with `unidiff` and applying it to `a`: a diff that does not reproduce `b` is a bug, not output.

`apply_unified_diff` takes a diff as the edit. Diffs written by models are sloppy, so before
`unidiff` parses it: a markdown fence around it is removed, missing `---`/`+++` headers are added,
and every hunk header's line counts are recomputed from the hunk's lines (`@@ ... @@` with wrong or
no numbers is common). Each hunk is then searched for near its stated line, nearest first
(patch(1)-style offsets), exactly, then ignoring whitespace.
"""

from __future__ import annotations

import re

import unidiff

from engine.apply.errors import DiffError
from engine.apply.fences import excerpts
from engine.apply.text import join_lines, line_matcher, split_lines

NO_NEWLINE = "\\ No newline at end of file\n"
_CONTROL = re.compile("[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]")  # C0, DEL, C1, line/paragraph separators
_HUNK = re.compile(r"^@@\s*(?:-(\d+)(?:,(\d+))?)?\s*(?:\+(\d+)(?:,(\d+))?)?\s*@@(.*)$")


def _range(start: int, length: int) -> str:
    """difflib's `-start,length` form: 1-based; an empty range names the line before it."""
    if length == 1:
        return str(start + 1)
    return f"{start if length == 0 else start + 1},{length}"


def diff_label(path: str | None) -> str:
    """`path` made safe for a diff header (`--- a/<label>`): '/'-separated, relative, no `.` or
    `..` parts, control characters escaped (`\\x00`, `\\x0a`), so a client's path can neither
    point the patch outside its tree nor break the header's line.

    >>> diff_label("/../../etc/pass\\nwd")
    'etc/pass\\\\x0awd'
    """
    parts = [p for p in (path or "").replace("\\", "/").split("/") if p not in ("", ".", "..")]
    label = "/".join(parts) or "file"
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else f"\\u{ord(m.group()):04x}", label)


def unified_diff(a: str, b: str, path: str = "file", context: int = 3) -> str:
    """A verified unified diff from `a` to `b` ('' when they are equal); `path` goes through
    `diff_label`."""
    if a == b:
        return ""
    path = diff_label(path)
    la, lb = split_lines(a), split_lines(b)
    # Compare whole lines with their endings, so a changed line ending is a change.
    full_a = [x + e for x, e in zip(la.lines, la.eols)]
    full_b = [x + e for x, e in zip(lb.lines, lb.eols)]
    out = [f"--- a/{path}\n", f"+++ b/{path}\n"]
    matcher = line_matcher(full_a, full_b)
    for group in matcher.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@\n")
        for op, a1, a2, b1, b2 in group:
            if op == "equal":
                out += [_line(" ", x) for x in full_a[a1:a2]]
                continue
            out += [_line("-", x) for x in full_a[a1:a2]]
            out += [_line("+", x) for x in full_b[b1:b2]]
    text = "".join(out)
    _verify(a, b, text)
    return text


def _line(prefix: str, line: str) -> str:
    return prefix + line if line.endswith("\n") else prefix + line + "\n" + NO_NEWLINE


def _verify(a: str, b: str, text: str) -> None:
    # apply_unified_diff parses it with unidiff (raising DiffError if it does not parse or names
    # more than one file) and applies it: the diff must give back exactly the result.
    if apply_unified_diff(a, text) != b:  # pragma: no cover - a bug in unified_diff
        raise DiffError("internal error: the diff written does not reproduce the result")


def _normalize(diff_text: str) -> str:
    """The diff with fences stripped, headers added, and hunk counts recomputed."""
    code, fenced = excerpts(diff_text, "diff")
    # Split on '\n' only: a '\r' inside a diff line is part of that line (CRLF files).
    lines = [line for excerpt in code for line in excerpt] if fenced else diff_text.split("\n")
    if not fenced and lines and lines[-1] == "":
        lines.pop()
    out: list[str] = []
    if not any(l.startswith("--- ") for l in lines):
        out += ["--- a/file", "+++ b/file"]
    i = 0
    while i < len(lines):
        match = _HUNK.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        body, i = [], i + 1
        while i < len(lines) and (lines[i][:1] in (" ", "+", "-", "\\") or lines[i] in ("", "\r")) and not lines[i].startswith(("--- ", "+++ ")):
            body.append(lines[i] if lines[i] not in ("", "\r") else " " + lines[i])  # a context line whose space was stripped
            i += 1
        while body and body[-1] in (" ", " \r"):  # trailing blank lines after the hunk
            body.pop()
        old = sum(1 for l in body if l[0] in " -")
        new = sum(1 for l in body if l[0] in " +")
        start_old = int(match[1]) if match[1] is not None else 1
        start_new = int(match[3]) if match[3] is not None else start_old
        out.append(f"@@ -{start_old},{old} +{start_new},{new} @@{match[5]}")
        out += body
    return "".join(line + "\n" for line in out)


def apply_unified_diff(original: str, diff_text: str, path: str | None = None) -> str:
    """Apply a unified diff to `original`; raises `DiffError` if it does not parse or apply."""
    try:
        patch = unidiff.PatchSet(_normalize(diff_text))
    except unidiff.UnidiffParseError as exc:
        raise DiffError(f"the diff does not parse: {exc}") from exc
    files = [f for f in patch if path is None or f.path == path or path.endswith("/" + f.path) or f.path.endswith(path)]
    if len(files) != 1:
        raise DiffError(f"the diff must change exactly one file{f' ({path})' if path else ''}; it changes {len(patch)}")
    orig = split_lines(original)
    lines, eols = list(orig.lines), list(orig.eols)
    out_lines: list[str] = []
    out_eols: list[str] = []
    cursor = drift = 0
    # A diff with CR in it was made from the file's own lines: take its endings as they are.
    exact_eols = "\r" in diff_text
    final_newline = orig.final_newline
    for number, hunk in enumerate(files[0], 1):
        source = [_content(l.value) for l in hunk if l.line_type in (" ", "-")]
        stated = max(hunk.source_start - (1 if hunk.source_length else 0), 0) + drift
        at = _find(source, lines, stated, cursor)
        if at is None:
            raise DiffError(f"hunk {number} (@@ -{hunk.source_start},{hunk.source_length} @@) does not apply: "
                            "its context and removed lines are not in the file")
        drift = at - (hunk.source_start - (1 if hunk.source_length else 0))
        out_lines += lines[cursor:at]
        out_eols += eols[cursor:at]
        k = at
        for line in hunk:
            if line.line_type == " ":
                out_lines.append(lines[k])
                out_eols.append(eols[k] or orig.eol)
                k += 1
            elif line.line_type == "-":
                k += 1
            elif line.line_type == "+":
                out_lines.append(_content(line.value))
                crlf = line.value.endswith("\r\n")
                out_eols.append(("\r\n" if crlf else "\n") if exact_eols else orig.eol)
        cursor = at + len(source)
        final_newline = _final_newline(hunk, final_newline, at_end=cursor == len(lines))
    out_lines += lines[cursor:]
    out_eols += eols[cursor:]
    if out_eols:
        out_eols = [e or orig.eol for e in out_eols]
        if not final_newline:
            out_eols[-1] = ""
    return join_lines(out_lines, out_eols)


def _content(value: str) -> str:
    return value[:-1].rstrip("\r") if value.endswith("\n") else value


def _final_newline(hunk, current: bool, at_end: bool) -> bool:
    """Whether the file ends with a newline after `hunk` (its `\\ No newline` markers decide)."""
    if not at_end:
        return current
    kinds = [l.line_type for l in hunk]
    if "\\" not in kinds:
        return current if not any(k == "+" for k in kinds[-1:]) else True
    last_target = max((i for i, k in enumerate(kinds) if k in (" ", "+")), default=-1)
    return not (last_target + 1 < len(kinds) and kinds[last_target + 1] == "\\")


def _find(source: list[str], lines: list[str], stated: int, cursor: int) -> int | None:
    """Where `source` occurs in `lines` at or after `cursor`, nearest to `stated` first."""
    last = len(lines) - len(source)
    if last < cursor:
        return None
    stated = min(max(stated, cursor), last)
    order = [stated] + [p for d in range(1, len(lines) + 1) for p in (stated - d, stated + d) if cursor <= p <= last]
    for same in (lambda x, y: x == y, lambda x, y: x.split() == y.split()):
        for p in order:
            if all(same(s, lines[p + i]) for i, s in enumerate(source)):
                return p
    return None
