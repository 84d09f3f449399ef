"""Property tests: random files, random lazy snippets cut from them, and what a merge may never do.

The generator mimics how edit snippets are made (and how the dev set was): pick windows of the
file, change / delete / insert lines inside them, keep the rest of each window as context, and put
one elision marker between windows (and first / last when the snippet does not reach the file's
start / end). Lines outside the windows and context lines inside them are "untouched".
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.apply import merge

MARKER = "# ... existing code ..."
# Lines that repeat in real files, so that anchors can be ambiguous.
COMMON = ["", "}", "return None", "pass", "    x += 1", "else:"]
WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "zeta"]


@dataclass
class Case:
    original: list[str]
    snippet: list[str]
    expected: list[str]
    untouched: list[int]  # indices of original lines the snippet did not change or delete


@st.composite
def files(draw, duplicates: bool) -> list[str]:
    n = draw(st.integers(3, 40))
    lines = []
    for i in range(n):
        if duplicates and draw(st.integers(0, 4)) == 0:
            lines.append(draw(st.sampled_from(COMMON + lines[-3:])))
        else:
            lines.append(f"value_{i} = compute({draw(st.sampled_from(WORDS))}, {i})")
    return lines


@st.composite
def cases(draw, duplicates: bool = True, edges_are_context: bool = False) -> Case:
    original = draw(files(duplicates))
    n = len(original)
    # Window boundaries: sorted cut points, windows are every other interval, gaps >= 1 line.
    cuts = sorted(draw(st.sets(st.integers(0, n), min_size=2, max_size=8)))
    windows = [(cuts[k], cuts[k + 1]) for k in range(0, len(cuts) - 1, 2) if cuts[k + 1] > cuts[k]]
    windows = [w for i, w in enumerate(windows) if i == 0 or w[0] > windows[i - 1][1]]
    if not windows:
        windows = [(0, n)]
    snippet: list[str] = []
    expected: list[str] = []
    untouched: list[int] = []
    fresh = iter(range(10_000))
    cursor = 0
    for start, end in windows:
        untouched += range(cursor, start)
        expected += original[cursor:start]
        if start > 0:
            snippet.append(MARKER)
        for i in range(start, end):
            at_edge = i in (start, end - 1)
            action = "keep" if edges_are_context and at_edge else draw(st.sampled_from(["keep", "keep", "change", "delete", "insert"]))
            if action == "keep":
                snippet.append(original[i])
                expected.append(original[i])
                untouched.append(i)
            elif action == "change":
                new = f"changed_{next(fresh)} = {draw(st.sampled_from(WORDS))}()"
                snippet.append(new)
                expected.append(new)
            elif action == "insert":
                new = f"inserted_{next(fresh)}()"
                snippet += [original[i], new]
                expected += [original[i], new]
                untouched.append(i)
        cursor = end
    untouched += range(cursor, n)
    expected += original[cursor:]
    if cursor < n:
        snippet.append(MARKER)
    return Case(original, snippet, expected, untouched)


def text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def is_subsequence(needles: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(any(h == n for h in it) for n in needles)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_merge_never_loses_untouched_lines(case: Case):
    if not any(line.strip() and line != MARKER for line in case.snippet):
        return  # a snippet of markers only is rejected before merging (tested elsewhere)
    result = merge(text(case.original), text(case.snippet), "python")
    kept = result.text.split("\n")
    assert is_subsequence([case.original[i] for i in case.untouched], kept), (result.status, result.problems)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(duplicates=False, edges_are_context=True))
def test_merge_with_unique_context_reproduces_the_edit(case: Case):
    """Distinct lines and context at both ends of every window: the merge is exact and right."""
    result = merge(text(case.original), text(case.snippet), "python")
    assert result.status == "exact", result.problems
    assert result.text == text(case.expected)
