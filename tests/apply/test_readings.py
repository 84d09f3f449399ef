"""Readings (engine/apply/readings.py): each shape of ambiguity gives its concrete candidate files,
the first keeping the most original lines; what validation rules out is no reading; one reading
left is the merge's answer. Then the model's part (ranking.py): the margin rule takes a clear
win and refuses a near tie with the readings returned; and the model writes only the stretch
the merge doubts, so sure lines cannot change."""

from __future__ import annotations

import pytest

from engine.apply.pipeline import ApplyRequest
from engine.apply.run import apply_edit
from engine.apply.ranking import MARGIN, Ranking, Scored
from engine.apply.readings import explore
from engine.tokenizer import Tokenizer
from engine.types import Event, GenerationStats

AREA = "class Shape:\n    def area(self):\n        x = self.w * self.h\n        return x\n\n    def side(self):\n        return self.w\n"


def texts(original: str, snippet: str, language: str = "python") -> list[str]:
    found = explore(original, snippet, language)
    return [r.text for r in found.readings]


def test_an_edge_line_that_resembles_its_neighbour_replaces_it_or_sits_beside_it():
    # No anchor below the changed line: `y = self.w * self.h` may replace `x = ...` or be new.
    snippet = "# ... existing code ...\n    def area(self):\n        y = self.w * self.h\n# ... existing code ...\n"
    found = texts(AREA, snippet)
    assert found == [AREA.replace("        x = self.w", "        y = self.w * self.h\n        x = self.w"),
                     AREA.replace("        x = self.w", "        y = self.w")]


CONSTANTS = 'import os\n\nTIMEOUT = 30\nRETRIES = 3\n\n\ndef main():\n    return TIMEOUT\n'
RUN = "def main():\n    timeout = 30\n\n    retries = 3\n    run(timeout, retries)\n"


@pytest.mark.parametrize("original, snippet, old, new", [
    (CONSTANTS, "import os\n\nTIMEOUT = 60\n# ... existing code ...\n", "TIMEOUT = 30\n", "TIMEOUT = 60\n"),
    (RUN, "def main():\n    timeout = 30\n\n    retries = 5\n    # ... existing code ...\n", "    retries = 3\n",
     "    retries = 5\n"),
])
def test_a_changed_assignment_after_a_blank_anchor_line_replaces_the_old_one(original, snippet, old, new):
    """A changed line after an anchor that ends in a blank line used to be inserted beside the
    line it changes, at confidence 1.0 (found probing issue 30's shapes). Replacing it is a
    reading now; inserting it would assign the name twice in a row, which no one means."""
    assert texts(original, snippet) == [original.replace(old, new)]


def test_a_repeated_line_shown_twice_fits_the_pair_above_a_deletion_or_the_pair_below():
    """`x = 0` three times, the first two apart: the snippet writes `c = 3`, `x = 0`, `x = 0`. The
    pair is the first two copies (`d = 4` deleted, the third copy kept under the marker) or the
    last two standing together (the first copy deleted with `d = 4`). The second reading's anchors
    weigh more, but the first shows as many of the snippet's lines and deletes less: both are
    offered (`placement._rivals`), where the merge took the second and reported it exact
    (found by the property test's random draws, about 1 in 3,000)."""
    original = "start = 0\na = 1\nb = 2\nc = 3\nx = 0\nd = 4\nx = 0\nx = 0\ne = 5\nend = 9\n"
    snippet = "# ... existing code ...\na = 1\nb = 20\nc = 3\nx = 0\nx = 0\nnew()\n# ... existing code ...\n"
    found = explore(original, snippet, "python")
    assert found.result.status == "ambiguous"
    assert [r.text for r in found.readings] == [
        "start = 0\na = 1\nb = 20\nc = 3\nx = 0\nx = 0\nnew()\nx = 0\ne = 5\nend = 9\n",
        "start = 0\na = 1\nb = 20\nc = 3\nx = 0\nx = 0\nnew()\ne = 5\nend = 9\n",
    ]
    assert [r.labels for r in found.readings] == [("snippet segment 1 replaces original lines 2-7",),
                                                  ("snippet segment 1 replaces original lines 2-8",)]


def test_a_changed_entry_replaces_the_entry_of_the_same_key():
    """Inserting `'b': 20,` beside `'b': 2,` would give the literal the same key twice."""
    original = "CONFIG = {\n    'a': 1,\n    'b': 2,\n    'c': 3,\n}\n"
    snippet = "CONFIG = {\n    'a': 1,\n    'b': 20,\n    # ... existing code ...\n}\n"
    assert texts(original, snippet) == [original.replace("'b': 2,", "'b': 20,")]


def test_a_changed_call_after_a_blank_anchor_line_replaces_its_like_or_is_new():
    snippet = "def main():\n    timeout = 30\n\n    retries = 3\n    run(timeout, retries, 1)\n    # ... existing code ...\n"
    found = texts(RUN.replace("    run(", "\n    run("), snippet.replace("    run(", "\n    run("))
    assert len(found) == 2 and RUN.replace("\n    run(timeout, retries)", "\n\n    run(timeout, retries, 1)") in found


def test_an_edge_line_inserted_after_a_return_is_no_reading():
    # Beside `return x`, `return x * 2` would never run: the replacement is the one reading.
    snippet = "# ... existing code ...\n        x = self.w * self.h\n        return x * 2\n# ... existing code ...\n"
    found = explore(AREA, snippet, "python")
    assert not found.ambiguous and found.result.text == AREA.replace("return x\n", "return x * 2\n")


def test_a_snippet_end_without_a_marker_keeps_or_ends_the_block():
    original = "class MyError(Exception):\n    \"\"\"Raised.\"\"\"\n    pass\n\n\nclass Other:\n    x = 1\n"
    found = texts(original, "# ... existing code ...\nclass MyError(Exception):\n    \"\"\"Raised.\"\"\"\n")
    assert found == [original, original.replace("    pass\n", "")]


def test_a_snippet_end_inside_a_long_block_keeps_it():
    # Ending a function's first lines without a marker: deleting its five other statements is
    # no reading (FEW), so the merge is sure.
    original = "def f(a):\n" + "".join(f"    a += {i}\n" for i in range(6)) + "    return a\n"
    found = explore(original, "def f(a):\n    a += 0\n    a += 1\n", "python")
    assert not found.ambiguous and found.result.text == original


def test_a_blank_line_written_at_a_marker_joins_the_blank_line_there():
    original = "import os\n\n\ndef a():\n    return 1\n\n\ndef b():\n    return 2\n"
    snippet = "# ... existing code ...\n\ndef new():\n    return 0\n\n\ndef b():\n    return 2\n"
    found = explore(original, snippet, "python")
    assert not found.ambiguous
    assert found.result.text == original.replace("def b():", "def new():\n    return 0\n\n\ndef b():")


def test_a_blank_line_before_a_marker_joins_the_blank_line_after_a_construct_the_segment_closes():
    """The segment empties the `if` and closes it with its own `}`, which replaces the rest of
    the `if` (a later end than its anchors'): its blank line before the marker is the one the
    original has there, not a second one (found by fuzzing chat-style snippets)."""
    original = ("function a(x) {\n    return 1;\n}\n\nfunction b(x) {\n    if (x > 0) {\n        x = compute(x);\n    }\n\n"
                "    v = compute(2);\n    return 2;\n}\n")
    snippet = "// ... existing code ...\nfunction b(x) {\n    if (x > 0) {\n    }\n\n// ... existing code ...\n    return 2;\n}\n"
    found = explore(original, snippet, "javascript")
    assert not found.ambiguous and found.result.text == original.replace("        x = compute(x);\n", "")


def test_a_changed_header_above_the_anchor_replaces_the_header_of_the_definition_the_anchor_is_in():
    """Kept beside it, `function b(x) {` would open a second `b` around the new one."""
    original = "function a(x) {\n    return 1;\n}\n\nfunction b(x) {\n    let y = x;\n    y += 2;\n    return y;\n}\n"
    snippet = "// ... existing code ...\n\nfunction b(x, z) {\n    console.log(z);\n    let y = x;\n    y += 2;\n    return y;\n}\n"
    found = explore(original, snippet, "javascript")
    assert not found.ambiguous
    assert found.result.text == original.replace("function b(x) {\n    let y = x;", "function b(x, z) {\n    console.log(z);\n    let y = x;")


def test_a_definition_written_just_below_one_of_its_name_is_new_or_replaces_it():
    """A setter below its getter, or the getter rewritten whole: both readings, the new one first."""
    original = "class A:\n    @property\n    def x(self):\n        return self._x\n\n    def y(self):\n        return 1\n"
    snippet = "# ... existing code ...\n\n    def x(self, value):\n        self._x = value\n\n    def y(self):\n        return 1\n"
    assert texts(original, snippet) == [
        original.replace("\n    def y", "\n    def x(self, value):\n        self._x = value\n\n    def y"),
        original.replace("    def x(self):\n        return self._x\n", "    def x(self, value):\n        self._x = value\n"),
    ]


def test_a_segment_is_not_placed_below_a_definition_it_writes_again():
    """`v = compute(0)` is the first line of both bodies; anchored on alpha_2's copy, the segment
    would write `def alpha_2(x):` again under the original's and keep the old `delta_1`."""
    original = ("import os\n\n\ndef delta_1(x):\n    v = compute(0)\n    return alpha\n\n\n"
                "def alpha_2(x):\n    v = compute(0)\n    return alpha\n\n\ndef sigma_3(x):\n    w = 1\n    return w\n")
    snippet = ("# ... existing code ...\ndef delta_1(x, y):\n    v = compute(0)\n    changed = alpha()\n\n\n"
               "def alpha_2(x):\n    v = compute(0)\n    inserted()\n    return alpha\n\n\ndef sigma_3(x):\n"
               "# ... existing code ...\n")
    found = explore(original, snippet, "python")
    assert not found.ambiguous
    assert found.result.text == original.replace(
        "def delta_1(x):\n    v = compute(0)\n    return alpha", "def delta_1(x, y):\n    v = compute(0)\n    changed = alpha()"
    ).replace("    return alpha\n\n\ndef sigma", "    inserted()\n    return alpha\n\n\ndef sigma")


def test_a_segment_that_matches_equally_at_two_places_gives_both():
    original = "def a():\n    x = 1\n    return x\n\n\ndef b():\n    x = 1\n    return x\n"
    found = texts(original, "# ... existing code ...\n    x = 1\n    log(x)\n    return x\n# ... existing code ...\n")
    assert sorted(found) == sorted([original.replace("    x = 1\n", "    x = 1\n    log(x)\n", 1),
                                    original[::-1].replace("\n1 = x    ", "\n)x(gol    \n1 = x    ", 1)[::-1]])


def test_a_method_a_rewritten_class_leaves_out_is_kept_or_deleted():
    original = "class A:\n    def a(self):\n        return 1\n\n    def b(self):\n        return 2\n\n    def c(self):\n        return 3\n"
    snippet = "class A:\n    def a(self):\n        return 10\n\n    def c(self):\n        return 3\n"
    assert texts(original, snippet) == [original.replace("return 1\n", "return 10\n"),
                                        original.replace("return 1\n", "return 10\n").replace("    def b(self):\n        return 2\n\n", "")]


def test_the_blank_line_a_rewritten_class_leaves_out_above_its_closer_stays_with_the_methods():
    """A class rewritten without markers and without its untouched methods is abridged: the blank
    line it leaves out between its last method and the class's `}` stays, as the methods do (a
    lone closer anchors no deletion, so keeping is the one reading)."""
    original = ("class A {\n    int a() {\n        return 1;\n    }\n\n    int b() {\n        return 2;\n    }\n\n"
                "    int c() {\n        return 3;\n    }\n\n}\n")
    snippet = "class A {\n    int a() {\n        return 10;\n    }\n\n    int c() {\n        return 3;\n    }\n}\n"
    assert texts(original, snippet, "java") == [original.replace("return 1;", "return 10;")]


@pytest.mark.parametrize("language, original, snippet, change", [
    # The snippet's `@property` is the changed member's, not the left-out ones' above it.
    ("python",
     "class A:\n    @property\n    def a(self):\n        return 1\n\n    @property\n    def b(self):\n"
     "        return 2\n\n    @property\n    def c(self):\n        return 3\n",
     "class A:\n    @property\n    def c(self):\n        return 30\n", ("return 3\n", "return 30\n")),
    ("java",
     "class A {\n    @Override\n    int a() {\n        return 1;\n    }\n\n    @Override\n    int b() {\n"
     "        return 2;\n    }\n}\n",
     "class A {\n    @Override\n    int b() {\n        return 20;\n    }\n}\n", ("return 2;", "return 20;")),
])
def test_decorated_members_a_rewritten_class_leaves_out_are_kept_first(language, original, snippet, change):
    assert texts(original, snippet, language)[0] == original.replace(*change)


def test_methods_an_object_literal_leaves_out_before_its_closer_are_kept():
    # Between the object's first line and its own `});`, a lone closer says too little to delete
    # `_cast` and `_check` by: keeping them is the one reading.
    original = ("inherits(A, B, {\n  _cast(v) {\n    return v;\n  },\n\n  ensure() {\n    return 1;\n  },\n\n"
                "  _check(v) {\n    return true;\n  },\n});\n")
    snippet = "inherits(A, B, {\n  ensure() {\n    return 2;\n  },\n});\n"
    found = explore(original, snippet, "javascript")
    assert not found.ambiguous and found.result.text == original.replace("return 1;", "return 2;")


def test_new_first_lines_above_an_anchor_go_above_it_or_at_the_top():
    original = "import os\n\n\ndef a():\n    return 1\n\n\ndef b():\n    return 2\n"
    # No marker before `import sys`, which is new, and code above the anchor `def b`: it goes
    # right above `def b`, at the top of the file, or in place of what is above (three lines).
    found = texts(original, "import sys\n\ndef b():\n    return 3\n# ... existing code ...\n")
    assert len(found) == 3 and all("return 3" in text for text in found)
    assert "    return 1\n\nimport sys\n\ndef b():" in found[0]
    assert found[1].startswith("import sys\nimport os\n") and "def a()" in found[1]
    assert found[2] == "import sys\n\ndef b():\n    return 3\n"


class ScoringEngine:
    """The Engine protocol as the ranking uses it, scoring each continuation by a given table
    (the CI model's preferences are arbitrary; what is tested is the rule applied to them)."""

    def __init__(self, tokenizer, with_pass: float, without: float):
        self.tokenizer, self.with_pass, self.without = tokenizer, with_pass, without
        self.cfg = type("Cfg", (), {"max_model_len": 1 << 16})()

    def submit(self, request, loop=None):
        return request

    def stream(self, request):
        tail = self.tokenizer.decode(request.prompt_ids[request.score_from :])
        score = 0.0 if not tail else self.with_pass if "pass" in tail else self.without
        yield Event("s", [], "", True, "stop", GenerationStats(), logprob=score)


@pytest.fixture(scope="module")
def tokenizer(ci_model_dir):
    return Tokenizer(ci_model_dir)


ERR = "class MyError(Exception):\n    \"\"\"Raised.\"\"\"\n    pass\n\n\nclass Other:\n    x = 1\n"
ERR_SNIPPET = "# ... existing code ...\nclass MyError(Exception):\n    \"\"\"Raised.\"\"\"\n"


def test_a_clear_margin_takes_the_model_s_reading(tokenizer):
    engine = ScoringEngine(tokenizer, with_pass=-1.0, without=-1.0 - MARGIN - 0.5)
    result = apply_edit(engine, ApplyRequest(ERR, ERR_SNIPPET, path="e.py"))
    assert result.ok and result.stats.path == "ranked" and result.merged_code == ERR
    assert [r.logprob for r in result.readings] == [-1.0, -1.0 - MARGIN - 0.5]


def test_a_near_tie_is_refused_with_the_readings(tokenizer):
    engine = ScoringEngine(tokenizer, with_pass=-2.0, without=-2.0 - MARGIN / 2)
    result = apply_edit(engine, ApplyRequest(ERR, ERR_SNIPPET, path="e.py"))
    assert not result.ok and "ranking_unsure" in result.validation.names
    assert [r.merged_code for r in result.readings] == [ERR, ERR.replace("    pass\n", "")]
    assert result.merged_code == ERR  # the reading that keeps every line, shown but not written


def test_readings_are_scored_where_they_part_not_over_the_lines_one_of_them_copies(tokenizer):
    """Keeping 40 left-out lines against deleting them: each answer is scored over its first
    SCORED_TOKENS tokens after their shared head. Summed over every copied token, the cost of
    the kept lines made the deletion win (mobxjs/mobx@dee35be427, by 10.4 nats, 0.5B)."""
    from engine.apply.ranking import SCORED_TOKENS, rank_prompt

    original = "class A:\n    def a(self):\n        return 1\n\n" + "".join(
        f"    def m{i}(self):\n        return {i}\n\n" for i in range(20)) + "    def c(self):\n        return 3\n"
    snippet = "class A:\n    def a(self):\n        return 10\n\n    def c(self):\n        return 3\n"
    found = explore(original, snippet, "python")
    assert len(found.readings) == 2
    prompt = rank_prompt(tokenizer, found.readings, original, found.result.snippet, "python")
    assert all(0 < len(c) <= SCORED_TOKENS for c in prompt.continuations)
    assert prompt.continuations[0] != prompt.continuations[1]


def test_the_margin_is_the_lead_of_the_first_over_the_second():
    ranking = Ranking((Scored(None, -1.0), Scored(None, -1.0 - MARGIN)), 10, 5, 0.1, (0, 3))
    assert ranking.margin == pytest.approx(MARGIN) and ranking.chosen is None
    assert Ranking((Scored("a", -1.0), Scored("b", -2.0 - MARGIN)), 10, 5, 0.1, (0, 3)).chosen == "a"


def test_the_model_cannot_change_a_line_outside_the_stretch_it_writes(tokenizer):
    """A model that rewrites every line it is given: the lines outside the stretch around the
    segment the merge could not place come back byte for byte."""
    from tests.apply.conftest import SHAPES_PY
    from tests.apply.test_pipeline import UNPLACED, EchoEngine

    engine = EchoEngine(tokenizer, answer=lambda prediction: prediction.replace("self.", "this."))
    result = apply_edit(engine, ApplyRequest(SHAPES_PY, UNPLACED, path="shapes.py"))
    head = SHAPES_PY.split("    def area")[0]
    assert result.merged_code.startswith(head) and "this." not in head
    assert "this." in result.merged_code  # inside the stretch the model wrote what it wrote


def test_a_line_of_a_member_that_a_whole_file_answer_replaces_is_no_member_left_out():
    # Issue 31's repro, small: every member is shown; only `def f` of the third became another
    # line. The grammar finds no member wholly between the anchors, so none is left out.
    original = "def f(x):\n    y = x + 1\n    return y\n\n" * 5
    lines = original.splitlines(keepends=True)
    lines[8] = "    y = x + 2\n"
    found = explore(original, "".join(lines), "python")
    assert not found.ambiguous and found.result.text == "".join(lines)


def test_a_changed_value_of_the_same_name_replaces_the_line_however_short():
    """`x1 = 'one'` after the anchor `x0 = 0` changes `x1 = 1` (the two lines share little but the
    name): kept beside it, the old value would be overwritten before it is read."""
    original = "".join(f"x{i} = {i}\n" for i in range(20))
    snippet = "x0 = 0\nx1 = 'one'\n# ... existing code ...\nx14 = 14\nx15 = 'fifteen'\n# ... existing code ...\n"
    result = apply_edit(None, ApplyRequest(original, snippet, path="v.py"))
    assert result.ok and result.merged_code == original.replace("x1 = 1\n", "x1 = 'one'\n").replace(
        "x15 = 15\n", "x15 = 'fifteen'\n")


@pytest.mark.parametrize("original, snippet", [
    ("def f(x):\n    if x:\n        return compute(x, mode='fast')\n    return None\n",
     "def f(x):\n    if x:\n        raise ValueError('no')\n    # ... existing code ...\n"),
    ("def f(x):\n    y = x\n    log(y)\n    return y\n", "def f(x):\n    return 0\n    # ... existing code ...\n"),
])
def test_a_merge_whose_only_reading_leaves_dead_code_is_refused(original, snippet):
    """The one reading keeps the original's lines after a new `raise` / `return`: code that never
    runs, which neither the file nor the snippet had, so not a result (refused, never valid)."""
    result = apply_edit(None, ApplyRequest(original, snippet, path="a.py", mode="deterministic"))
    assert not result.ok and "dead_code" in result.validation.names


def test_a_changed_return_value_replaces_the_return_however_short():
    """`return 'new a'` under the anchor `def a():` changes `return 0`; kept beside it, the old
    return would never run (that merge was valid at confidence 1.0 before)."""
    original = "def a():\n    return 0\n\n\ndef b():\n    return 1\n"
    snippet = "# ... existing code ...\ndef a():\n    return 'new a'\n# ... existing code ...\n"
    result = apply_edit(None, ApplyRequest(original, snippet, path="t.py", mode="deterministic"))
    assert result.ok and result.merged_code == original.replace("return 0", "return 'new a'")


MOVED = ('def handle(r):\n    path = r.path\n\n    if "." in path:\n        base = path.rfind("/")\n'
         '        fmt = path[base:]\n\n        ctx = context_of(r)\n        ctx.route = path[:base]\n    return path, fmt\n')


def test_a_line_moved_up_is_read_as_moved_or_copied():
    """The snippet writes `ctx = context_of(r)` higher up and elides where it was: its blank line
    before `ctx.route = ...` is the original's blank line if the old copy is gone. Kept at
    confidence 1.0 before (issue 30: go-chi/chi@0fe6bf1ba3); now two readings, never a guess."""
    snippet = ('# ... existing code ...\n    path = r.path\n\n    ctx = context_of(r)\n    if ctx.route:\n'
               '        path = ctx.route\n\n    if "." in path:\n        base = path.rfind("/")\n# ... existing code ...\n\n'
               '        ctx.route = path[:base]\n    return path, fmt\n')
    moved = MOVED.replace("    path = r.path\n\n", "    path = r.path\n\n    ctx = context_of(r)\n    if ctx.route:\n"
                          "        path = ctx.route\n\n").replace("\n        ctx = context_of(r)\n        ctx.route", "\n        ctx.route")
    found = explore(MOVED, snippet, "python")
    assert len(found.readings) == 2 and found.readings[1].text == moved
    assert "copied" in found.readings[0].label and "moved" in found.readings[1].label
    result = apply_edit(None, ApplyRequest(MOVED, snippet, path="h.py", mode="deterministic"))
    assert not result.ok and "ambiguous_reading" in result.validation.names
    assert [r.merged_code for r in result.readings] == [found.readings[0].text, moved]


def test_an_import_moved_up_above_a_doc_comment_opener_is_read_as_moved_or_copied():
    """The snippet's segment ends `/**` before its marker: that is the class doc comment's
    opener, past the import the snippet moved up, not a new line. The merge wrote it new, which
    commented out the old import and still parsed: wrong, reported valid (issue 30:
    apache/commons-lang@809e2bed22). Now the import is copied or moved, never a stray `/**`."""
    methods = "".join(f"\n    /**\n     * Does {n}.\n     */\n    void {n}() {{\n        Validate.ok();\n    }}\n"
                      for n in ("f", "g", "h", "k"))
    original = ("package p;\n\nimport java.util.List;\nimport java.util.Map;\n\nimport org.x.Validate;\n\n/**\n * Doc.\n */\n"
                "class A {" + methods + "}\n")
    snippet = "package p;\n\nimport org.x.Validate;\n\nimport java.util.List;\nimport java.util.Map;\n\n/**\n// ... existing code ...\n"
    copied = original.replace("package p;\n\n", "package p;\n\nimport org.x.Validate;\n\n")
    moved = copied.replace("import java.util.Map;\n\nimport org.x.Validate;\n", "import java.util.Map;\n")
    found = explore(original, snippet, "java")
    assert [r.text for r in found.readings] == [copied, moved] and not found.rankable


def test_a_segment_that_changes_nothing_shows_the_deletion_at_its_blank_edge():
    """`use std::time::Duration;` and a blank line, then a marker, where the original goes on
    with `use std;`: a segment that changes nothing can only be showing that deletion (issue 30:
    serde-rs/serde@350c2e835b, kept at confidence 1.0 before). Both readings, the kept one first."""
    original = ('use std::fmt;\nuse std::time::Duration;\nuse std;\n\nuse std::sync::Arc;\n\nfn a() -> u8 {\n    1\n}\n\n'
                'fn b() -> u8 {\n    2\n}\n')
    snippet = "// ...\nuse std::time::Duration;\n\n// ...\nfn b() -> u8 {\n    3\n}\n"
    edited = original.replace("    2\n", "    3\n")
    assert texts(original, snippet, "rust") == [edited, edited.replace("use std;\n", "")]


def test_a_header_shown_alone_above_its_docstring_is_no_deletion():
    original = 'class A:\n    """Doc."""\n\n    def f(self):\n        return 1\n'
    snippet = "class A:\n\n    # ... existing code ...\n    def f(self):\n        return 2\n"
    assert texts(original, snippet) == [original.replace("return 1", "return 2")]


def test_definitions_left_out_go_only_beside_the_reading_that_keeps_them(monkeypatch):
    """Where putting back what a marker-less snippet leaves out does not validate, the reading
    that deletes it is not the answer alone: a refusal (`unsure_deletion`), not 70 lines gone
    (issue 30: mobxjs/mobx@dee35be427). The failure of the keep reading is simulated: the bugs
    that caused it are fixed (the tests beside this one)."""
    import engine.apply.placement as placement

    def broken(lines, index, found):
        return lines[:1] + ["    def broken(:"] + lines[1:], 1
    monkeypatch.setattr(placement, "keep_left_out", broken)
    original = "class A:\n    def a(self):\n        return 1\n\n    def b(self):\n        return 2\n\n    def c(self):\n        return 3\n"
    snippet = "class A:\n    def a(self):\n        return 10\n\n    def c(self):\n        return 3\n"
    found = explore(original, snippet, "python")
    assert not found.readings and "unsure_deletion" in found.validation.names


def test_entries_a_rewritten_literal_leaves_out_stay_and_changed_entries_replace_theirs():
    """Numeric keys name their entries too: `4: "four, longer"` replaces `4: "four"`, and the
    entries left out stay, with the commented-out one between them (issue 30:
    mobxjs/mobx@dee35be427, where keeping them did not parse)."""
    original = ('const errors = {\n    0: "zero",\n    1(a) {\n        return `one ${a}`\n    },\n    /*\n    2: "two",\n    */\n'
                '    3: "three",\n    4: "four",\n    5: "five",\n} as const\n')
    snippet = 'const errors = {\n    0: "zero",\n    4: "four, longer",\n    5: "five, longer",\n} as const\n'
    found = texts(original, snippet, "typescript")
    assert found[0] == original.replace('"four"', '"four, longer"').replace('"five"', '"five, longer"')


def test_readings_of_moved_code_are_offered_not_ranked(tokenizer):
    """The model sees a window around the old copy, not the snippet's new one: it kept a moved
    block by a clear margin (1.5B, gorilla/mux@de7178dc9d). `auto` refuses with the readings
    and runs no model, whatever the model would say."""
    snippet = ('# ... existing code ...\n    path = r.path\n\n    ctx = context_of(r)\n    if ctx.route:\n'
               '        path = ctx.route\n\n    if "." in path:\n        base = path.rfind("/")\n# ... existing code ...\n\n'
               '        ctx.route = path[:base]\n    return path, fmt\n')
    engine = ScoringEngine(tokenizer, with_pass=-1.0, without=-1.0 - 3 * MARGIN)
    result = apply_edit(engine, ApplyRequest(MOVED, snippet, path="h.py"))
    assert not result.ok and "moved_code" in result.validation.names and len(result.readings) == 2
    assert result.stats.ranking is None


class WritingEngine(ScoringEngine):
    """ScoringEngine that also writes: a generation request gets its predicted answer back (the
    merge's file, in the prompt form's fences) with `edit` applied, in one event."""

    def __init__(self, tokenizer, edit=lambda text: text, with_pass: float = -1.0, without: float = -1.0 - 3 * MARGIN):
        super().__init__(tokenizer, with_pass, without)
        self.edit = edit

    async def astream(self, request):
        for event in self.stream(request):
            yield event

    def stream(self, request):
        if request.score_from is not None:
            yield from super().stream(request)
            return
        ids = self.tokenizer.encode(self.edit(self.tokenizer.decode(request.sources["prediction"])))
        yield Event("w", ids, "", True, "stop", GenerationStats(prompt_tokens=len(request.prompt_ids),
                                                                 generated_tokens=len(ids), steps=1))

    def cancel(self, handle):
        pass


@pytest.mark.parametrize("with_pass, without, outcome", [
    (-1.0, -1.0 - MARGIN - 0.5, "ranked"),  # the model writes the reading its scores prefer clearly
    (-1.0, -1.0 - MARGIN / 2, "ranking_unsure"),  # the reading it wrote leads by too little
    (-1.0 - MARGIN - 0.5, -1.0, "ranking_unsure"),  # its scores prefer the other reading
])
def test_mode_model_chooses_between_readings_only_by_the_ranking_s_margin(tokenizer, with_pass, without, outcome):
    """The model's free writing is no evidence between readings (it copies the line the snippet
    may delete: six dev-set cases in mode model, H200, 2026-12-05): its file (here the reading
    that keeps `pass`) is taken only when it is the reading that ranking takes, else refused with
    the readings."""
    engine = WritingEngine(tokenizer, with_pass=with_pass, without=without)
    result = apply_edit(engine, ApplyRequest(ERR, ERR_SNIPPET, path="e.py", mode="model"))
    assert result.stats.path == "model" and outcome in result.validation.names, result.validation.names
    assert result.ok == (outcome == "ranked") and len(result.readings) == 2
    assert result.merged_code == ERR


def test_mode_model_may_not_contradict_a_merge_with_one_reading_that_validates(tokenizer):
    """What `auto` would return without a model is what the model's file must be in mode model:
    a file that drops a blank line (as one did for tqdm/tqdm@4b3dc8928f in dev_hard) is refused
    and the merge offered as the candidate."""
    snippet = "# ... existing code ...\nRETRIES = 5\n\n\ndef main():\n# ... existing code ...\n"
    merged = CONSTANTS.replace("RETRIES = 3", "RETRIES = 5")
    assert explore(CONSTANTS, snippet, "python").result.text == merged
    for edit, ok in ((lambda p: p, True), (lambda p: p.replace("\n\n\ndef", "\n\ndef"), False)):
        result = apply_edit(WritingEngine(tokenizer, edit), ApplyRequest(CONSTANTS, snippet, path="c.py", mode="model"))
        assert result.ok == ok and result.merged_code == edit(merged), result.validation.names
        if not ok:
            assert "merge_contradicted" in result.validation.names and result.candidate.merged_code == merged


def test_mode_model_refuses_a_file_that_is_none_of_the_readings(tokenizer):
    """Validation catches nearly every such file; one it lets through (a blank line more after
    the class, outside what it checks) is still no reading, so nothing confirms it."""
    from engine.apply.pipeline import _held_to_merge, prepare

    plan = prepare(ApplyRequest(ERR, ERR_SNIPPET, path="e.py", mode="model"))
    problems, ranking = _held_to_merge(plan, ERR + "\n", ScoringEngine(tokenizer, with_pass=-1.0, without=-20.0))
    assert [p.name for p in problems] == ["ambiguous_reading"] and ranking is None
