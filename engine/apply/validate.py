"""Checks on a merged file before anyone writes it.

Each check is a named `Problem` with a reason; `Validation.ok` is False when any has severity
'error'. The caller decides what to do (the CLI refuses to write unless `--force`).

* `empty_result`     the result is empty (or whitespace) though the original was not;
* `parse_errors`     tree-sitter finds more ERROR/MISSING nodes in the result than in the
                     original (for Python, where it finds none, CPython's compiler is asked
                     too; without a grammar, brackets that fail to pair: brackets.py): the
                     merge broke the syntax (errors the file already had are fine);
* `markers_copied`   elision markers (`// ... existing code ...`) landed in the file as text;
* `mass_deletion`    more than 30% of the original's lines disappeared (net of lines added in
                     their place) while the snippet kept elisions, i.e. did not say "this is the
                     whole new file" (for a model's text; the merge's own deletions are framed by
                     the snippet's context lines on both sides);
* `untouched_lines_changed`  original lines that no snippet segment covers are not in the result
                     verbatim and in order (given the merge that says where the segments went):
                     a deletion nothing in the snippet explains -- a model that drops a file's
                     head, stops early, or "improves" a line nobody asked about;
* `snippet_lines_missing`  lines of the snippet's code are not in the result: the edit was not
                     (fully) applied -- a model that copies the original, or nothing at all;
* `sure_lines_changed`  (a model's text) lines that the merge placed with full confidence are not
                     in the result verbatim: the model "corrected" a part no one doubted;
* `unexplained_change`  (a model's text) a change the snippet does not show: lines deleted that
                     are not framed by two lines adjacent in the snippet, or lines rewritten into
                     lines the snippet does not have;
* `no_change`        (warning) the result equals the original.

Every path runs every check: the deterministic merge keeps untouched lines by construction, so
there the last two are a safety net; on the model path they hold the model to what the merge
knows.
"""

from __future__ import annotations

import ast
import warnings
from collections import Counter
from dataclasses import dataclass

from engine.apply import brackets
from engine.apply.errors import Problem
from engine.apply.languages import language_spec, parse_tree, parser_for, resolve_language, stray_keyword_query
from engine.apply.markers import find_markers
from engine.apply.anchor import normalize
from engine.apply.confidence import HIGH_CONFIDENCE
from engine.apply.merge import MergeResult
from engine.apply.snippet import Snippet, parse_snippet
from engine.apply.text import line_matcher, original_span, split_lines

MASS_DELETION = 0.30  # fraction of the original's lines


@dataclass(frozen=True)
class Validation:
    """`ok` is False when any problem has severity 'error'; `problems` lists them all."""

    ok: bool
    problems: tuple[Problem, ...]

    @classmethod
    def of(cls, problems) -> "Validation":
        return cls(not any(p.severity == "error" for p in problems), tuple(problems))

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.problems]


def validate(original: str, result, snippet: str | Snippet | None = None, language: str | None = None,
             *, allow_deletion: bool = False, merge: MergeResult | None = None) -> Validation:
    """Validate `result` (a string or a `MergeResult`) as the new version of `original`.

    `snippet` (text or parsed; a merge brings its own) tells whether a large deletion was asked
    for: a snippet without markers is the whole new file. `merge` (the `result` itself when it is
    one) says which original lines the snippet's segments cover. `allow_deletion` says the
    request asked for deletions (a unified diff).
    """
    text = result if isinstance(result, str) else result.text
    merge = merge if merge is not None else (None if isinstance(result, str) else result)
    if snippet is None and merge is not None:
        snippet = merge.snippet
    if isinstance(snippet, str):
        try:
            snippet = parse_snippet(snippet, language, original=original)
        except ValueError:
            snippet = None
    language = resolve_language(language) or (snippet.language if snippet else None) or language
    problems: list[Problem] = []
    if not text.strip() and original.strip():
        problems.append(Problem("empty_result", "the result is empty but the original is not"))
    problems += _parse_errors(original, text, language, snippet if isinstance(snippet, Snippet) else None)
    problems += _copied_markers(original, text, language)
    # A snippet without markers that the merge took as the whole new file: its deletions are
    # what it says (a fragment keeps the code around it, so it deletes nothing there).
    whole_file = snippet is not None and not snippet.has_markers
    # The merge's own text deletes only what its anchors frame (a deletion between two context
    # lines of the snippet is what it says); any other text (the model's) is held to the bound.
    if not (allow_deletion or whole_file or (merge is not None and text == merge.text)):
        problems += _mass_deletion(original, text)
    if merge is not None:
        problems += _untouched_lost(original, text, merge)
        if text != merge.text:  # a model's text: held to what the merge is sure of, and to the snippet
            problems += _sure_lines_changed(text, merge)
            if merge.snippet is not None:
                problems += _unexplained_changes(original, text, merge.snippet)
    if isinstance(snippet, Snippet) and not allow_deletion:
        problems += _snippet_lines_missing(text, snippet)
    if text == original:
        problems.append(Problem("no_change", "the result is identical to the original", "warning"))
    return Validation.of(problems)


def syntax_errors(text: str, language: str | None, compiler: bool = True) -> list[int] | None:
    """0-based rows of the innermost ERROR and MISSING nodes in `text`; without a grammar, the
    rows where brackets fail to pair (`brackets.errors`); None for prose. Where those find none
    in Python, the row of CPython's syntax error, if any (`compiler`).

    Innermost, because error recovery wraps a whole class in one ERROR node whose start says
    little; the nodes inside it sit where the syntax actually broke.
    """
    tree = parse_tree(text, language)
    if tree is not None:
        rows = _error_nodes(tree) + _stray_keywords(tree, language)
    elif brackets.applies(language):
        rows = brackets.errors(text, language)
    else:
        return None
    if compiler and not rows and resolve_language(language) == "python" and (row := _python_error(text)) is not None:
        rows.append(row)
    return sorted(rows)


def _error_nodes(tree) -> list[int]:
    """Rows of the innermost ERROR and MISSING nodes of `tree`."""
    rows: list[int] = []
    stack = [tree.root_node] if tree.root_node.has_error else []
    while stack:
        node = stack.pop()
        inner = [c for c in node.children if c.has_error or c.is_missing]
        if (node.is_error or node.is_missing) and not inner:
            rows.append(node.start_point[0])
        stack.extend(inner)
    return rows


def _stray_keywords(tree, language: str | None) -> list[int]:
    """Rows of reserved words the grammar read as a variable (`LanguageSpec.stray_keywords`):
    any such identifier but a method's name at a call or a definition (`range.end`, `def end`)."""
    query = stray_keyword_query(language_spec(language).name)
    if query is None:
        return []
    from tree_sitter import QueryCursor

    rows = []
    for node in QueryCursor(query).captures(tree.root_node).get("word", []):
        parent = node.parent
        if parent is None or (parent.child_by_field_name("method") != node and parent.child_by_field_name("name") != node):
            rows.append(node.start_point[0])
    return rows


def _python_error(text: str) -> int | None:
    """0-based row of the syntax error CPython finds in `text`, or None. tree-sitter's Python
    grammar accepts what CPython does not: a `def` with no body before the next one (a merge
    that anchored one function's body under another's header)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like are warnings, not errors
            compile(text, "<merge>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        return max(0, (exc.lineno or 1) - 1)
    except (ValueError, RecursionError, MemoryError):  # null bytes; nesting deeper than CPython parses
        return None
    return None


def _parse_errors(original: str, text: str, language: str | None, snippet: Snippet | None) -> list[Problem]:
    """More syntax errors than the original has: an error -- unless every new one sits on a line
    the snippet wrote new that stands alone (its brackets balanced, opening no block), and the
    result without those lines has no more errors than the original: the grammar rejects the
    user's own code there (syntax newer than the grammar, or a quirk of it), which no merge can
    fix, and the code around it is whole (a warning)."""
    after = syntax_errors(text, language)
    if not after:
        return []
    before = syntax_errors(original, language) or []
    if len(after) <= len(before):
        return []
    orig_lines = original.split("\n")
    old = {orig_lines[r].strip() for r in before}
    lines = text.split("\n")
    fresh = sorted({r for r in after if lines[r].strip() not in old})
    row = fresh[0] if fresh else after[0]
    what = "syntax error node(s)" if parser_for(language) is not None else \
        "unpaired bracket(s) or unclosed string(s) (no grammar for the language: a lexical check)"
    counts = f"the result has {len(after)} {what}, the original {len(before)}"
    if snippet is not None and fresh and _snippet_own(fresh, lines, snippet, orig_lines):
        rest = "\n".join(line for r, line in enumerate(lines) if r not in fresh)
        # The grammar's count only: without its lines a block the snippet wrote may be empty.
        if len(syntax_errors(rest, language, compiler=False) or []) <= len(before):
            return [Problem("parse_errors", f"{counts}, all on lines the snippet wrote that stand alone: the grammar "
                            "rejects the snippet's own code (new syntax or a quirk of the grammar), kept as written",
                            "warning", line=row + 1)]
    return [Problem("parse_errors", f"{counts}: the merge broke the code's syntax", line=row + 1)]


def _snippet_own(rows: list[int], lines: list[str], snippet: Snippet, orig_lines: list[str]) -> bool:
    """Whether each of `rows` is a line the snippet wrote new that opens and closes nothing."""
    written = {line.strip() for seg in snippet.segments for line in seg.lines} - {l.strip() for l in orig_lines}
    return all(lines[r].strip() in written and _balanced(lines[r]) for r in rows)


def _balanced(line: str) -> bool:
    text = line.strip()
    return not text.endswith(("{", "(", "[", ":", ",")) and all(
        text.count(a) == text.count(b) for a, b in ("()", "[]", "{}"))


def _copied_markers(original: str, text: str, language: str | None) -> list[Problem]:
    lines = list(split_lines(text).lines)
    rows = find_markers(lines, language)
    if not rows:
        return []
    orig_lines = list(split_lines(original).lines)
    before = Counter(orig_lines[r].strip() for r in find_markers(orig_lines, language))
    after = Counter(lines[r].strip() for r in rows)
    extra = after - before
    if not extra:
        return []
    row = next(r for r in rows if lines[r].strip() in extra)
    return [Problem("markers_copied", f"{sum(extra.values())} elision marker line(s) such as "
                    f"{lines[row].strip()!r} were copied into the file as text", line=row + 1)]


def _mass_deletion(original: str, text: str) -> list[Problem]:
    a, b = split_lines(original).lines, split_lines(text).lines
    if not a:
        return []
    matcher = line_matcher(a, b)
    removed = sum(max(0, (i2 - i1) - (j2 - j1)) for op, i1, i2, j1, j2 in matcher.get_opcodes() if op in ("delete", "replace"))
    if removed <= MASS_DELETION * len(a):
        return []
    return [Problem("mass_deletion", f"{removed} of the original's {len(a)} lines ({removed / len(a):.0%}) were "
                    "removed, but the snippet elides code rather than replacing the whole file")]


def _protected(merge: MergeResult, n: int) -> list[tuple[int, int]]:
    """The stretches of the original, [start, end), that no snippet segment covers and no
    unplaced segment could: between two placed segments adjacent in the snippet, and beyond
    the first / last segment when it is placed."""
    placed = sorted((r.start, r.end, r.segment) for r in merge.segments if r.start is not None)
    if not placed:
        return []
    last = len(merge.segments) - 1
    out = [(0, placed[0][0])] if placed[0][2] == 0 else []
    out += [(a[1], b[0]) for a, b in zip(placed, placed[1:]) if b[2] == a[2] + 1]
    out += [(placed[-1][1], n)] if placed[-1][2] == last else []
    return [(a, b) for a, b in out if b > a]


def _untouched_lost(original: str, text: str, merge: MergeResult) -> list[Problem]:
    orig = split_lines(original).lines
    haystack = "\n" + "\n".join(split_lines(text).lines) + "\n"
    pos, lost = 0, []
    for a, b in _protected(merge, len(orig)):
        block = "\n".join(orig[a:b])
        at = haystack.find("\n" + block + "\n", pos)
        if at < 0:
            lost.append((a, b))
        else:
            pos = at + 1 + len(block)
    if not lost:
        return []
    a, b = lost[0]
    return [Problem("untouched_lines_changed", f"{len(lost)} stretch(es) of original lines that the snippet does not "
                    f"touch ({sum(y - x for x, y in lost)} lines) are not in the result verbatim (first: original lines "
                    f"{a + 1}-{b})", line=a + 1)]


def _snippet_lines_missing(text: str, snippet: Snippet) -> list[Problem]:
    """Snippet code lines absent from `text`, compared stripped (indentation may be the file's)."""
    want = Counter(line.strip() for seg in snippet.segments for line in seg.lines if line.strip())
    missing = want - Counter(line.strip() for line in split_lines(text).lines)
    if not missing:
        return []
    first = next(line.strip() for seg in snippet.segments for line in seg.lines if line.strip() in missing)
    return [Problem("snippet_lines_missing", f"{sum(missing.values())} line(s) of the snippet are not in the result "
                    f"(first: {first[:80]!r}): the snippet's change was not (fully) applied")]


def _sure_lines_changed(text: str, merge: MergeResult) -> list[Problem]:
    """Placed segments at HIGH_CONFIDENCE whose lines are not a block of `text`, verbatim."""
    haystack = "\n" + "\n".join(split_lines(text).lines) + "\n"
    for report in merge.segments:
        if report.start is None or report.confidence < HIGH_CONFIDENCE or not report.written:
            continue
        if "\n" + "\n".join(merge.placed_lines(report)) + "\n" not in haystack:
            return [Problem("sure_lines_changed", f"the lines the merge placed for snippet segment {report.segment + 1} "
                            f"({original_span(report.start, report.end)}), with nothing in doubt, are not in the "
                            "result as they are")]
    return []


def _unexplained_changes(original: str, text: str, snippet: Snippet) -> list[Problem]:
    """Diff hunks from `original` to `text` that the snippet does not account for: lines removed
    must lie between two lines adjacent in one snippet segment (the snippet shows them together)
    or give way to lines the snippet adds, and lines written must be the snippet's (compared
    without whitespace)."""
    ours = {normalize(line) for seg in snippet.segments for line in seg.lines if line.strip()}
    adjacent = {(normalize(a), normalize(b)) for seg in snippet.segments
                for a, b in zip([l for l in seg.lines if l.strip()], [l for l in seg.lines if l.strip()][1:])}
    a, b = split_lines(original).lines, split_lines(text).lines
    new = ours - {normalize(line) for line in a}  # the lines the snippet adds or changes
    for op, i1, i2, j1, j2 in line_matcher(a, b).get_opcodes():
        if op == "equal":
            continue
        removed = [line for line in a[i1:i2] if line.strip()]
        added = [normalize(line) for line in b[j1:j2] if line.strip()]
        # Lines may go where the snippet shows their neighbours together, or where it puts
        # lines of its own that the original lacks (a changed line replaces its old version).
        above = next((normalize(l) for l in reversed(b[:j1]) if l.strip()), None)
        below = next((normalize(l) for l in b[j2:] if l.strip()), None)
        if removed and (above, below) not in adjacent and not any(line in new for line in added):
            return [Problem("unexplained_change", f"{original_span(i1, i2)} {'is' if i2 - i1 == 1 else 'are'} gone, but the snippet neither shows "
                            "the lines around them together nor puts new lines there", line=i1 + 1)]
        if op in ("replace", "insert") and any(line not in ours for line in added):
            first = next(line for line in added if line not in ours)
            return [Problem("unexplained_change", f"the result has lines the snippet does not (first: {first[:80]!r}) "
                            f"at {original_span(i1, i2)}", line=i1 + 1)]
    return []
