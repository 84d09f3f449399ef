"""Which part of a file an instruction-only request is about: the top-level definitions it names.

"add type hints to parse_args" needs the model to rewrite `def parse_args` only; rewriting just
that definition (and splicing it back) keeps the prompt and the answer short. tree-sitter lists
the file's top-level definitions with the names each defines -- its own and, for classes and
impls, its methods' -- and the instruction's words are matched against them:

    >>> find_region("import os\\n\\ndef parse_args(argv):\\n    return argv\\n", "Add type hints to parse_args", "python")
    Region(start=2, end=4, names=('parse_args',))

Identifier-shaped words (snake_case, camelCase, `backticked`, `called()`) are matched first;
plain words ("main") only when no identifier-shaped word names anything. A region is the span
from the first to the last matched definition, with comments directly above it; when it covers
most of the file (or nothing matches, or the language has no grammar) the whole file is rewritten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.apply.languages import parse_tree

WHOLE_FILE_SHARE = 0.7  # a region covering more of the file than this is the whole file
MAX_DEPTH = 4  # export -> class -> body -> method
# Instruction words that are verbs or filler far more often than targets.
STOPWORDS = frozenset("""a an the to of in on for and or with from by into as at is be it its this that
add remove delete update change fix rename make use move replace handle support refactor return set get
check allow ensure log print type types hint hints test tests code file function method class new
docstring docstrings comment comments error errors""".split())
_WORD = re.compile(r"`([^`]+)`|([A-Za-z_$][\w$]*)(\s*\()?")


@dataclass(frozen=True)
class Definition:
    """A top-level definition: 0-based lines [start, end), and the names it defines."""

    start: int
    end: int
    names: tuple[str, ...]


@dataclass(frozen=True)
class Region:
    start: int  # 0-based first line
    end: int  # exclusive
    names: tuple[str, ...]  # the matched names, in file order


def _is_function(node_type: str) -> bool:
    return "function" in node_type or "method" in node_type or node_type == "variable_declarator"


def _defines(node_type: str) -> bool:
    return node_type.endswith(("_definition", "_declaration", "_item", "_spec", "_declarator")) \
        and not node_type.startswith(("parameter", "formal", "field", "import", "use_"))


def _names(node, depth: int = 0) -> list[str]:
    """Names `node` defines: its own (`name`, or an impl's `type`/`trait`) and, through containers
    (exports, decorators, class bodies), nested definitions'. Function bodies are not entered."""
    out: list[str] = []
    if _defines(node.type):
        for field in ("name", "type", "trait") if node.type == "impl_item" else ("name",):
            child = node.child_by_field_name(field)
            if child is not None and child.text:
                out.append(child.text.decode("utf-8", "replace").split("<")[0])
    if depth < MAX_DEPTH and not _is_function(node.type):
        for child in node.named_children:
            out += _names(child, depth + 1)
    return out


def top_level_definitions(text: str, language: str | None) -> list[Definition] | None:
    """The file's top-level definitions in order; None when the language has no grammar."""
    tree = parse_tree(text, language)
    if tree is None:
        return None
    defs: list[Definition] = []
    comment_start: int | None = None
    prev_end = -1
    for node in tree.root_node.children:
        row, end = node.start_point[0], node.end_point[0] + 1
        if "comment" in node.type:
            # A comment block directly above a definition belongs to it (doc comments).
            comment_start = row if comment_start is None or row > prev_end else comment_start
            prev_end = end
            continue
        names = tuple(dict.fromkeys(_names(node)))
        start = comment_start if comment_start is not None and prev_end == row else row
        if names:
            defs.append(Definition(start, end, names))
        comment_start, prev_end = None, end
    return defs


def instruction_words(instruction: str) -> tuple[set[str], set[str]]:
    """(identifier-shaped words, plain words) of an instruction; dotted names give each part."""
    strong, plain = set(), set()
    for m in _WORD.finditer(instruction):
        if m[1]:
            strong.update(w for w in re.findall(r"[A-Za-z_$][\w$]*", m[1]))
            continue
        word = m[2]
        if m[3] or "_" in word.strip("_") or re.search(r"[a-z][A-Z]|\d", word):
            strong.add(word)
        elif len(word) >= 3 and word.lower() not in STOPWORDS:
            plain.add(word)
    return strong, plain


def find_region(text: str, instruction: str, language: str | None) -> Region | None:
    """The lines to rewrite for `instruction`, or None for the whole file."""
    defs = top_level_definitions(text, language)
    if not defs or not instruction:
        return None
    strong, plain = instruction_words(instruction)
    for words in (strong, plain):
        hit = [d for d in defs if words.intersection(d.names)]
        if hit:
            break
    else:
        return None
    start, end = hit[0].start, hit[-1].end
    total = text.count("\n") + (not text.endswith("\n"))
    if end - start > WHOLE_FILE_SHARE * total:
        return None
    names = tuple(n for d in hit for n in d.names if n in strong | plain)
    return Region(start, end, tuple(dict.fromkeys(names)))
