"""Snippet parsing: fences and prose, segments and elision flags, bad snippets."""

from __future__ import annotations

import pytest

from engine.apply import EmptySnippetError, MarkerOnlySnippetError, parse_snippet
from engine.apply.fences import excerpts as strip_fences


def test_segments_and_elision_flags():
    snippet = parse_snippet(
        "# ... existing code ...\ndef a():\n    return 1\n# ... existing code ...\ndef b():\n    pass\n",
        "python",
    )
    assert [s.lines for s in snippet.segments] == [("def a():", "    return 1"), ("def b():", "    pass")]
    assert snippet.leading_elision and not snippet.trailing_elision
    assert snippet.markers == ("# ... existing code ...", "# ... existing code ...")
    assert snippet.has_markers and snippet.final_newline and snippet.eol == "\n"


def test_consecutive_markers_and_blank_lines_between_them_collapse():
    snippet = parse_snippet("x = 1\n# ...\n\n# ... existing code ...\ny = 2\n", "python")
    assert [s.lines for s in snippet.segments] == [("x = 1",), ("y = 2",)]
    assert not snippet.leading_elision and not snippet.trailing_elision


def test_no_markers_is_one_segment_without_elisions():
    snippet = parse_snippet("a = 1\nb = 2", "python")
    assert len(snippet.segments) == 1 and not snippet.has_markers
    assert not snippet.final_newline


def test_fence_with_prose_around_it():
    text = (
        "Sure! Here is the updated function:\n\n"
        "```python\n"
        "# ... existing code ...\n"
        "def area(self):\n"
        "    return self.w * self.h\n"
        "```\n\n"
        "This multiplies width by height.\n"
    )
    snippet = parse_snippet(text, "python")
    assert snippet.fenced and snippet.leading_elision
    assert snippet.segments[0].lines == ("def area(self):", "    return self.w * self.h")


def test_several_fences_are_excerpts_joined_by_elisions():
    text = (
        "First change:\n```py\ndef a():\n    return 1\n```\n"
        "Then run:\n```bash\npytest -q\n```\n"
        "And also:\n```python\ndef b():\n    return 2\n```\n"
    )
    snippet = parse_snippet(text, "python")
    assert [s.lines[0] for s in snippet.segments] == ["def a():", "def b():"]
    assert not snippet.leading_elision and not snippet.trailing_elision


def test_untagged_and_tilde_fences_and_an_unclosed_fence():
    assert strip_fences("~~~\nx = 1\n~~~\n")[0] == [["x = 1"]]
    assert strip_fences("Here:\n```\nx = 1\ny = 2\n")[0] == [["x = 1", "y = 2"]]


def test_backticks_inside_unfenced_code_are_not_fences():
    code = 'def f():\n    """Example:\n\n    ```python\n    f()\n    ```\n    """\n    return 1\n'
    excerpts, fenced = strip_fences(code, "python")
    assert not fenced and len(excerpts[0]) == 8


def test_crlf_snippet():
    snippet = parse_snippet("// ... existing code ...\r\nfunc f() {}\r\n", "go")
    assert snippet.eol == "\r\n"
    assert snippet.segments[0].lines == ("func f() {}",)


@pytest.mark.parametrize("text", ["", "   \n\t\n", "```python\n```\n", "Here you go:\n```\n\n```"])
def test_empty_snippet(text):
    with pytest.raises(EmptySnippetError, match="empty"):
        parse_snippet(text, "python")


@pytest.mark.parametrize("text", ["# ... existing code ...\n", "// ...\n\n/* ... */\n", "```go\n// ... existing code ...\n```\n"])
def test_marker_only_snippet(text):
    with pytest.raises(MarkerOnlySnippetError, match="only elision markers"):
        parse_snippet(text, "python")
