"""Validation of merge results: each check fires on its problem and stays quiet otherwise."""

from __future__ import annotations

from engine.apply import merge, parse_snippet, validate
from engine.apply.languages import parse_tree
from engine.apply.text import original_span
from engine.apply.validate import _unexplained_changes, syntax_errors


def test_a_clean_merge_validates(shapes_py):
    result = merge(shapes_py, "# ...\n    def area(self):\n        return abs(self.w * self.h)\n\n    def perimeter(self):\n# ...\n", "python")
    check = validate(shapes_py, result)
    assert check.ok and check.problems == ()


def test_empty_result(shapes_py):
    check = validate(shapes_py, "  \n", language="python")
    assert not check.ok and "empty_result" in check.names


def test_introduced_parse_errors_are_caught_with_their_line(shapes_py):
    broken = shapes_py.replace("    def area(self):\n", "    def area(self:\n")
    check = validate(shapes_py, broken, language="python")
    assert not check.ok and check.names == ["parse_errors"]
    problem = check.problems[0]
    assert problem.line is not None and abs(problem.line - 12) <= 2


def test_parse_errors_the_original_already_had_are_not_blamed():
    original = "def f(:\n    return 1\n\n\ndef g():\n    return 2\n"
    edited = original.replace("return 2", "return 3")
    assert syntax_errors(original, "python")
    assert validate(original, edited, language="python").ok


def test_a_python_def_left_without_a_body_is_a_parse_error_the_grammar_alone_misses():
    """tree-sitter's Python grammar accepts a `def` with no body before the next one; CPython
    does not (a merge that anchored one function's body under another's header)."""
    original = "def a(x):\n    return 1\n\n\ndef b(x):\n    return 2\n"
    broken = "def a(x):\n\n\ndef b(x, y):\n    return 1\n"
    assert syntax_errors(broken, "python", compiler=False) == []
    assert syntax_errors(broken, "python") == [3]
    check = validate(original, broken, language="python")
    assert not check.ok and check.names == ["parse_errors"]
    # An original CPython already rejects (Python 2) is not blamed for it.
    legacy = "print 'hello'\n\n\ndef b(x):\n    return 2\n"
    assert validate(legacy, legacy.replace("return 2", "return 3"), language="python").ok


def test_a_stray_ruby_end_is_a_syntax_error_though_the_grammar_reads_it_as_a_variable():
    """tree-sitter-ruby's error recovery parses a stray `end` (a merge that closed a module twice)
    as an identifier, with no ERROR node; a method named `end` is Ruby."""
    original = "module M\n  class A\n  end\n\n  class B\n  end\nend\n"
    closed_twice = "module M\n  class A\n  end\nend\n\n  class B\n  end\nend\n"
    assert parse_tree(closed_twice, "ruby").root_node.has_error is False
    assert syntax_errors(closed_twice, "ruby") == [7]
    check = validate(original, closed_twice, language="ruby")
    assert not check.ok and check.names == ["parse_errors"]
    assert syntax_errors("r = (1..2).end\ndef end\nend\n", "ruby") == []


def test_markers_copied_into_the_file(server_go):
    copied = server_go.replace("\treturn nil\n", "\t// ... existing code ...\n\treturn nil\n")
    check = validate(server_go, copied, language="go")
    assert not check.ok and check.names == ["markers_copied"]
    assert check.problems[0].line == copied.split("\n").index("\t// ... existing code ...") + 1


def test_markers_the_original_already_had_are_fine():
    original = "def f():\n    # ...\n    return 1\n"
    assert validate(original, original.replace("return 1", "return 2"), language="python").ok


def test_mass_deletion(shapes_py):
    lines = shapes_py.splitlines(keepends=True)
    shortened = "".join(lines[:8])  # 8 of 26 lines left
    check = validate(shapes_py, shortened, snippet="# ... existing code ...\nx = 1\n", language="python")
    assert "mass_deletion" in check.names and not check.ok
    # The same result from a snippet without markers (the whole new file) is what was asked for.
    assert "mass_deletion" not in validate(shapes_py, shortened, snippet="".join(lines[:8]), language="python").names
    assert "mass_deletion" not in validate(shapes_py, shortened, language="python", allow_deletion=True).names


def test_replacing_lines_is_not_deletion(shapes_py):
    rewritten = "\n".join(line.upper() if line.strip() else line for line in shapes_py.split("\n"))
    assert "mass_deletion" not in validate(shapes_py, rewritten, language="text").names


def test_unchanged_result_is_a_warning_only(shapes_py):
    check = validate(shapes_py, shapes_py, language="python")
    assert check.ok and check.names == ["no_change"]


def test_a_fragment_reaching_one_end_keeps_the_rest(shapes_py):
    # No markers, starts at line 1 and stops early: a fragment, not the whole new file, so the
    # rest of the file is kept (an implied marker), not deleted.
    lines = shapes_py.splitlines(keepends=True)
    result = merge(shapes_py, "".join(lines[:16]).replace("return self.w * self.h", "return 0"), "python")
    assert "implied_marker" in [p.name for p in result.problems]
    assert result.text == shapes_py.replace("return self.w * self.h", "return 0")


def test_a_reason_names_an_insertion_by_the_line_it_follows():
    """Issue 32, item 9: a line the snippet does not have, inserted, was reported "where the
    original has lines 3-2"."""
    snippet = parse_snippet("# ... existing code ...\nb = 2\n# ... existing code ...\n", "python")
    problems = _unexplained_changes("a = 1\nb = 2\nc = 3\n", "a = 1\nb = 2\nstray = 0\nc = 3\n", snippet)
    assert [p.name for p in problems] == ["unexplained_change"]
    assert problems[0].reason.endswith("(first: 'stray = 0') at the place after original line 2"), problems


def test_original_span():
    assert [original_span(*r) for r in ((4, 5), (4, 9), (4, 4), (0, 0))] == [
        "original line 5", "original lines 5-9", "the place after original line 4", "the top of the original"]
