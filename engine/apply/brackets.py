"""Brackets of a file in a language without a grammar: the lexical stand-in for tree-sitter's tree.

    errors(text, "kotlin")   # 0-based rows where brackets fail to pair, or a string or comment never closes

Where no grammar is loaded (Kotlin, Swift, PHP, Lua, ... or a grammar wheel that failed to
install), validation counts these errors instead of the tree's (`validate.syntax_errors`): a
merge that drops or doubles a `}` is refused, not reported valid. Lua's and Ruby's blocks are
keywords (`function` ... `end`, `def` ... `end`), paired the same way; in Ruby a word counts only
where the language reads it as a block's (`_ruby_block_word`: not `x if y`, `obj.class`, `if:`,
`def f = x`). Strings and comments are skipped with the language's comment syntax
(`LanguageSpec`) and the quotes below (Ruby's heredocs, percent and regex literals too); a string
the lexer cannot close on its line ends there, so a stray apostrophe costs one line, not the file.
Like the tree's count, the check compares the result with the original: errors the file already
has are fine.
"""

from __future__ import annotations

import bisect
import functools
import re

from engine.apply.languages import language_spec

_PAIRS = {"(": ")", "[": "]", "{": "}"}
# Languages whose blocks are keywords: each opener and the word that closes it (`elseif` and
# `then` open nothing; `for ... do` and `while ... do` open at `do`).
_KEYWORD_PAIRS = {"lua": {"function": "end", "do": "end", "if": "end", "repeat": "until"},
                  "ruby": dict.fromkeys(("def", "class", "module", "if", "unless", "while", "until", "case", "begin",
                                         "do", "for"), "end")}

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
    "ruby": (("=begin", "=end", False),),
}
# Ruby: `if` `unless` `while` `until` open a block where a statement starts (else they modify the
# statement before them: `return x if y`), after `=` `(` `[` `{` `,` `;` or `then` `else` `do` `begin`;
# a loop's own `do` opens nothing; `def f = x` and `def f(a) = a` are whole (a setter `def f=(v)` is not).
_RUBY_MODIFIERS = {"if", "unless", "while", "until"}
_RUBY_STATEMENT_START = re.compile(r"(?:^|[=(\[{,;]|\b(?:then|else|do|begin))\s*$")
_RUBY_LOOP = re.compile(r"\s*(?:while|until|for)\b")
_RUBY_ENDLESS_DEF = re.compile(r"\s*(?:self\.)?[\w?!]+(?:\([^)\n]*\)\s*|\s+)=(?![=~>])")
# A heredoc's opener (`<<~EOS`, `<<-SQL`, `<<'EOS'`): its text runs from the next line to the terminator's.
_HEREDOC = re.compile(r"<<([~-]?)([\"'`]?)([A-Za-z_]\w*)\2")
# A percent literal (`%w[a b]`, `%r!a|b!`, `%Q(...)`, `%(...)`) where an operand starts, not `a % b`:
# skipped to its closing delimiter (a bracket's partner, nested; else the same character).
_PERCENT = re.compile(r"(?<![\w)\]}])%[qQwWiIrsx]?([^\w\s=])")
_PARTNER = {"(": ")", "[": "]", "{": "}", "<": ">"}
# A regex literal `/.../` starts where an operand does: after `(` `,` `=` `~` `!` `|` `&` `{` `[` `;`
# `?` `:` or at a line's start, or after a word and a space when no space follows (`split /,/`; Ruby
# reads `a / b` and `a/b` as division). It ends at the line's next unescaped `/` outside `[...]`.
_REGEX_AFTER = re.compile(r"(?:^|[(,=~!|&{\[;?:])\s*$|\w\s+$")
_REGEX_BODY = re.compile(r"(?:\\.|\[(?:\\.|[^\]\\\n])*\]|[^/\\\n\[])*/[a-z]*")
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
    if name == "ruby":
        alternatives[:0] = [_HEREDOC.pattern, _PERCENT.pattern, "/", r"\$[^\w\s]"]  # `$"` `$/`: globals
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

    stack: list[tuple[str, int]] = []  # (the closer awaited, the opener's row)
    found: list[int] = []
    heredocs: list[tuple[int, int]] = []  # Ruby heredocs' text still ahead: (start, end), in order
    pos = 0
    while (m := pattern.search(text, pos)) is not None:
        token, pos = m.group(), m.end()
        if heredocs and m.start() >= heredocs[0][0]:  # inside a heredoc's text
            pos = heredocs.pop(0)[1]
            continue
        if spec.name == "ruby" and (at := _ruby_token(text, m, starts[row(m.start())], heredocs)) is not None:
            if at < 0:
                found.append(row(m.start()))  # a literal that never ends: the rest of the file is inside it
                break
            pos = at
            continue
        if token in multiline or token in block_comments:
            close, escapes = multiline.get(token) or (block_comments[token], False)
            end = _find_close(text, pos, close, escapes)
            if end < 0:
                found.append(row(m.start()))  # never closed: the rest of the file is inside it
                break
            pos = end
        elif token in spec.line_comments:
            pos = _line_end(text, pos)
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
            pos = quoted.end() if quoted is not None else _line_end(text, pos)
    return sorted(found + [r for _, r in stack])


def _line_end(text: str, pos: int) -> int:
    """The end of the line holding `pos` (its newline's position, or the text's end)."""
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


def _ruby_token(text: str, m: re.Match, line_start: int, heredocs: list[tuple[int, int]]) -> int | None:
    """Ruby's own tokens, which only its pattern yields: the position to read on from after the
    global, regex, percent literal or heredoc opener `m` (-1: the literal never ends; a heredoc's
    text, from the line after, goes on `heredocs`), or after a keyword that opens no block here;
    None for a token the shared loop reads (a bracket, a quote, a comment, a block's word)."""
    token, pos = m.group(), m.end()
    if token[0] == "$":  # a global named by a quote or a bracket: `$"`, `$/`
        return pos
    if token == "/":  # a regex literal, or division
        if _REGEX_AFTER.search(text[line_start:m.start()]) and not text[pos:pos + 1].isspace() \
                and (body := _REGEX_BODY.match(text, pos)) is not None:
            return body.end()
        return pos
    if token.startswith("%"):
        return _percent_end(text, pos, token[-1])
    if token.startswith("<<"):  # the rest of the opener's line is code; its text starts after the last heredoc's
        body = heredocs[-1][1] if heredocs else _line_end(text, pos)
        end = _heredoc_end(text, body, m)
        if end >= 0:
            heredocs.append((body, end))
        return pos if end >= 0 else -1
    if token.isalpha() and not _ruby_block_word(text, m, line_start):
        return pos
    return None


def _ruby_block_word(text: str, m: re.Match, line_start: int) -> bool:
    """Whether Ruby reads the keyword `m` as a block's opener or its `end` (not a method, symbol,
    hash key or variable of that name: `obj.class`, `:end`, `if:`, `end?`; not a modifier or a
    loop's `do`; not an endless `def`)."""
    word, start, end = m.group(), m.start(), m.end()
    after = text[end:end + 2]
    if text[start - 1:start] in (".", ":", "$", "@") or after[:1] in ("?", "!") \
            or (after[:1] in ("=", ":") and after not in ("==", "::")):
        return False
    before = text[line_start:start]
    if word in _RUBY_MODIFIERS:
        return _RUBY_STATEMENT_START.search(before) is not None
    if word == "do":
        return _RUBY_LOOP.match(before) is None
    if word == "def":
        return _RUBY_ENDLESS_DEF.match(text, end) is None
    return True


def _percent_end(text: str, pos: int, opener: str) -> int:
    """The end of a percent literal whose text starts at `pos`, or -1."""
    closer, depth = _PARTNER.get(opener, opener), 0
    while pos < len(text):
        ch = text[pos]
        if ch == "\\":
            pos += 2
            continue
        if ch == closer and depth == 0:
            return pos + 1
        if closer != opener:
            depth += (ch == opener) - (ch == closer)
        pos += 1
    return -1


def _heredoc_end(text: str, body: int, m: re.Match) -> int:
    """The end of the heredoc opened by `m` whose text starts after position `body` (a line's end):
    the end of its terminator's line, or -1."""
    indented, name = m.group(1) in ("~", "-"), m.group(3)
    indent = r"[ \t]*" if indented else ""
    terminator = re.compile(rf"^{indent}{re.escape(name)}[ \t]*$", re.M)
    found = terminator.search(text, body + 1)
    return -1 if found is None else found.end()


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
