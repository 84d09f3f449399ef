"""Code in a language without a grammar (Kotlin, Swift, PHP, Scala, Lua, ...): the lexical
bracket check stands in for tree-sitter (`engine/apply/brackets.py`), a snippet end deletes
nothing below (`edges.tail_edge`), and definitions are known by their keywords (`anchor.definition`).

Two sets of real edits: `dev_langs.jsonl` (those languages), and the dev sets' brace-language cases
with their grammars hidden (`no_grammars`), where the merge sees real code whose structure only
its text tells.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.apply import brackets, languages, validate
from engine.apply.anchor import definition
from engine.apply.readings import explore
from engine.apply.validate import syntax_errors

DATA = Path(__file__).resolve().parents[2] / "bench" / "data"


@pytest.fixture
def no_grammars(monkeypatch):
    """Every language as if its grammar wheel were missing."""
    monkeypatch.setattr(languages, "grammar", lambda name: None)
    monkeypatch.setattr(languages._local, "parsers", {}, raising=False)


def test_brackets_pair_across_strings_and_comments():
    code = 'fun f(x: String) {\n    val s = "}{" + \'{\'  // a } here\n    /* ) ] }\n    */ g(s)\n}\n'
    assert brackets.errors(code, "kotlin") == []
    assert brackets.errors(code.replace("g(s)", "g(s"), "kotlin") == [3]  # the opener never closes
    assert brackets.errors(code + "}\n", "kotlin") == [5]  # a closer with no opener
    assert brackets.errors(code.replace("    */", "   "), "kotlin") == [0, 2]  # a comment never ends, nor f


def test_an_apostrophe_is_a_string_only_where_the_language_says_so():
    rust_like = "fun f<'a>(x: &'a str) {\n    g('}')\n}\n"  # a lifetime, then a character literal
    assert brackets.errors(rust_like, "swift") == []
    assert brackets.errors("$s = 'a { b';\nf($s);\n", "php") == []
    # A string never closed on its line ends there: one line lost, not the file.
    assert brackets.errors('val s = "open\nfun g() {\n}\n', "kotlin") == []


def test_lua_blocks_pair_by_keyword():
    lua = "local function f(x)\n  if x then\n    for i = 1, 3 do g(i) end\n  elseif y then\n    return 1\n  end\nend\n"
    assert brackets.errors(lua, "lua") == []
    assert brackets.errors(lua + "end\n", "lua") == [7]  # a doubled `end`
    assert brackets.errors(lua.replace("  end\nend", "end"), "lua") == [0]  # f's `end` closed the `if`
    assert brackets.errors("--[[ end\n]] s = [[ if\n]]\nrepeat x() until done\n", "lua") == []


RUBY = """class Stack < Base
  attr_reader :end, :class
  def push(x)
    return self if x.nil?
    y = if x then 1 else 2 end
    @items.each do |i|
      log(i) unless i.end?
    end
    while busy? do
      wait
    end
    begin
      retry_once
    end while failed?
    self
  end
  def size = @items.size
  def size=(n)
    @n = n
  end
  def sql
    query(<<~SQL, %w[a (b c])
      select end from if
    SQL
  end
end
"""


def test_ruby_blocks_pair_by_keyword():
    """Only the words Ruby reads as a block's opener count: not a modifier (`return self if x`), a
    loop's `do`, an endless `def`, a symbol or method named `end`, nor words in a heredoc or a
    percent literal."""
    assert brackets.errors(RUBY, "ruby") == []
    doubled = RUBY.replace("  end\n  def size =", "  end\n  end\n  def size =")
    assert brackets.errors(doubled, "ruby") == [26]  # the class closed early: its own `end` is the extra one
    assert brackets.errors(RUBY.replace("      log(i) unless i.end?\n    end\n", "      log(i) unless i.end?\n"),
                           "ruby") == [0]
    assert brackets.errors("=begin\ndef if end\n=end\nh = { if: 1, end: 2 }\n", "ruby") == []
    # Regex literals where an operand starts (division elsewhere), and globals named by punctuation.
    assert brackets.errors('if s =~ /(a|#|\\[)/ then x.split(/[(]/) end\nq = a / b\ny = (c/d)\nz = $" + $/\n', "ruby") == []


def test_the_dev_sets_ruby_reads_without_errors():
    """Every Ruby file of the dev sets, before and after its commit (162), lexes with its blocks
    paired: no error the file does not have (30 read with some before regex literals were read)."""
    texts = [c[key] for name in ("dev_hard.jsonl", "dev_hard_train.jsonl", "dev_hard_train2.jsonl")
             for line in (DATA / name).open() if (c := json.loads(line))["language"] == "ruby"
             for key in ("original", "expected")]
    assert len(texts) >= 120 and [t for t in texts if brackets.errors(t, "ruby")] == []


def test_strings_over_several_lines():
    kotlin = 'val s = """\n  { not code\n"""\nfun f() {\n}\n'
    assert brackets.errors(kotlin, "kotlin") == []
    assert brackets.errors(kotlin.replace('"""\nfun', "\nfun"), "kotlin") == [0]  # never closed
    assert brackets.errors("x = `a ${b}\n c { `\nf()\n", "typescript") == []


def test_without_a_grammar_the_bracket_check_counts_errors():
    assert syntax_errors("func x( {", "swift") == [0, 0]
    assert syntax_errors("a (b\n", "text") is None  # prose: nothing to check
    original = "class A {\n    func f() {\n        g()\n    }\n}\n"
    assert validate(original, original.replace("g()", "h()"), language="swift").ok
    check = validate(original, original.replace("    }\n", ""), language="swift")
    assert not check.ok and check.names == ["parse_errors"]
    assert "lexical check" in check.problems[0].reason


@pytest.mark.parametrize("line, key", [
    ("    mutating func disassociate(_ task: URLSessionTask) -> Bool {", "func disassociate"),
    ("    init(tasksToRequests: [URLSessionTask: Request] = [:],", "init tasksToRequests"),
    ("    subscript(_ request: Request) -> URLSessionTask? {", "subscript _"),
    ("    @JvmStatic fun <T> builder(type: TypeName): Builder {", "fun builder"),
    ("  companion object {", "object Companion"),
    ("  private[os] def walk(path: Path): Seq[Path] = {", "def walk"),
    ("case class Config(verbose: Boolean)", "class Config"),
    ("local function split(s)", "function split"),
    ("function fs.copy(src, dest)", "function fs.copy"),
])
def test_definitions_of_the_languages_without_a_grammar(line, key):
    """The text-level definition keys (`anchor.definition`) that guard a merge from deleting a
    definition the snippet never showed (a class rewritten with its other methods left out)."""
    assert definition(line) == key


def silently_wrong(cases: list[dict]) -> list[str]:
    """The ids of `cases` whose merge, as the pipeline runs it, validates but is not `expected`."""
    return [case["id"] for case in cases
            if (found := explore(case["original"], case["update_snippet"], case["language"], case["path"])).validation.ok
            and found.result.text != case["expected"]]


def test_languages_without_a_grammar_are_never_silently_wrong():
    """dev_langs.jsonl: 128 real edits in Kotlin, PHP, Swift, Scala and Lua; Swift, Scala and Lua
    without a grammar, Kotlin and PHP with theirs. At bfe50f3, all five without a grammar, nine
    validated wrong (a `}` or an `end` doubled, a class's members left out of a rewrite deleted,
    a block fenced as ```kt dropped)."""
    cases = [json.loads(line) for line in (DATA / "dev_langs.jsonl").open()]
    assert len(cases) == 128 and languages.parse_tree("func f() {}", "swift") is None
    assert languages.parse_tree("fun f() {}", "kotlin") is not None
    assert not silently_wrong(cases)


def test_a_pinned_grammar_that_does_not_load_is_said(monkeypatch):
    """A grammar wheel that fails to import (a broken install) leaves the language to the lexical
    check; the user is told, not left with a weaker check in silence."""
    real = languages.importlib.import_module

    def broken(name, *args):
        if name == "tree_sitter_ruby":
            raise ImportError("no module named tree_sitter_ruby")
        return real(name, *args)

    monkeypatch.setattr(languages.importlib, "import_module", broken)
    languages.grammar.cache_clear()  # grammars are cached once per process
    try:
        with pytest.warns(RuntimeWarning, match="ruby grammar .* did not load"):
            assert languages.grammar("ruby") is None
    finally:
        monkeypatch.undo()
        languages.grammar.cache_clear()
    assert languages.grammar("ruby") is not None


@pytest.mark.usefixtures("no_grammars")
def test_python_without_its_grammar_is_read_by_cpython():
    """Brackets do not tell Python's blocks; without the tree, CPython's parser still finds a body
    left out (the same fallback the tree has)."""
    assert syntax_errors("def f():\n    return 1\n", "python") == []
    assert syntax_errors("def f():\nreturn 1\n", "python") == [1]


@pytest.mark.usefixtures("no_grammars")
def test_ruby_without_its_grammar_is_never_silently_wrong():
    """The dev sets' Ruby cases (67): before Ruby's blocks were paired by keyword, 8 of them
    validated wrong without the grammar (an `end` doubled where a method's body ends)."""
    cases = [c for name in ("dev_hard.jsonl", "dev_hard_train.jsonl", "dev_hard_train2.jsonl")
             for line in (DATA / name).open() if (c := json.loads(line))["language"] == "ruby"]
    assert len(cases) >= 60 and languages.parse_tree("def f; end", "ruby") is None
    assert not silently_wrong(cases)


@pytest.mark.usefixtures("no_grammars")
def test_brace_languages_without_their_grammars_are_never_silently_wrong():
    """dev_hard's and dev_hard_train's Go, Rust, JavaScript, TypeScript and Java cases (307):
    before the bracket check and the kept snippet end, 9 of them validated wrong without their
    grammars (a `}` dropped or doubled, a key written beside the one it changes)."""
    cases = [c for name in ("dev_hard.jsonl", "dev_hard_train.jsonl") for line in (DATA / name).open()
             if (c := json.loads(line))["language"] in ("go", "rust", "javascript", "typescript", "java")]
    assert len(cases) >= 300 and languages.parse_tree("f()", "go") is None
    assert not silently_wrong(cases)
