"""Elision markers: the lines of a lazy snippet that stand for "unchanged code goes here".

Chat models write them in many forms: `// ... existing code ...`, `# ...`, `/* ... */`,
`// ... rest of the function unchanged ...`, `# (unchanged)`, `<!-- ... -->`, `{/* ... */}`, and in
Python a bare `...` line. Finding them takes two steps:

1. `marker_shape(line)` looks at one line's text: a comment (any common comment syntax: models do
   not always use the file's own) whose body is dots, or dots plus a few words, or an elision
   phrase from a small vocabulary ("existing code", "unchanged", "rest of the file"), or a bare
   `...`. A *strong* shape (only dots, or dots on both sides of a few words) is nearly never a
   real comment; a *weak* one ("# rest of the code", "# ... other methods") could be.
2. `find_markers` weighs what tree-sitter says the line is in the snippet against what the
   original file says (`evidence.py`). A comment is a marker; a weak one that the original has
   is a real comment given as context. Inside a string, the original decides (a line it has is
   string content, a marker it lacks is an elision: snippets may start inside a docstring, and
   elisions get written inside long strings). A bare `...` gets the most care, since it is also
   Ellipsis, a stub body and doctest output (`_dots_are_marker`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.apply.evidence import LineKind, OriginalEvidence, line_kinds

STRONG, WEAK = "strong", "weak"

_BLOCK_PAIRS = (("{/*", "*/}"), ("/*", "*/"), ("<!--", "-->"), ("(*", "*)"), ("{-", "-}"))
_LINE_PREFIX = re.compile(r"^(?://+!?|#+|--+|;+|%+)")
_DOTS = r"(?:\.{3,}|…|(?:\. ){2,}\.)"
_LEAD = re.compile(rf"^{_DOTS}")
_TRAIL = re.compile(rf"{_DOTS}$")
_WORD = re.compile(r"[^\W\d_]+")

# Words that make a short comment an elision phrase ("# existing code", "# (unchanged)").
_STRONG_WORDS = frozenset(
    "existing unchanged rest remaining remainder omitted omit elided unmodified untouched snip "
    "snipped same previous brevity etc skipped truncated abbreviated preserved".split()
)
_ANY_STRONG = re.compile("|".join(sorted(_STRONG_WORDS)))
# Every word of a weak marker must come from here, so that prose comments are not taken.
_VOCAB = _STRONG_WORDS | frozenset(
    "of the a an code lines line file function functions method methods class classes module "
    "imports import implementation body content contents logic fields field definitions "
    "declarations other more is are remains remain stays stay as before not shown here above "
    "below for and keep kept this that in goes original props members properties tests cases "
    "handlers helpers config setup component struct impl fn func block section part parts "
    "everything still left unchanged constructor routes types".split()
)


@dataclass(frozen=True)
class MarkerShape:
    """How a line looks: `form` is 'comment' or 'dots' (a bare `...`), `strength` strong/weak."""

    form: str
    strength: str


def _comment_body(text: str) -> str | None:
    """The body of a one-line comment `text` (already stripped), or None if it is not one."""
    for opener, closer in _BLOCK_PAIRS:
        if text.startswith(opener) and text.endswith(closer) and len(text) >= len(opener) + len(closer):
            return text[len(opener) : len(text) - len(closer)].strip(" \t*")
    prefix = _LINE_PREFIX.match(text)
    if prefix:
        return text[prefix.end() :].strip().rstrip("#/ \t")
    return None


def _body_strength(body: str) -> str | None:
    """Strong/weak/None for the body of a comment (see the module docstring)."""
    while len(body) >= 2 and body[0] in "([{" and body[-1] in ")]}":
        body = body[1:-1].strip()
    lead, trail = _LEAD.search(body), _TRAIL.search(body)
    start = lead.end() if lead else 0
    end = trail.start() if trail and (not lead or trail.start() >= lead.end()) else len(body)
    words = _WORD.findall(body[start:end].lower())
    in_vocab = all(w in _VOCAB for w in words)
    strong_word = any(w in _STRONG_WORDS for w in words)
    if (lead or trail) and not words:
        return STRONG
    if lead and trail and end < len(body) and len(words) <= 12:
        return STRONG
    if lead and in_vocab and len(words) <= 8:
        return WEAK
    if trail and in_vocab and strong_word and len(words) <= 8:
        return WEAK
    if not (lead or trail) and words and in_vocab and strong_word and len(words) <= 10:
        return WEAK
    return None


def marker_shape(line: str) -> MarkerShape | None:
    """The marker shape of one line, from its text alone; None if it cannot be a marker.

    >>> marker_shape("    // ... existing code ...")
    MarkerShape(form='comment', strength='strong')
    >>> marker_shape("# (unchanged)")
    MarkerShape(form='comment', strength='weak')
    >>> marker_shape("# Default case...") is None
    True
    """
    text = line.strip()
    if not text or ("." not in text and "…" not in text and not _ANY_STRONG.search(text.lower())):
        return None  # a marker has dots or an elision word: most lines of a long file go here
    if re.fullmatch(_DOTS, text):
        return MarkerShape("dots", STRONG)
    body = _comment_body(text)
    if body is not None:
        strength = _body_strength(body)
        return MarkerShape("comment", strength) if strength else None
    # A bare "... existing code ..." line (no comment syntax) is not code in any language.
    lead, trail = _LEAD.search(text), _TRAIL.search(text)
    if lead and trail and trail.start() > lead.end() and _WORD.search(text):
        return MarkerShape("comment", STRONG)
    return None


def find_markers(lines: list[str], language: str | None, original: str | None = None) -> list[int]:
    """Indices of the lines of `lines` (a snippet's code, no fences) that are elision markers."""
    shapes = {i: s for i, line in enumerate(lines) if (s := marker_shape(line))}
    if not shapes:
        return []
    kinds = line_kinds(lines, list(shapes), language)
    evidence = OriginalEvidence(original, language)
    return [i for i, shape in shapes.items() if _is_marker(shape, kinds.get(i), lines, i, evidence, set(shapes))]


def _is_marker(shape: MarkerShape, kind: LineKind | None, lines: list[str], row: int, original: OriginalEvidence, candidates: set[int]) -> bool:
    text = lines[row].strip()
    in_original = text in original.present
    if shape.form == "dots":
        return _dots_are_marker(kind, lines, row, original, candidates)
    if shape.strength == WEAK and in_original:
        return False  # a real comment of the file, given as context
    if in_original and original.between(lines, row) == [text]:
        return False  # `///     ...` of a doc example, written between the lines it sits between
    if kind is None or kind.name == "comment":  # no grammar: text rules only
        return True
    if kind.name == "string":
        # Inside a string, says the snippet's parse. A snippet is a fragment, though: one that
        # starts inside a docstring or a raw string turns strings and code around, and elisions
        # get written inside long strings too. So the original decides: a line it has is string
        # content; a marker it lacks is an elision (adding such text to a string is far less
        # likely). Without the original, trust the parse when it has no errors.
        if in_original:
            return False
        return original.known or not kind.clean
    return not in_original


def _dots_are_marker(kind: LineKind | None, lines: list[str], row: int, original: OriginalEvidence, candidates: set[int]) -> bool:
    """A bare `...`: the most ambiguous form (an elision, Ellipsis in an expression, a stub body,
    doctest output). Tree-sitter and the original settle it together:

    * inside a string of the original (both neighbours lie in one of its strings): doctest
      output, unless the neighbours are two or more lines apart there (it elides those);
    * a `...` statement among others: an elision; the whole body of a block: a stub, unless the
      original has that header with another body (the snippet elides the body);
    * inside an expression: code, unless the neighbours are apart in the original;
    * inside a string of the snippet: text if the snippet parses cleanly, else (strings may be
      turned around) an elision, as after a parse error (`...` alone is too common a line for
      "the original has it" to mean anything).
    """
    text = lines[row].strip()
    gap = original.gap(lines, row)
    if original.frames_string(lines, row, candidates):
        return gap is not None and gap >= 2
    if kind is None or kind.name in ("error", "comment"):
        return True
    if kind.name == "ellipsis":
        if kind.header is None:
            return True
        header = lines[kind.header].strip()
        if not original.known or header not in original.present:
            return False
        return text not in original.body_after(header)
    if kind.name == "string":
        return not kind.clean  # a clean parse's string state is trustworthy: doctest output
    return bool(gap)  # code: an Ellipsis inside an expression spread over lines
