"""Checks on a merged file before anyone writes it.

Each check is a named `Problem` with a reason; `Validation.ok` is False when any has severity
'error'. The caller decides what to do (the CLI refuses to write unless `--force`).

* `empty_result`     the result is empty (or whitespace) though the original was not;
* `parse_errors`     tree-sitter finds more ERROR/MISSING nodes in the result than in the
                     original: the merge broke the syntax (errors the file already had are fine);
* `markers_copied`   elision markers (`// ... existing code ...`) landed in the file as text;
* `mass_deletion`    more than 30% of the original's lines disappeared (net of lines added in
                     their place) while the snippet kept elisions, i.e. did not say "this is the
                     whole new file";
* `no_change`        (warning) the result equals the original.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from engine.apply.errors import Problem
from engine.apply.languages import parse_tree, resolve_language
from engine.apply.markers import find_markers
from engine.apply.snippet import Snippet, parse_snippet
from engine.apply.text import line_matcher, split_lines

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
             *, allow_deletion: bool = False) -> Validation:
    """Validate `result` (a string or a `MergeResult`) as the new version of `original`.

    `snippet` (text or parsed; a `MergeResult` brings its own) tells whether a large deletion was
    asked for: a snippet without markers is the whole new file. `allow_deletion` says the request
    asked for deletions.
    """
    text = result if isinstance(result, str) else result.text
    if snippet is None and not isinstance(result, str):
        snippet = result.snippet
    if isinstance(snippet, str):
        try:
            snippet = parse_snippet(snippet, language, original=original)
        except ValueError:
            snippet = None
    language = resolve_language(language) or (snippet.language if snippet else None) or language
    problems: list[Problem] = []
    if not text.strip() and original.strip():
        problems.append(Problem("empty_result", "the result is empty but the original is not"))
    problems += _parse_errors(original, text, language)
    problems += _copied_markers(original, text, language)
    # A snippet without markers is the whole new file: its deletions are what it says. Unless
    # the merge had to guess that from a snippet reaching only one end of the file.
    guessed = not isinstance(result, str) and any(p.name == "whole_file" for p in result.problems)
    whole_file = snippet is not None and not snippet.has_markers and not guessed
    if not (allow_deletion or whole_file):
        problems += _mass_deletion(original, text)
    if text == original:
        problems.append(Problem("no_change", "the result is identical to the original", "warning"))
    return Validation.of(problems)


def syntax_errors(text: str, language: str | None) -> list[int] | None:
    """0-based rows of the innermost ERROR and MISSING nodes in `text`; None without a grammar.

    Innermost, because error recovery wraps a whole class in one ERROR node whose start says
    little; the nodes inside it sit where the syntax actually broke.
    """
    tree = parse_tree(text, language)
    if tree is None:
        return None
    rows: list[int] = []
    stack = [tree.root_node] if tree.root_node.has_error else []
    while stack:
        node = stack.pop()
        inner = [c for c in node.children if c.has_error or c.is_missing]
        if (node.is_error or node.is_missing) and not inner:
            rows.append(node.start_point[0])
        stack.extend(inner)
    return sorted(rows)


def _parse_errors(original: str, text: str, language: str | None) -> list[Problem]:
    after = syntax_errors(text, language)
    if not after:
        return []
    before = syntax_errors(original, language) or []
    if len(after) <= len(before):
        return []
    # Point at the first error on a line the original had no error on.
    orig_lines = original.split("\n")
    old = {orig_lines[r].strip() for r in before}
    lines = text.split("\n")
    row = next((r for r in after if lines[r].strip() not in old), after[0])
    return [Problem("parse_errors", f"the result has {len(after)} syntax error node(s), the original "
                    f"{len(before)}: the merge broke the code's syntax", line=row + 1)]


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
