"""Brackets of a file in a language without a grammar: the lexical stand-in for tree-sitter's tree.

    errors(text, "kotlin")   # 0-based rows where brackets fail to pair, or a string or comment never closes

Where no grammar is loaded (Kotlin, Swift, PHP, Lua, ... or a grammar wheel that failed to
install), validation counts these errors instead of the tree's (`validate.syntax_errors`): a
merge that drops or doubles a `}` is refused, not reported valid. Lua's blocks are keywords
(`function` ... `end`), paired the same way. Strings and comments are skipped with the
language's comment syntax (`LanguageSpec`) and the quotes below; a string the lexer cannot close
on its line ends there, so a stray apostrophe costs one line, not the file. Like the tree's
count, the check compares the result with the original: errors the file already has are fine.
"""

from __future__ import annotations

import bisect
import functools
import re

from engine.apply.languages import language_spec

_PAIRS = {"(": ")", "[": "]", "{": "}"}
# Languages whose blocks are keywords: each opener and the word that closes it (`elseif` and
# `then` open nothing; `for ... do` and `while ... do` open at `do`).
_KEYWORD_PAIRS = {"lua": {"function": "end", "do": "end", "if": "end", "repeat": "until"}}

# Languages whose `'` delimits strings; elsewhere it is a character literal ('x', '\n') or not a
# quote at all (Rust's lifetimes, prose in markup).
_SINGLE_QUOTED = {"python", "javascript", "typescript", "tsx", "ruby", "bash", "php", "lua", "sql", "yaml",
                  "toml", "css"}
_TRIPLE_DOUBLE, _TRIPLE_SINGLE = '"' * 3, "'" * 3
# Strings and comments that may span lines, as (opener, closer, escapes).
_MULTILINE = {
    "python": ((_TRIPLE_DOUBLE, _TRIPLE_DOUBLE, True), (_TRIPLE_SINGLE, _TRIPLE_SINGLE, True)),
    "javascript": (("`", "`", True),),
    "typescript": (("`", "`", True),),
    "tsx": (("`", "`", True),),
    "go": (("`", "`", False),),
    "kotlin": ((_TRIPLE_DOUBLE, _TRIPLE_DOUBLE, False),),
    "scala": ((_TRIPLE_DOUBLE, _TRIPLE_DOUBLE, False),),
    "swift": ((_TRIPLE_DOUBLE, _TRIPLE_DOUBLE, True),),
    "toml": ((_TRIPLE_DOUBLE, _TRIPLE_DOUBLE, True), (_TRIPLE_SINGLE, _TRIPLE_SINGLE, False)),
    "lua": (("--[[", "]]", False), ("[[", "]]", False)),
}
# Where the check means nothing: prose, or a file of a language we do not know.
_NOT_CODE = {"text"}


def applies(language: str | None) -> bool:
    """Whether `language` is code whose brackets `errors` can read (not prose)."""
    return language_spec(language).name not in _NOT_CODE


@functools.lru_cache(maxsize=64)
def _lexer(name: str) -> tuple[re.Pattern, dict[str, str], dict[str, tuple[str, bool]]]:
    """For language `name`: the pattern of what matters in code (comment and string openers,
    brackets, block keywords as whole words; longest first), each opener's closer, and each
    multi-line opener's (closer, escapes)."""
    spec = language_spec(name)
    multiline = {open_: (close, escapes) for open_, close, escapes in _MULTILINE.get(name, ())}
    keywords = _KEYWORD_PAIRS.get(name, {})
    symbols = {*multiline, *(o for o, _ in spec.block_comments), *spec.line_comments, '"', "'", *_PAIRS, *_PAIRS.values()}
    alternatives = [re.escape(t) for t in sorted(symbols, key=len, reverse=True)]
    if keywords:
        alternatives.insert(0, r"\b(?:" + "|".join(sorted({*keywords, *keywords.values()})) + r")\b")
    return re.compile("|".join(alternatives)), {**_PAIRS, **keywords}, multiline


_QUOTED = {q: re.compile(rf"(?:\\.|[^\\{q}\n])*{q}") for q in "\"'"}
_CHAR = re.compile(r"'(?:\\[^'\n]{1,10}|[^\\'\n])'")


def errors(text: str, language: str | None) -> list[int]:
    """0-based rows, sorted, where `text` read as code in `language` has a closer with no opener
    or the wrong one (its row), an opener never closed (its row), a string or block comment that
    never ends (where it starts)."""
    spec = language_spec(language)
    pattern, pairs, multiline = _lexer(spec.name)
    closers = set(pairs.values())
    block_comments = dict(spec.block_comments)
    starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def row(pos: int) -> int:
        return bisect.bisect_right(starts, pos) - 1

    def line_end(pos: int) -> int:
        end = text.find("\n", pos)
        return len(text) if end < 0 else end

    stack: list[tuple[str, int]] = []  # (the closer awaited, the opener's row)
    found: list[int] = []
    pos = 0
    while (m := pattern.search(text, pos)) is not None:
        token, pos = m.group(), m.end()
        if token in multiline or token in block_comments:
            close, escapes = multiline.get(token) or (block_comments[token], False)
            end = _find_close(text, pos, close, escapes)
            if end < 0:
                found.append(row(m.start()))  # never closed: the rest of the file is inside it
                break
            pos = end
        elif token in spec.line_comments:
            pos = line_end(pos)
        elif token in pairs:
            stack.append((pairs[token], row(m.start())))
        elif token in closers:
            depth = next((i for i in range(len(stack) - 1, -1, -1) if stack[i][0] == token), None)
            if depth is None:
                found.append(row(m.start()))  # a closer with no opener
                continue
            found += [r for _, r in stack[depth + 1:]]  # openers it skips never close
            del stack[depth:]
        elif token == "'" and spec.name not in _SINGLE_QUOTED:
            if (char := _CHAR.match(text, m.start())) is not None:
                pos = char.end()
        else:  # a one-line string; unclosed, it ends with its line
            quoted = _QUOTED[token].match(text, pos)
            pos = quoted.end() if quoted is not None else line_end(pos)
    return sorted(found + [r for _, r in stack])


def _find_close(text: str, pos: int, close: str, escapes: bool) -> int:
    """The position just past the first `close` at or after `pos` (a backslash escaping the
    next character where `escapes`), or -1."""
    while (at := text.find(close, pos)) >= 0:
        if escapes and _escaped(text, at, pos):
            pos = at + 1
            continue
        return at + len(close)
    return -1


def _escaped(text: str, at: int, start: int) -> bool:
    """Whether an odd run of backslashes (after `start`) ends just before `at`."""
    n = 0
    while at - n - 1 >= start and text[at - n - 1] == "\\":
        n += 1
    return n % 2 == 1
