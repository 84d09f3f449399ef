"""Languages: which one a file is in, its comment syntax, and a tree-sitter parser for it.

The language comes from the file name (extension, or a few well-known names such as `Makefile`)
and can be overridden by name or by a markdown fence tag (`py`, `ts`, `golang`, ...). Parsers come
from the per-language grammar wheels (`tree_sitter_python`, ...); a language without a wheel, or
whose wheel is not installed, still works: it just has no tree, and the callers fall back to
plain-text rules. Unknown files get the `text` language.

Parsers are cached per thread (a tree-sitter `Parser` must not be used by two threads at once);
grammars (`tree_sitter.Language`) are immutable and cached once per process.
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
import warnings
from dataclasses import dataclass

C_BLOCK = ("/*", "*/")
HTML_BLOCK = ("<!--", "-->")


@dataclass(frozen=True)
class LanguageSpec:
    """One language: names, comment syntax, and where its grammar lives (module, function).
    `stray_keywords`: reserved words the grammar's error recovery reads as a variable (a stray
    `end` in Ruby parses as an identifier, not an error); `syntax_errors` counts them."""

    name: str
    extensions: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    line_comments: tuple[str, ...] = ()
    block_comments: tuple[tuple[str, str], ...] = ()
    grammar: tuple[str, str] | None = None
    filenames: tuple[str, ...] = ()
    stray_keywords: tuple[str, ...] = ()


_C_LIKE = dict(line_comments=("//",), block_comments=(C_BLOCK,))
_HASH = dict(line_comments=("#",))

LANGUAGES: dict[str, LanguageSpec] = {
    spec.name: spec
    for spec in (
        LanguageSpec("python", (".py", ".pyi", ".pyw"), ("py", "python3"), **_HASH,
                     grammar=("tree_sitter_python", "language")),
        LanguageSpec("javascript", (".js", ".mjs", ".cjs", ".jsx"), ("js", "jsx", "node"),
                     line_comments=("//",), block_comments=(C_BLOCK, ("{/*", "*/}")),
                     grammar=("tree_sitter_javascript", "language")),
        LanguageSpec("typescript", (".ts", ".mts", ".cts"), ("ts",), **_C_LIKE,
                     grammar=("tree_sitter_typescript", "language_typescript")),
        LanguageSpec("tsx", (".tsx",), (), line_comments=("//",), block_comments=(C_BLOCK, ("{/*", "*/}")),
                     grammar=("tree_sitter_typescript", "language_tsx")),
        LanguageSpec("go", (".go",), ("golang",), **_C_LIKE, grammar=("tree_sitter_go", "language")),
        LanguageSpec("rust", (".rs",), ("rs",), **_C_LIKE, grammar=("tree_sitter_rust", "language")),
        LanguageSpec("java", (".java",), (), **_C_LIKE, grammar=("tree_sitter_java", "language")),
        LanguageSpec("c", (".c", ".h"), (), **_C_LIKE, grammar=("tree_sitter_c", "language")),
        LanguageSpec("cpp", (".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx", ".ipp"), ("c++", "cxx"),
                     **_C_LIKE, grammar=("tree_sitter_cpp", "language")),
        LanguageSpec("csharp", (".cs",), ("cs", "c#", "c-sharp"), **_C_LIKE,
                     grammar=("tree_sitter_c_sharp", "language")),
        LanguageSpec("ruby", (".rb", ".rake", ".gemspec"), ("rb",), **_HASH,
                     grammar=("tree_sitter_ruby", "language"), filenames=("Gemfile", "Rakefile"),
                     stray_keywords=("end", "else", "elsif", "when", "ensure", "rescue", "then", "do")),
        LanguageSpec("bash", (".sh", ".bash", ".zsh"), ("sh", "shell", "zsh"), **_HASH,
                     grammar=("tree_sitter_bash", "language")),
        LanguageSpec("kotlin", (".kt", ".kts"), ("kt", "kts"), **_C_LIKE, grammar=("tree_sitter_kotlin", "language")),
        LanguageSpec("php", (".php",), (), line_comments=("//", "#"), block_comments=(C_BLOCK,),
                     grammar=("tree_sitter_php", "language_php")),
        # Languages without a grammar wheel here: comment syntax only (brackets.py reads their brackets).
        # Swift's, Scala's and Lua's grammars were measured and left out (bench/HISTORY.md, "Kotlin and
        # PHP grammars in the engine"): a wrong Scala result, fewer exact Swift ones, no Lua gain.
        LanguageSpec("swift", (".swift",), (), **_C_LIKE),
        LanguageSpec("scala", (".scala",), (), **_C_LIKE),
        LanguageSpec("css", (".css", ".scss", ".less"), (), block_comments=(C_BLOCK,)),
        LanguageSpec("html", (".html", ".htm", ".xml", ".svg", ".vue"), ("xml", "vue"),
                     block_comments=(HTML_BLOCK,)),
        LanguageSpec("lua", (".lua",), (), line_comments=("--",)),
        LanguageSpec("sql", (".sql",), (), line_comments=("--",), block_comments=(C_BLOCK,)),
        LanguageSpec("yaml", (".yaml", ".yml"), ("yml",), **_HASH),
        LanguageSpec("toml", (".toml",), (), **_HASH),
        LanguageSpec("make", (".mk",), ("makefile",), **_HASH, filenames=("Makefile", "GNUmakefile")),
        LanguageSpec("dockerfile", (), ("docker",), **_HASH, filenames=("Dockerfile",)),
        LanguageSpec("text", (".txt",), ("plain", "plaintext", "txt", "")),
    )
}

_BY_EXTENSION = {ext: spec.name for spec in LANGUAGES.values() for ext in spec.extensions}
_BY_FILENAME = {fn: spec.name for spec in LANGUAGES.values() for fn in spec.filenames}
_BY_ALIAS = {alias: spec.name for spec in LANGUAGES.values() for alias in (spec.name, *spec.aliases)}


def resolve_language(name: str | None) -> str | None:
    """Canonical language name for a name or alias ('py' -> 'python'); None if unknown."""
    if name is None:
        return None
    return _BY_ALIAS.get(name.strip().lower())


def detect_language(path: str | None = None, override: str | None = None) -> str:
    """Language of a file: `override` when it names a known language, else from `path`, else 'text'."""
    if override:
        name = resolve_language(override)
        if name is None:
            raise ValueError(f"unknown language {override!r}; known: {', '.join(sorted(LANGUAGES))}")
        return name
    if path:
        base = os.path.basename(path)
        if base in _BY_FILENAME:
            return _BY_FILENAME[base]
        ext = os.path.splitext(base)[1].lower()
        if ext in _BY_EXTENSION:
            return _BY_EXTENSION[ext]
    return "text"


def language_spec(name: str | None) -> LanguageSpec:
    """The spec of `name` (any alias); the plain-text spec when unknown or None."""
    return LANGUAGES.get(resolve_language(name) or "text", LANGUAGES["text"])


def fence_tag_matches(tag: str, language: str | None) -> bool:
    """Whether a markdown fence info tag ('python', 'py', 'ts') names `language`."""
    canonical = resolve_language(tag)
    if canonical is None or language is None:
        return False
    # A `.tsx` file is often fenced as ```ts / ```typescript, and the reverse.
    families = ({"typescript", "tsx"}, {"javascript", "tsx"})
    lang = resolve_language(language)
    return canonical == lang or any({canonical, lang} <= family for family in families)


@functools.lru_cache(maxsize=None)
def grammar(name: str):
    """The `tree_sitter.Language` for `name`, or None (no grammar, or its wheel is not installed).
    A grammar the package pins that does not load (a broken install, a wheel built for another
    tree-sitter) is said, once: its merges are then checked lexically (brackets.py), which is weaker."""
    spec = language_spec(name)
    if spec.grammar is None:
        return None
    module_name, function_name = spec.grammar
    try:
        from tree_sitter import Language

        module = importlib.import_module(module_name)
        return Language(getattr(module, function_name)())
    except (ImportError, AttributeError, ValueError) as exc:
        warnings.warn(f"the {spec.name} grammar ({module_name}) did not load ({exc}); {spec.name} merges are "
                      "checked lexically only: reinstall editapply's dependencies", RuntimeWarning, stacklevel=2)
        return None


_local = threading.local()


def parser_for(name: str | None):
    """A tree-sitter `Parser` for `name`, cached per thread; None without a grammar."""
    canonical = language_spec(name).name
    lang = grammar(canonical)
    if lang is None:
        return None
    cache = _local.__dict__.setdefault("parsers", {})
    if canonical not in cache:
        from tree_sitter import Parser

        cache[canonical] = Parser(lang)
    return cache[canonical]


@functools.lru_cache(maxsize=None)
def stray_keyword_query(name: str):
    """A query capturing the identifiers named like `name`'s stray keywords; None without any."""
    spec = language_spec(name)
    lang = grammar(spec.name)
    if lang is None or not spec.stray_keywords:
        return None
    from tree_sitter import Query

    words = " ".join(f'"{w}"' for w in spec.stray_keywords)
    return Query(lang, f"((identifier) @word (#any-of? @word {words}))")


def parse_tree(text: str, name: str | None):
    """The tree-sitter tree of `text` in language `name`, or None without a grammar."""
    parser = parser_for(name)
    return None if parser is None else parser.parse(text.encode("utf-8"))


def node_at(tree, row: int, column: int):
    """The smallest node holding the character at (`row`, byte `column`): asked as a one-character
    range, since at a zero-width point some grammars answer with the container whose children
    meet there (tree-sitter-scala's `template_body` at a member's first column)."""
    return tree.root_node.descendant_for_point_range((row, column), (row, column + 1))
