"""Elision markers: every form chat models write, and look-alikes that are real code."""

from __future__ import annotations

import pytest

from engine.apply.markers import STRONG, WEAK, find_markers, marker_shape


@pytest.mark.parametrize(
    "line, strength",
    [
        ("// ... existing code ...", STRONG),
        ("    # ... existing code ...", STRONG),
        ("# ...", STRONG),
        ("/* ... */", STRONG),
        ("// ... rest of the function unchanged ...", STRONG),
        ("<!-- ... -->", STRONG),
        ("{/* ... existing code ... */}", STRONG),
        ("// …existing code…", STRONG),
        ("-- ... existing queries ...", STRONG),
        ("...", STRONG),
        ("… existing code …", STRONG),
        ("# (unchanged)", WEAK),
        ("// rest of the file unchanged", WEAK),
        ("# ... other methods", WEAK),
        ("// existing code", WEAK),
    ],
)
def test_marker_forms(line, strength):
    shape = marker_shape(line)
    assert shape is not None and shape.strength == strength


@pytest.mark.parametrize(
    "line",
    [
        "# Default case...",  # prose ending in dots (httpx)
        "# TODO: handle the rest...",
        "// TT muncher for parsing the inside of an array [...]. Produces a vec![...]",
        '// "N" is a prefix of "NegInt"... this is a false positive.',
        "# unchanged since 2019, see the changelog",
        "extends: [...tseslint.configs.recommended],",
        "x = [...]",
        '"..."',
        "",
    ],
)
def test_comments_and_code_that_are_not_markers(line):
    assert marker_shape(line) is None


PY = """\
class A:
    def stub(self):
        ...
    def body(self):
        ...
        return 1
    items = [
        ...
    ]
    '''
    ...
    # ... existing code ...
    '''
    # ... existing code ...
"""


def test_tree_sitter_tells_python_ellipsis_code_from_elision():
    rows = find_markers(PY.splitlines(), "python")
    # 2: a stub body (code); 4: elision among statements; 7: Ellipsis in a list (code);
    # 10, 11: inside a string; 13: a comment.
    assert rows == [4, 13]


def test_original_turns_a_lone_ellipsis_body_into_an_elision():
    docstring = "    '''\n    ...\n    # ... existing code ...\n    '''\n"
    original = "class A:\n    def stub(self):\n        return 2\n" + docstring
    assert find_markers(PY.splitlines(), "python", original=original) == [2, 4, 13]
    stubbed = "class A:\n    def stub(self):\n        ...\n" + docstring
    assert find_markers(PY.splitlines(), "python", original=stubbed) == [4, 13]


def test_original_decides_about_markers_inside_strings():
    # The snippet's parse puts rows 10 and 11 in a string, but a fragment's string state can be
    # inverted: a comment-shaped marker that the original lacks is an elision after all, while a
    # bare `...` there (doctest output, say) stays text.
    original = "class A:\n    def stub(self):\n        ...\n"
    assert find_markers(PY.splitlines(), "python", original=original) == [4, 11, 13]


def test_bare_ellipsis_between_lines_adjacent_in_the_original_is_code():
    # `...` as the last element of a subscript: code the edit added, or an elision of the
    # lines the original has there.
    lines = ["X = t.Tuple[", "    int,", "    ...", "]"]
    assert find_markers(lines, "python", original="X = t.Tuple[\n    int,\n]\n") == []
    far = "X = t.Tuple[\n    int,\n    bytes,\n    float,\n]\n"
    assert find_markers(lines, "python", original=far) == [2]


def test_bare_ellipsis_glued_to_the_next_element_is_an_elision():
    lines = ["X = t.Union[", '    "Response",', "    ...", "    t.Tuple[int, str],", "]"]
    assert find_markers(lines, "python") == [2]


def test_bare_ellipsis_inside_a_docstring_of_the_original_is_doctest_output():
    original = 'def f():\n    """Example.\n\n    >>> f()\n    1\n    """\n    return 1\n'
    lines = ["def f():", '    """Example.', "", "    >>> f()", "    ...", '    """']
    assert find_markers(lines, "python", original=original) == []


def test_one_line_stub_is_never_a_marker():
    assert find_markers(["def f(): ...", "x = f()"], "python") == []


def test_weak_marker_that_the_original_contains_is_context():
    lines = ["def f():", "    # existing code", "    return 1"]
    assert find_markers(lines, "python") == [1]
    assert find_markers(lines, "python", original="def f():\n    # existing code\n    return 0\n") == []


def test_snippet_starting_inside_a_docstring_keeps_its_markers():
    # The fragment opens with the end of a docstring, so tree-sitter sees the strings inverted;
    # the marker must still be found.
    lines = [
        '    more docs.',
        '    """',
        "    # ... existing code ...",
        "    return value",
        "def other():",
        '    """Docs',
    ]
    assert find_markers(lines, "python") == [2]


@pytest.mark.parametrize(
    "language, lines, expected",
    [
        ("go", ["func f() {", "\t// ... existing code ...", "\treturn nil", "}"], [1]),
        ("rust", ["fn f() {", "    /* ... */", "    let s = \"// ... existing code ...\";", "}"], [1]),
        ("javascript", ["const a = `", "// ... existing code ...", "`;", "// ... existing code ..."], [3]),
        ("tsx", ["return (", "  <div>", "    {/* ... existing code ... */}", "  </div>", ");"], [2]),
        ("c", ["int printf(const char *fmt,", "           ...);"], []),
        ("text", ["alpha", "# ... existing code ...", "omega"], [1]),
    ],
)
def test_markers_in_other_languages(language, lines, expected):
    assert find_markers(lines, language) == expected


def test_a_dots_comment_the_original_has_between_the_same_lines_is_content():
    """`///     ...` inside a Rust doc example, written between the two lines it sits between in
    the original, is the example's text; the same comment between two lines the original has
    next to each other still elides (issue 30: dtolnay/anyhow@f8457fb662)."""
    original = "/// ```\n/// fn f() {\n///     ...\n/// }\n/// ```\nfn g() {\n    a();\n    b();\n}\n"
    assert find_markers(["/// fn f() {", "///     ...", "/// }"], "rust", original) == []
    assert find_markers(["    a();", "///     ...", "    b();"], "rust", original) == [1]
