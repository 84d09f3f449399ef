"""Deterministic merge scenarios: marker forms, file formats, and every way a merge can fail."""

from __future__ import annotations

import pytest

from engine.apply import EmptySnippetError, MarkerOnlySnippetError, merge
from engine.apply.readings import explore

AREA_FIXED = "        return abs(self.w * self.h)"


def expected_area(shapes_py: str) -> str:
    return shapes_py.replace("        return self.w * self.h\n", AREA_FIXED + "\n")


@pytest.mark.parametrize(
    "above, below",
    [
        ("# ... existing code ...", "# ... existing code ..."),
        ("# ...", "# ..."),
        ("    # ... rest of the class unchanged ...", "# ... rest of the file unchanged ..."),
        ("# (unchanged)", "# (unchanged)"),
        ("    ...", "    ..."),  # Python's bare ellipsis
        ("# …", "# … existing code …"),
    ],
)
def test_python_marker_forms(shapes_py, above, below):
    snippet = f"{above}\n    def area(self):\n{AREA_FIXED}\n\n    def perimeter(self):\n{below}\n"
    result = merge(shapes_py, snippet, "python")
    assert result.status == "exact", result.problems
    assert result.text == expected_area(shapes_py)


@pytest.mark.parametrize(
    "marker",
    ["// ... existing code ...", "/* ... */", "// ... rest of the function unchanged ...", "// ...", "<!-- ... -->"],
)
def test_go_marker_forms(server_go, marker):
    snippet = (
        f"{marker}\n// Start listens on Addr.\nfunc (s *Server) Start() error {{\n"
        '\tfmt.Println("starting", s.Name, s.Addr)\n'
        "\treturn http.ListenAndServe(s.Addr, nil)\n"
        f"{marker}\n"
    )
    result = merge(server_go, snippet, "go")
    assert result.status == "exact"
    assert result.text == server_go.replace('"starting", s.Name)', '"starting", s.Name, s.Addr)')


def test_fenced_snippet_with_prose(shapes_py):
    answer = (
        "Here is the updated `area` method:\n\n```python\n"
        f"    def area(self):\n{AREA_FIXED}\n\n    def perimeter(self):\n"
        "```\n\nI wrapped the product in `abs` so that negative sizes work.\n"
    )
    result = merge(shapes_py, answer, "python")
    assert result.ok and result.text == expected_area(shapes_py)


def test_crlf_file_keeps_crlf_everywhere(shapes_py):
    original = shapes_py.replace("\n", "\r\n")
    snippet = f"# ... existing code ...\n    def area(self):\n{AREA_FIXED}\n        # never negative\n\n    def perimeter(self):\n# ...\n"
    result = merge(original, snippet, "python")
    assert result.status == "exact"
    assert result.text == expected_area(shapes_py).replace(AREA_FIXED, AREA_FIXED + "\n        # never negative").replace("\n", "\r\n")


def test_mixed_line_endings_are_kept_line_by_line():
    # Mostly CRLF; the LF lines stay LF, also as context inside the snippet's span, and new
    # lines take the dominant CRLF.
    original = "a = 1\r\nb = 2\nc = 3\r\nd = 4\ne = 5\r\n"
    result = merge(original, "a = 1\nb = 20\nc = 3\nd = 4\n# ...\n", "python")
    assert result.text == "a = 1\r\nb = 20\r\nc = 3\r\nd = 4\ne = 5\r\n"


def test_tabs_are_kept_and_tabs_turned_into_spaces_are_restored(server_go):
    with_tabs = "// ... existing code ...\nfunc (s *Server) Stop() error {\n\ts.Name = \"\"\n\treturn nil\n}\n"
    expected = server_go.replace("func (s *Server) Stop() error {\n", "func (s *Server) Stop() error {\n\ts.Name = \"\"\n")
    assert merge(server_go, with_tabs, "go").text == expected
    with_spaces = with_tabs.replace("\t", "    ")
    result = merge(server_go, with_spaces, "go")
    assert result.ok and result.text == expected


def test_file_without_final_newline_keeps_lacking_one():
    original = "def f():\n    return 1\n\n\ndef g():\n    return 2"
    result = merge(original, "# ... existing code ...\ndef g():\n    return 3\n", "python")
    assert result.text == "def f():\n    return 1\n\n\ndef g():\n    return 3"
    result = merge(original, "def f():\n    return 10\n# ... existing code ...\n", "python")
    assert result.text == original.replace("return 1\n", "return 10\n")


def test_unicode(shapes_py):
    original = 'GREETING = "héllo wörld 👋"\n\n\ndef grüß(name):\n    return f"{GREETING}, {name}"\n'
    snippet = 'def grüß(name):\n    return f"{GREETING}, {name} — ça va ?"\n'
    result = merge(original, snippet, "python")
    assert result.ok
    assert result.text == original.replace('{name}"', '{name} — ça va ?"')


def test_whitespace_only_changes_in_context_lines_are_taken_from_the_snippet():
    # Context that differs only in whitespace still anchors, and the snippet's version wins:
    # commits that strip trailing whitespace exist, and a model's snippet is the new text.
    original = "x = 1   \ny = 2\t\nz = 3\nw = 4\n"
    result = merge(original, "x = 1\ny = 20\nz = 3\n# ...\n", "python")
    assert result.status == "exact" and result.text == "x = 1\ny = 20\nz = 3\nw = 4\n"
    assert result.segments[0].status == "whitespace"


def test_snippet_that_matches_nowhere(shapes_py):
    result = merge(shapes_py, "# ... existing code ...\ndef unrelated():\n    launch_rockets()\n# ... existing code ...\n", "python")
    assert result.status == "unmatched" and not result.ok
    assert result.text == shapes_py and result.confidence == 0.0
    assert [p.name for p in result.problems] == ["unmatched"]


def test_marker_only_and_empty_snippets_raise(shapes_py):
    with pytest.raises(MarkerOnlySnippetError):
        merge(shapes_py, "# ... existing code ...\n", "python")
    with pytest.raises(EmptySnippetError):
        merge(shapes_py, "\n\n", "python")


def test_ambiguous_anchor_is_reported_not_guessed():
    block = "    if x is None:\n        return 0\n    return x + 1\n"
    original = f"def a(x):\n{block}\n\ndef b(x):\n{block}"
    snippet = "# ...\n    if x is None:\n        return -1\n    return x + 1\n# ...\n"
    result = merge(original, snippet, "python")
    assert result.status == "ambiguous" and result.confidence == 0.0
    assert result.text == original
    assert result.problems[0].name == "ambiguous"


def test_order_of_segments_disambiguates():
    block = "    if x is None:\n        return 0\n    return x + 1\n"
    original = f"def a(x):\n{block}\n\ndef b(x):\n{block}"
    snippet = "# ...\ndef b(x):\n    # b is special\n# ...\n    if x is None:\n        return -1\n    return x + 1\n"
    result = merge(original, snippet, "python")
    assert result.status == "exact"
    assert result.text == f"def a(x):\n{block}\n\ndef b(x):\n    # b is special\n" + block.replace("return 0", "return -1")


def test_pure_deletion_between_anchors(shapes_py):
    snippet = "# ... existing code ...\n    def area(self):\n        return self.w * self.h\n\n\ndef main(argv):\n# ... existing code ...\n"
    result = merge(shapes_py, snippet, "python")
    assert result.status == "exact"
    assert "perimeter" not in result.text and result.text.count("\n") == shapes_py.count("\n") - 3


def test_whole_file_without_markers_replaces_the_file(shapes_py):
    new = shapes_py.replace("import sys\n", "import sys\nimport re\n").replace("return 0", "return 1")
    result = merge(shapes_py, new, "python")
    assert result.status == "exact" and result.text == new


def test_whole_file_missing_its_first_line_keeps_it(shapes_py):
    # Deleted on purpose, or left out by the model? Nothing plainly deletes it: it stays.
    new = shapes_py.replace("import os\n", "").replace("return 0", "return 1")
    result = merge(shapes_py, new, "python")
    assert result.ok and result.text == shapes_py.replace("return 0", "return 1")
    assert "implied_marker" in [p.name for p in result.problems]


def test_snippet_for_an_empty_file_is_the_file():
    assert merge("", "x = 1\n", "python").text == "x = 1\n"
    assert merge("", "x = 1", "python").text == "x = 1"
    assert merge("", "# ... existing code ...\nx = 1\n", "python").text == "x = 1\n"


def test_fragment_without_markers_is_anchored(shapes_py):
    result = merge(shapes_py, f"    def area(self):\n{AREA_FIXED}\n", "python")
    assert result.ok and result.text == expected_area(shapes_py)
    assert {p.name for p in result.problems} == {"implied_marker"}


def test_append_at_end_and_insert_at_top(shapes_py):
    appended = merge(shapes_py, "# ... existing code ...\n\n\ndef helper():\n    return 42\n", "python")
    assert appended.ok and appended.text == shapes_py + "\n\ndef helper():\n    return 42\n"
    prepended = merge(shapes_py, "#!/usr/bin/env python3\nimport os\n# ... existing code ...\n", "python")
    assert prepended.ok and prepended.text == "#!/usr/bin/env python3\n" + shapes_py


def test_insert_between_blank_separated_methods_does_not_replace_a_neighbour(shapes_py):
    snippet = (
        "# ... existing code ...\n        return self.w * self.h\n\n"
        "    def double_area(self):\n        return self.w * self.h * 2\n\n"
        "    def perimeter(self):\n# ... existing code ...\n"
    )
    result = merge(shapes_py, snippet, "python")
    assert result.status == "exact"
    assert result.text == shapes_py.replace(
        "    def perimeter", "    def double_area(self):\n        return self.w * self.h * 2\n\n    def perimeter"
    )


def test_changed_signature_without_context_is_fuzzy(shapes_py):
    result = merge(shapes_py, "# ... existing code ...\ndef main(argv, verbose=False):\n    # ... existing code ...\n", "python")
    assert result.status == "fuzzy" and 0 < result.confidence < 1
    assert result.text == shapes_py.replace("def main(argv):", "def main(argv, verbose=False):")


def test_a_tab_line_under_a_tab_context_line_of_a_mixed_file_keeps_its_tab():
    """Emacs' style: 2-space steps, a tab for every 8 columns. The snippet wrote one context line's
    tab as 4 spaces; the lines it writes new with a tab, under a line the file indents with a tab,
    are in the file's style there, not rewritten in spaces."""
    original = ("class Task\n  def define\n    task :doc do\n      file out do\n\trm_r dir\n"
                "\tsh 'rdoc'\n      end\n    end\n  end\nend\n")
    snippet = ("# ... existing code ...\n      file out do\n    rm_r dir\n\topts = '-q'\n"
               "\tsh \"rdoc #{opts}\"\n      end\n# ... existing code ...\n")
    result = merge(original, snippet, "ruby")
    assert result.ok and result.text == original.replace("\tsh 'rdoc'\n", "\topts = '-q'\n\tsh \"rdoc #{opts}\"\n")


def test_a_rewritten_impl_ends_on_its_own_closer_not_on_a_method_closer_one_level_deeper():
    """An `impl` rewritten without markers, down to the changed method and the `impl`'s `}`; the
    method lost a level of nesting, so its last lines equal the original's up to a 4-column
    shift, `}` of the method included. That `}` closes the snippet's first line: matched at
    another depth than `impl M {` it is no anchor, and the methods after it stay."""
    original = ("impl M {\n    pub fn a(&self) -> bool {\n        if x {\n            true\n        } else {\n"
                "            match y {\n                P => true,\n                _ => false\n            }\n        }\n    }\n\n"
                "    pub fn b(&self) -> u8 {\n        1\n    }\n}\n")
    snippet = ("impl M {\n    pub fn a(&self) -> bool {\n        match y {\n            P | _ if x => true,\n"
               "            _ => false\n        }\n    }\n}\n")
    result = merge(original, snippet, "rust")
    assert result.ok and result.text == original.replace(
        "        if x {\n            true\n        } else {\n            match y {\n                P => true,\n"
        "                _ => false\n            }\n        }\n",
        "        match y {\n            P | _ if x => true,\n            _ => false\n        }\n")


def test_dedented_excerpt_is_reindented(shapes_py):
    snippet = "# ...\ndef area(self):\n    return abs(self.w * self.h)\n\ndef perimeter(self):\n# ...\n"
    result = merge(shapes_py, snippet, "python")
    assert result.ok and result.text == expected_area(shapes_py)
    assert result.segments[0].status == "whitespace" and result.confidence < 1


def test_partial_merge_keeps_what_it_could_place(shapes_py):
    snippet = (
        f"# ...\n    def area(self):\n{AREA_FIXED}\n\n    def perimeter(self):\n"
        "# ...\ndef nowhere():\n    pass\n# ...\n"
    )
    result = merge(shapes_py, snippet, "python")
    assert result.status == "partial" and 0 < result.confidence < 1
    assert result.text == expected_area(shapes_py)
    assert [s.status for s in result.segments] == ["exact", "unmatched"]


def test_segments_out_of_order_are_reported(shapes_py):
    snippet = "# ...\ndef main(argv):\n    s = Shape(2, 2)\n    print(s.area())\n# ...\n    def area(self):\n        return 0\n# ...\n"
    result = merge(shapes_py, snippet, "python")
    assert result.status == "partial"
    assert [s.status for s in result.segments] == ["exact", "out_of_order"]
    assert "Shape(2, 2)" in result.text and "return 0\n" in result.text  # the first one applied, untouched area


def test_no_leading_marker_is_an_implied_marker(shapes_py):
    # A snippet that starts mid-file without a marker keeps the code above it: nothing says it
    # is deleted (a chat model left the marker out).
    result = merge(shapes_py, "class Shape:\n    \"\"\"A square.\"\"\"\n# ... existing code ...\n", "python")
    assert result.ok and result.text == shapes_py.replace("A rectangle.", "A square.")
    assert "implied_marker" in [p.name for p in result.problems]


def test_large_repetitive_file():
    # 2000 near-identical functions: anchors on common lines (`if x > b:`) occur 2000 times, so
    # only the distinctive ones may decide, and the merge must stay fast enough to run here.
    body = "".join(f"def func_{f}(a, b):\n    x = a + {f}\n    if x > b:\n        return x\n    return b\n\n" for f in range(2000))
    snippet = "".join(f"# ...\ndef func_{f}(a, b):\n    x = a + {f} + 1\n    if x > b:\n" for f in range(0, 2000, 100)) + "# ...\n"
    expected = body
    for f in range(0, 2000, 100):
        expected = expected.replace(f"def func_{f}(a, b):\n    x = a + {f}\n", f"def func_{f}(a, b):\n    x = a + {f} + 1\n")
    result = merge(body, snippet, "python")
    assert result.status == "exact" and result.text == expected


CALCULATOR_JS = """class Calculator {
  constructor() {
    this.result = 0;
  }

  multiply(number) {
    this.result *= number;
    return this;
  }

  divide(number) {
    this.result /= number;
    return this;
  }

  getResult() {
    return this.result;
  }
}
"""
POWER = "  power(e) {\n    this.result **= e;\n    return this;\n  }\n"


@pytest.mark.parametrize("snippet", [
    "// ...\n\n" + POWER + "\n  divide(number) {\n// ...\n",  # blank lines on both sides
    "// ...\n" + POWER + "\n  divide(number) {\n// ...\n",  # none above
    "// ...\n    this.result *= number;\n    return this;\n  }\n\n" + POWER + "\n// ...\n",  # context above, blank below
    "// ...\n  multiply(number) {\n    this.result *= number;\n    return this;\n  }\n\n" + POWER + "// ...\n",
])
def test_a_method_inserted_between_markers_is_set_off_by_one_blank_line_each_side(snippet):
    # Its `return this;` and `}` equal lines of the methods around it, which must not pull it
    # into them (lines of a new definition do not anchor), and the blank lines at the marker
    # boundaries are neither doubled nor lost.
    result = merge(CALCULATOR_JS, snippet, "javascript")
    expected = CALCULATOR_JS.replace("  divide(number) {", POWER + "\n  divide(number) {")
    assert result.ok and result.text == expected, result.text


def test_a_lone_brace_does_not_anchor_the_deletion_of_unshown_methods():
    # The snippet shows `divide` changed and then the class's closing brace: `getResult` is not
    # plainly deleted by that, so the merge must not drop it.
    snippet = "// ... existing code ...\n  divide(number) {\n    if (number === 0) throw new Error('zero');\n    this.result /= number;\n    return this;\n  }\n}\n"
    result = merge(CALCULATOR_JS, snippet, "javascript")
    assert "getResult" in result.text


def test_a_changed_first_line_before_a_marker_replaces_the_line_it_resembles():
    original = "from fastapi import FastAPI\n\napp = FastAPI()\n\n\n@app.get('/')\ndef root():\n    return {}\n"
    snippet = "from fastapi import FastAPI, HTTPException\n\n# ... existing code ...\n"
    result = merge(original, snippet, "python")
    assert result.text == original.replace("FastAPI\n\napp", "FastAPI, HTTPException\n\napp")
    assert result.status == "fuzzy" and result.confidence < 1


def test_a_reworded_docstring_next_to_a_marker_replaces_the_old_one(shapes_py):
    result = merge(shapes_py, '# ...\nclass Shape:\n    """A rectangle, or a square."""\n# ...\n', "python")
    assert result.text == shapes_py.replace('"""A rectangle."""', '"""A rectangle, or a square."""')


def test_a_new_javadoc_above_a_class_replaces_its_old_comment():
    # The Javadoc's ` */` is one space in, the old `// TODO` is not: the comments are still at
    # one depth (their first lines), so the new one replaces the old, not stacks on it.
    original = ("package a;\n\nimport java.util.Map;\n\n/** Writes a graph. */\n// TODO: proper documentation\n"
                "public final class Graph {\n  private int n;\n}\n")
    doc = "/**\n * A builder for graphs.\n *\n * <p>Cycles are allowed.\n */\n"
    result = merge(original, f"// ...\n{doc}public final class Graph {{\n// ...\n", "java")
    assert result.text == original.replace("/** Writes a graph. */\n// TODO: proper documentation\n", doc)


def test_new_last_lines_of_a_function_shown_from_its_header_replace_its_old_ending():
    # No marker after the snippet, and it shows `loads` from its header: its new return line
    # replaces the old one (the end of the file), it is not inserted beside it.
    # (Inserted beside it, it would follow a `return`: no reading leaves code that never runs.)
    original = "def dumps(v):\n    return str(v)\n\n\ndef loads(s):\n    \"\"\"Parse.\"\"\"\n    return eval(s)\n"
    snippet = "# ... existing code ...\ndef loads(s):\n    \"\"\"Parse.\"\"\"\n    return json.loads(s)\n"
    found = explore(original, snippet, "python")
    assert found.result.ok and found.result.text == original.replace("eval(s)", "json.loads(s)")
    # A new docstring alone: it replaces the old one and the body ends there, or the body stays
    # (a marker left out): two readings, the one that keeps the body first.
    found = explore(original, "# ... existing code ...\ndef loads(s):\n    \"\"\"Parse a string; new words.\"\"\"\n", "python")
    texts = [r.text for r in found.readings]
    assert found.ambiguous and "return eval(s)" in texts[0]
    assert original.replace('"""Parse."""', '"""Parse a string; new words."""') in texts
    assert original.replace('"""Parse."""\n    return eval(s)', '"""Parse a string; new words."""') in texts


def test_a_new_docstring_line_found_in_the_next_function_does_not_delete_that_function():
    # The new `.. versionchanged::` line equals a line of `post_dump`'s docstring: anchored there,
    # the merge dropped `pre_dump`'s return and `post_dump`'s header and kept the rest of
    # `post_dump` as `pre_dump`'s (wrong but valid). A definition goes whole or not at all.
    def hook(name, extra=""):
        return (f'def {name}(fn=None, pass_many=False):\n    """Register a method to invoke around {name}.\n\n'
                f'    By default, receives a single object at a time.{extra}\n    """\n'
                f'    return set_hook(fn, ({name.upper()}, pass_many))\n')
    changed = "\n\n    .. versionchanged:: 3.0.0\n        ``partial`` and ``many`` are always passed as keyword arguments."
    original = "\n\n".join([hook("pre_dump"), hook("post_dump", changed), hook("pre_load"), hook("post_load", changed)])
    new = "\n\n    .. versionchanged:: 3.0.0\n        ``many`` is always passed as a keyword argument."
    snippet = "# ... existing code\n" + hook("pre_dump", new).rsplit("    return", 1)[0] + "    # ... existing code\n"
    found = explore(original, snippet, "python")
    assert found.result.ok and found.result.text == original.replace(hook("pre_dump"), hook("pre_dump", new))


def test_a_changed_line_below_a_unique_header_is_not_matched_to_its_twin_elsewhere():
    # `return x + 1` equals a line of `f1`, but the snippet's `def f100` says where it is.
    original = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(200))
    result = merge(original, "# ...\ndef f100(x):\n    return x + 1\n# ...\n", "python")
    assert result.ok and result.text == original.replace("return x + 100\n", "return x + 1\n")


def test_a_huge_repetitive_file_is_refused_as_ambiguous_not_guessed(dev_cases):
    # 3 MB of one file repeated: every anchor occurs hundreds of times (the merge stays fast:
    # bench/RESULTS.md has its time).
    case = dev_cases[1]
    original = case["original"] * (3_000_000 // len(case["original"]))
    result = merge(original, case["update_snippet"], case["language"])
    assert result.status == "ambiguous" and result.text == original


def test_a_span_never_drops_a_rust_impl_s_first_line_keeping_its_end():
    """`impl<K, V> Trait for Entry<'_, K, V> {` is a definition too (its generics once hid it):
    the segment's `type Key = K; fn key_mut(..) {` anchors in the Entry impl it shows, not in the
    OccupiedEntry impl below it, and nothing between goes (issue 30: indexmap-rs/indexmap@b44138b204,
    where 13 lines went at confidence 1.0)."""
    original = ("pub trait Key {\n    type Key;\n    fn key_mut(&mut self) -> &mut Self::Key;\n}\n\n"
                "impl<K, V> Key for Entry<'_, K, V> {\n    type Key = K;\n\n    /// Gets the key.\n"
                "    fn key_mut(&mut self) -> &mut Self::Key {\n        match self {\n            _ => todo!(),\n        }\n    }\n}\n\n"
                "impl<K, V> Key for OccupiedEntry<'_, K, V> {\n    type Key = K;\n    fn key_mut(&mut self) -> &mut Self::Key {\n"
                "        self.key_mut()\n    }\n}\n")
    snippet = ("// ...\npub trait Key {\n    type Key;\n\n    /// Gets the key.\n    fn key_mut(&mut self) -> &mut Self::Key;\n}\n\n"
               "impl<K, V> Key for Entry<'_, K, V> {\n    type Key = K;\n    fn key_mut(&mut self) -> &mut Self::Key {\n    // ...\n")
    expected = original.replace("    type Key;\n    fn", "    type Key;\n\n    /// Gets the key.\n    fn").replace(
        "    type Key = K;\n\n    /// Gets the key.\n", "    type Key = K;\n")
    found = explore(original, snippet, "rust")
    assert [r.text for r in found.readings] == [expected]


def test_a_method_renamed_with_the_same_signature_and_body_replaces_the_old_one():
    """`has` for `contains`: the names share nothing, but the header but for the name and the
    body line for line are the same, right under the doc comment the snippet shows: a rename,
    not a new method beside the old (issue 30: google/gson@94e21eca21, kept both before)."""
    original = ("class A {\n  /**\n   * Removes it.\n   */\n  public boolean remove(Object o) {\n    return items.remove(o);\n  }\n\n"
                "  /**\n   * Returns true if it is there.\n   */\n  public boolean contains(Object o) {\n    return items.contains(o);\n  }\n\n"
                "  /**\n   * The size.\n   */\n  public int size() {\n    return items.size();\n  }\n}\n")
    snippet = ("// ... existing code ...\n   * Returns true if it is there.\n   * @since 2.3\n   */\n  public boolean has(Object o) {\n"
               "    return items.contains(o);\n  }\n\n  /**\n// ... existing code ...\n")
    expected = original.replace("   * Returns true if it is there.\n   */\n  public boolean contains",
                                "   * Returns true if it is there.\n   * @since 2.3\n   */\n  public boolean has")
    assert [r.text for r in explore(original, snippet, "java").readings] == [expected]


def test_a_marker_less_rewrite_keeps_a_member_whose_line_starts_with_a_comment():
    """`/*public*/ int[] ranges() {` is a member (the comment before it hid it), and a doc comment
    that mentions `#ranges()` does not show it: left out, it stays (issue 30:
    apache/commons-lang@d20e4f53af)."""
    original = ("class C {\n    private int a;\n\n    //-----\n    /**\n     * Ranges.\n     */\n    /*public*/ int[] ranges() {\n"
                "        return null;\n    }\n\n    /**\n     * Contains; see {@link #ranges()}.\n     */\n    boolean contains(int c) {\n"
                "        return false;\n    }\n}\n")
    snippet = ("class C {\n    private int a;\n\n    /**\n     * Contains; see {@link #ranges()}.\n     */\n    boolean contains(int c) {\n"
               "        return true;\n    }\n}\n")
    assert explore(original, snippet, "java").readings[0].text == original.replace("return false", "return true")


def test_a_doc_comment_opener_ending_the_head_anchor_goes_with_the_member_below():
    """The snippet's `/**` above `{@inheritDoc}` was matched to the first left-out member's
    `/**`: put back, the members went below it and the `/**` of `{@inheritDoc}` was lost (a
    parse error, so the deletion was the only reading; issue 30: apache/commons-lang@14deed1bff)."""
    original = ("class U {\n    private final int options;\n\n    /**\n     * Create one.\n     */\n    public U(int o) {\n"
                "        options = o;\n    }\n\n    /**\n     * {@inheritDoc}\n     */\n    @Override\n    public int translate() {\n"
                "        return 0;\n    }\n}\n")
    snippet = ("class U {\n    private final int options;\n\n    /**\n     * {@inheritDoc}\n     */\n    @Override\n"
               "    public int translate() {\n        return 1;\n    }\n}\n")
    assert explore(original, snippet, "java").readings[0].text == original.replace("return 0", "return 1")


def test_a_go_defer_statement_is_no_method_header():
    """`defer failOnPanic(t)` looked like a C-family signature (type `defer`, method
    `failOnPanic`), so the snippet's lines below it were taken for its body and anchored nowhere:
    the `if` they show was written twice (issue 30: stretchr/testify@660f15d67d)."""
    original = ("package suite\n\nfunc Run(t *testing.T, suite TestingSuite) {\n\tsuite.SetT(t)\n\n"
                "\tif setupAllSuite, ok := suite.(SetupAllSuite); ok {\n\t\tsetupAllSuite.SetupSuite()\n\t}\n}\n")
    snippet = ("// ... existing code ...\nfunc Run(t *testing.T, suite TestingSuite) {\n    suite.SetT(t)\n\tdefer failOnPanic(t)\n\n"
               "    if setupAllSuite, ok := suite.(SetupAllSuite); ok {\n    // ... existing code ...\n")
    result = merge(original, snippet, "go")
    assert result.text == original.replace("\tsuite.SetT(t)\n", "\tsuite.SetT(t)\n\tdefer failOnPanic(t)\n")


def test_a_closing_brace_ending_the_snippet_is_the_file_s_last_one_not_an_earlier_one():
    """The snippet ends `}` and a blank line after a marker: an earlier `}` with a blank line
    below matches both lines, the file's last `}` only one, but a match better only by a blank
    line or a brace says nothing about position, so the one in order is no guess (issue 30:
    rust-lang/log@788afcce89 was refused as out of order)."""
    original = "macro_rules! a {\n    () => (1)\n}\n\nmacro_rules! b {\n    () => (2)\n}\n"
    snippet = "/// Doc for b.\nmacro_rules! b {\n    // existing code ...\n}\n\n"
    result = merge(original, snippet, "rust")
    assert result.ok and result.text == original.replace("macro_rules! b", "/// Doc for b.\nmacro_rules! b")


def test_an_end_after_a_header_and_an_elided_body_closes_that_header():
    """`def one`, a marker for its body, `end`: that `end` closes `one` (tree-sitter says which
    row), not any `end` before the next shown method (issue 30: sinatra/sinatra@17c6cc26e6 was
    refused as ambiguous at four places)."""
    original = ("class A\n  def one\n    x = 1\n  end\n\n  def two\n    y = 2\n  end\n\n"
                "  def three\n    z = 3\n  end\nend\n")
    snippet = ("  # ... existing code ...\n  # The first.\n  def one\n    # ... existing code ...\n  end\n"
               "  # ... existing code ...\n  # The third.\n  def three\n    # ... existing code ...\n  end\n  # ... existing code ...\n")
    result = merge(original, snippet, "ruby")
    assert result.ok and result.text == original.replace("  def one", "  # The first.\n  def one").replace(
        "  def three", "  # The third.\n  def three")


def test_a_line_rewritten_between_runs_of_braces_is_replaced_in_place():
    """Braces and keywords only around one changed call: the anchors on one diagonal replace the
    call in place; a tail of braces matched eight columns deeper is no anchor (issue 30:
    yargs/yargs@9ae61dd005 inserted the segment and kept the old lines, a parse error)."""
    original = ("function f(a) {\n    if (a) {\n        if (b) {\n            x++;\n        }\n        else {\n"
                "            set(a, true);\n        }\n    }\n    else {\n        g();\n    }\n}\n")
    snippet = ("// ...\n            x++;\n        }\n        else {\n            set(a, dflt(a));\n        }\n    }\n    else {\n// ...\n")
    result = merge(original, snippet, "javascript")
    assert result.ok and result.text == original.replace("set(a, true)", "set(a, dflt(a))")


def test_a_doc_example_s_dots_line_the_original_has_is_no_marker():
    """`///     ...` inside a doc example, written between the lines it sits between in the
    original, is content: the snippet has no marker, so the methods it leaves out stay (issue
    30: dtolnay/anyhow@f8457fb662 deleted five methods)."""
    original = ("impl E {\n    pub fn new() -> Self {\n        E\n    }\n\n    /// Example:\n    ///\n    /// ```\n"
                "    /// fn f() {\n    ///     ...\n    /// }\n    /// ```\n    pub fn context(self) -> Self {\n        self\n    }\n}\n")
    snippet = ("impl E {\n    /// Example:\n    ///\n    /// ```\n    /// fn f() {\n    ///     ...\n    /// }\n    /// ```\n"
               "    pub fn context(self) -> Self {\n        self.wrap()\n    }\n}\n")
    found = explore(original, snippet, "rust")
    assert found.readings[0].text == original.replace("        self\n", "        self.wrap()\n")


def test_a_name_written_inside_a_method_does_not_show_the_member_of_that_name():
    """`let validate = ...` in `test()`'s body does not show the member `validate()`: the members
    left out before it went back inside `test()`'s body (issue 30: jquense/yup@f1be37ffac)."""
    original = ("const proto = {\n  a: 1,\n\n  clone() {\n    return this;\n  },\n\n  validate(value, options = {}) {\n"
                "    return value;\n  },\n\n  /**\n   * Adds a test.\n   */\n  test(x) {\n    return x;\n  },\n});\n")
    snippet = ("const proto = {\n  a: 1,\n\n  /**\n   * Adds a test.\n   */\n  test(x) {\n    let validate = make(x);\n"
               "    return validate;\n  },\n});\n")
    found = explore(original, snippet, "javascript")
    assert found.readings[0].text == original.replace("    return x;\n", "    let validate = make(x);\n    return validate;\n")


def test_a_new_method_s_body_is_measured_in_columns_when_tabs_and_spaces_mix():
    """A header written with four spaces and a body with two tabs: the body is deeper (a tab
    counts four columns), so all three lines are the new method's; counted in characters, two
    tabs were shallower than four spaces and the body was taken for anchors elsewhere."""
    from engine.apply.anchor import OriginalIndex, new_definition_rows
    original = "class A {\n\tint f() {\n\t\treturn 1;\n\t}\n}\n"
    index = OriginalIndex(tuple(original.splitlines()), original, "java")
    assert new_definition_rows(("    int g() {", "\t\treturn 2;", "    }"), index) == {0, 1, 2}


def test_a_span_inside_another_shows_as_many_lines_and_deletes_less():
    """Three functions with one body: the snippet changes alpha_1's signature and first line and
    gamma_2's second. The span from alpha_1's `x += 1` and the one from beta_0's (the same lines
    earlier) show the same segment lines in order; the first deletes less, so beta_0 stays.
    Counted by difflib's greedy blocks, which matched gamma_2's body in the snippet to alpha_1's
    in the original, the smaller span showed fewer lines, and beta_0's body was deleted with
    confidence 1 (bench.fuzz_merge, seed 11, Python case 304, reduced)."""
    body = "        return None\n        x += 1\n\n        v_0_3 = compute(gamma, 3)\n        v_0_4 = compute(beta, 4)\n"
    original = ("import os\nimport sys\n\nclass Service:\n    def beta_0(x):\n" + body + "        return delta\n\n"
                "    def alpha_1(x):\n" + body + "        return gamma\n\n\n    def gamma_2(x):\n" + body
                + "        return gamma\n\n\n    def alpha_5(x):\n\n        return gamma\n")
    new_alpha = ("    def alpha_1(x, y):\n        changed_0 = beta()\n        x += 1\n        inserted_1()\n\n"
                 "        v_0_3 = compute(gamma, 3)\n        v_0_4 = compute(beta, 4)\n        return gamma\n        inserted_2()\n\n\n")
    new_gamma = ("    def gamma_2(x):\n        return None\n        inserted_3()\n\n        v_0_3 = compute(gamma, 3)\n"
                 "        v_0_4 = compute(beta, 4)\n        return gamma\n\n")
    snippet = ("    # ... existing code ...\n" + new_alpha + new_gamma + "    # alpha_5: note 8\n    def alpha_5(x):\n\n"
               "    # ... existing code ...\n")
    old_alpha_gamma = ("    def alpha_1(x):\n" + body + "        return gamma\n\n\n    def gamma_2(x):\n" + body
                       + "        return gamma\n\n\n")
    expected = original.replace(old_alpha_gamma, new_alpha + new_gamma + "    # alpha_5: note 8\n")
    assert expected != original
    result = merge(original, snippet, "python")
    assert result.ok and result.text == expected


def test_common_length_is_the_longest_common_subsequence():
    import random

    from engine.apply.candidates import common_length

    def by_table(a, b):
        t = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i, x in enumerate(a):
            for j, y in enumerate(b):
                t[i + 1][j + 1] = t[i][j] + 1 if x == y else max(t[i][j + 1], t[i + 1][j])
        return t[-1][-1]

    rng = random.Random(0)
    for _ in range(2000):
        a = [rng.choice("abcd") for _ in range(rng.randrange(0, 25))]
        b = [rng.choice("abcde") for _ in range(rng.randrange(0, 25))]
        if rng.random() < 0.3:  # a common prefix and suffix
            b = a[: rng.randrange(len(a) + 1)] + b + a[rng.randrange(len(a) + 1) :]
        assert common_length(a, b) == by_table(a, b)
    assert common_length(list("xyz"), list("yxz")) == 2
