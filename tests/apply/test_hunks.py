"""Per-hunk review: the hunks of an edit, each taken or left, and where each one shows in the diff."""

from __future__ import annotations

import itertools

import pytest

from engine.apply.diff import unified_diff
from engine.apply.hunks import Hunk, diff_rows, hunks, take

A = "".join(f"line {i}\n" for i in range(20))
# Three changes: line 2 replaced, two lines inserted after line 9, lines 17-18 deleted.
B = (A.replace("line 2\n", "LINE TWO\n").replace("line 9\n", "line 9\nnew a\nnew b\n")
     .replace("line 17\nline 18\n", ""))


def test_the_hunks_of_an_edit():
    assert hunks(A, B) == [Hunk(2, 3, 2, 3), Hunk(10, 10, 10, 12), Hunk(17, 19, 19, 19)]
    assert hunks(A, A) == []


@pytest.mark.parametrize("chosen", [set(c) for n in range(4) for c in itertools.combinations(range(3), n)])
def test_take_applies_the_chosen_hunks_only(chosen):
    text = take(A, B, chosen)
    assert ("LINE TWO\n" in text) == (0 in chosen) and ("new a\n" in text) == (1 in chosen)
    assert ("line 17\n" in text) == (2 not in chosen)
    # What is left to review afterwards is the other hunks, in the same order.
    assert len(hunks(text, B)) == 3 - len(chosen)
    assert take(A, B, {0, 1, 2}) == B and take(A, B, set()) == A


def test_take_keeps_line_endings_and_a_missing_final_newline():
    a, b = "x\r\ny\r\nm\r\nz", "x\r\nY\r\nm\r\nz\n"
    assert take(a, b, {0}) == "x\r\nY\r\nm\r\nz" and take(a, b, {1}) == "x\r\ny\r\nm\r\nz\n"
    assert take(a, b, {0, 1}) == b


def test_diff_rows_name_the_rows_of_each_hunk_even_inside_one_block():
    close = A.replace("line 5\n", "FIVE\n").replace("line 7\n", "SEVEN\n")  # one @@ block, two hunks
    for b in (B, close):
        found = hunks(A, b)
        text = unified_diff(A, b, "f.py")
        rows = diff_rows(text, found)
        lines = text.split("\n")
        for h, (first, last) in zip(found, rows):
            shown = lines[first : last + 1]
            assert all(line[0] in "+-" for line in shown)
            assert [l[1:] + "\n" for l in shown if l[0] == "-"] == A.splitlines(keepends=True)[h.start : h.end]
            assert [l[1:] + "\n" for l in shown if l[0] == "+"] == b.splitlines(keepends=True)[h.new_start : h.new_end]
    assert text.count("@@ ") == 1 and len(rows) == 2
