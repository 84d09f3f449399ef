"""Property tests on brace files: JavaScript functions of nested `if` blocks, each closer at its
block's depth, their statements distinct, blank lines among them; lazy snippets cut from them as
in test_merge_properties.py (windows of the file with statements changed, deleted or added
inside, one marker between windows). Braces and `return x;` repeat everywhere, so they anchor
weakly. (With statements repeated too, a window fits several places equally well and the merge
may take another of them: a reading of the snippet, not a lost line; so statements are distinct
here. Read upside down, as the blank-and-brace files of test_merge_properties.py are, a brace
file is no code: its closers come before their openers.)

The promise checked is the pipeline's, not the bare merge's: a result the deterministic pipeline
reports valid keeps every line the edit did not touch (a merge that loses a line and then fails
validation is refused, which is allowed). The merge rules these found: `candidates._closing_tails`
(the opener above the closer, and no other tail for that closer), `candidates._nearer_braces` for
an anchor without its blank edges, `candidates._drops_unshown` for anchors of common lines.
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bench.fuzz_merge import outcome
from engine.apply import merge
from tests.apply.test_merge_properties import Case, cut, is_subsequence, text

MARKER = "// ... existing code ..."
NAMES = ["alpha", "beta", "gamma", "delta"]


@st.composite
def brace_files(draw, distinct: bool) -> list[str]:
    """1-5 functions; a body is 1-4 statements, returns, blank lines or `if` blocks, two deep."""
    lines: list[str] = []

    def body(depth: int, nesting: int) -> None:
        pad = "  " * depth
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["statement", "statement", "return", "if", "blank"][: 5 if nesting else 3] + ["blank"]))
            if kind == "statement":
                name = draw(st.sampled_from(NAMES))
                lines.append(f"{pad}x = {name}_{len(lines)}(x);" if distinct else f"{pad}x = {name}(x);")
            elif kind == "return":
                lines.append(f"{pad}return x;")
            elif kind == "blank":
                lines.append("")
            else:
                lines.append(f"{pad}if (x > {draw(st.integers(0, 3))}) {{")
                body(depth + 1, nesting - 1)
                lines.append(f"{pad}}}")

    for f in range(draw(st.integers(1, 5))):
        lines.append(f"function {draw(st.sampled_from(NAMES))}_{f}(x) {{")
        body(1, 2)
        lines += ["}", ""]
    return lines


@st.composite
def brace_cases(draw, distinct: bool) -> Case:
    """Windows of a brace file with statements changed, deleted or added; a line that opens or
    closes a block is kept (an edit rewrites statements, not half a block), and each window keeps
    a statement of the original as context (a window of braces and `return x;` alone, or a block
    whose every statement is rewritten under a header found twice, fits more than one place)."""
    original = draw(brace_files(distinct))

    def edit(i: int, at_edge: bool, k: int) -> tuple[str, str | None]:
        line = original[i]
        pad = line[: len(line) - len(line.lstrip())]
        action = draw(st.sampled_from(["keep", "keep", "change", "delete", "insert"]))
        if action in ("change", "delete") and (line.rstrip().endswith("{") or line.strip() == "}"):
            action = "keep"
        return action, {"change": f"{pad}y{k} = changed(x);", "insert": f"{pad}added{k}();"}.get(action)

    return cut(draw, original, MARKER, edit, max_cuts=6, context=(lambda line: "x = " in line) if distinct else None)


def _function(name: str, *body: str) -> list[str]:
    return [f"function {name}(x) {{", *body, "}", ""]


_IF = ["  if (x > 3) {", "    x = alpha(x);", "    x = alpha(x);", "    x = alpha(x);", "  }"]
# alpha_4's last statement deleted above its `}`: its window was anchored on alpha_2's `if` block
# instead, whose last lines equal the window's, and alpha_4 was written there a second time.
_CLOSER_BELOW_A_DELETION = Case(
    original=[*_function("alpha_2", "  return x;", "  if (x > 0) {", "    x = alpha(x);", "    x = alpha(x);", "  }"),
              *_function("alpha_3", "  return x;", "  return x;"), *_function("alpha_4", *_IF, "  return x;")],
    snippet=[MARKER, "  return x;", "  return x;", "}", "", "function alpha_4(x) {", *_IF, "}", MARKER],
    expected=[*_function("alpha_2", "  return x;", "  if (x > 0) {", "    x = alpha(x);", "    x = alpha(x);", "  }"),
              *_function("alpha_3", "  return x;", "  return x;"), *_function("alpha_4", *_IF)],
    untouched=[*range(19), 20, 21],
)
# A blank line and a closer written above an added call: anchored where a blank line and a closer
# meet, eight lines up, the span deleted the whole `if` block between.
_INNER = ["    if (x > 0) {", "      x = alpha_19(x);", "      return x;", "", "      x = alpha_22(x);", "    }"]
_BLANK_AND_CLOSER = Case(
    original=_function("alpha_0", "  if (x > 0) {", "    if (x > 0) {", "      x = alpha_12(x);", "", "    }",
                       "    x = alpha_15(x);", "  }", "  if (x > 0) {", *_INNER, "    x = alpha_24(x);", "  }"),
    snippet=[MARKER, "", "    }", "    added0();", "    x = alpha_24(x);", MARKER],
    expected=_function("alpha_0", "  if (x > 0) {", "    if (x > 0) {", "      x = alpha_12(x);", "", "    }",
                       "    x = alpha_15(x);", "  }", "  if (x > 0) {", *_INNER, "    added0();", "    x = alpha_24(x);",
                       "  }"),
    untouched=list(range(19)),
)

# alpha_1's last statement deleted above its `}` and a statement changed: the window's tail
# `return x;` `}` anchored on alpha_3's end, and alpha_2 and alpha_3's header went with the span.
_ALPHA_1 = ["  x = alpha(x);", "  if (x > 0) {", "    if (x > 0) {", *["      return x;"] * 3, "    }", "    return x;",
            "  }", "  return x;", "  x = alpha(x);"]
_REST = [*_function("alpha_2", "  x = alpha(x);"), *_function("alpha_3", "  return x;")]
_COMMON_ANCHORS = Case(
    original=[*_function("alpha_0", "  x = alpha(x);", "  return x;", "  return x;"), *_function("alpha_1", *_ALPHA_1),
              *_REST],
    snippet=[MARKER, *["      return x;"] * 3, "    }", "    y0 = changed(x);", "  }", "  return x;", "}", MARKER],
    expected=[*_function("alpha_0", "  x = alpha(x);", "  return x;", "  return x;"),
              *_function("alpha_1", *_ALPHA_1[:7], "    y0 = changed(x);", *_ALPHA_1[8:10]), *_REST],
    untouched=[*range(14), 15, 16, *range(18, 28)],
)

# A whole function written back, a statement changed and a blank line deleted above its `}`: the
# tail `return x;` `}` anchored on alpha_2's end, and alpha_1 and alpha_2's header went.
_WHOLE_FUNCTION = Case(
    original=[*_function("alpha_0", "  return x;", "  x = alpha_2(x);", "  return x;", ""),
              *_function("alpha_1", "  x = alpha_8(x);"), *_function("alpha_2", "  return x;"), *_function("alpha_3")],
    snippet=["function alpha_0(x) {", "  y0 = changed(x);", "  x = alpha_2(x);", "  return x;", "}", MARKER],
    expected=[*_function("alpha_0", "  y0 = changed(x);", "  x = alpha_2(x);", "  return x;"),
              *_function("alpha_1", "  x = alpha_8(x);"), *_function("alpha_2", "  return x;"), *_function("alpha_3")],
    untouched=[0, 2, 3, *range(5, 18)],
)
# Three functions written back, the first's blank line made a statement: the `}` at the end was
# taken for the first function's closer, and the other two were written again under it.
_THREE_FUNCTIONS = Case(
    original=[*_function("alpha_0", "  x = alpha_2(x);"),
              *_function("alpha_1", "", "  if (x > 0) {", "    return x;", "    x = alpha_10(x);", "    return x;", "  }"),
              *_function("alpha_2", "  return x;", "  x = alpha_17(x);"), *_function("alpha_3", "  return x;", "  return x;")],
    snippet=[MARKER, "function alpha_1(x) {", "y0 = changed(x);", "  if (x > 0) {", "    y1 = changed(x);",
             "    x = alpha_10(x);", "    y2 = changed(x);", "  }", "}", "", "function alpha_2(x) {", "  return x;",
             "  x = alpha_17(x);", "}", "", "function alpha_3(x) {", "  return x;", "  y3 = changed(x);", "}", MARKER],
    expected=[*_function("alpha_0", "  x = alpha_2(x);"),
              *_function("alpha_1", "y0 = changed(x);", "  if (x > 0) {", "    y1 = changed(x);", "    x = alpha_10(x);",
                         "    y2 = changed(x);", "  }"),
              *_function("alpha_2", "  return x;", "  x = alpha_17(x);"), *_function("alpha_3", "  return x;", "  y3 = changed(x);")],
    untouched=[*range(5), 6, 8, *range(10, 20), 21, 22],
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(brace_cases(distinct=True))
@example(_CLOSER_BELOW_A_DELETION)
@example(_BLANK_AND_CLOSER)
@example(_COMMON_ANCHORS)
@example(_WHOLE_FUNCTION)
@example(_THREE_FUNCTIONS)
def test_a_valid_result_keeps_every_untouched_line(case: Case):
    """Drawn from a fixed seed. Random draws failed about 1 in 1,000-2,500 when this was
    written, on one kind of window (its last lines, an `if` header and its `}` or two `if`
    headers, also stand together further down, and the merge anchors them there and deletes the
    code between, where the near reading anchors one of them and writes the rest;
    bench/HISTORY.md, "A brace the merge dropped"); none in 15,000 at 2055471 (HISTORY.md, "CI
    time back; a repeated line ...")."""
    if not any(line.strip() and line != MARKER for line in case.snippet):
        return  # a snippet of markers only is rejected before merging (tested elsewhere)
    result = merge(text(case.original), text(case.snippet), "javascript")
    kept = [line for line in result.text.split("\n") if line.strip()]
    untouched = [case.original[i] for i in case.untouched if case.original[i].strip()]
    if not is_subsequence(untouched, kept):
        assert outcome((text(case.original), text(case.snippet), text(case.expected)), "javascript") == "refused", case


def test_a_closer_below_a_deleted_statement_is_its_own_functions():
    """The segment shows alpha_4's header and its `}`; the statement between its `if` block and
    that `}` is deleted. The closer anchors on alpha_4's own end (`_closing_tails`, the opener
    above it at its depth), and only that statement goes."""
    case = _CLOSER_BELOW_A_DELETION
    result = merge(text(case.original), text(case.snippet), "javascript")
    assert result.status == "exact" and result.text == text(case.expected)


def test_a_blank_line_and_a_closer_above_an_added_call_delete_nothing():
    """`` `}` `added0();` `x = alpha_24(x);`: the closer is the one right above alpha_24
    (`_nearer_braces`, the anchor without its blank line); the block eight lines up stays."""
    case = _BLANK_AND_CLOSER
    result = merge(text(case.original), text(case.snippet), "javascript")
    assert result.ok
    assert is_subsequence([line for line in case.original if line.strip() and "alpha_22" not in line],
                          [line for line in result.text.split("\n") if line.strip()])
    assert "    }\n    added0();\n    x = alpha_24(x);\n" in result.text
