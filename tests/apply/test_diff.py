"""Unified diffs: original -> result checked with unidiff, and a diff applied as the edit."""

from __future__ import annotations

import pytest
import unidiff

from engine.apply import DiffError, apply_unified_diff, merge, unified_diff


@pytest.mark.parametrize(
    "a, b",
    [
        ("a\nb\nc\n", "a\nB\nc\nd\n"),
        ("a\nb\nc", "a\nB\nc"),  # no final newline on either side
        ("a\nb\n", "a\nb"),  # the final newline removed
        ("x\r\ny\r\n", "x\r\nz\r\n"),  # CRLF kept inside the diff lines
        ("x\n", "x\r\n"),  # only the line ending changed
        ("", "new\n"),
        ("old\n", ""),
        ("\tindent\n", "    indent\n"),
        ("héllo\n", "hällo 👋\n"),
    ],
)
def test_round_trip(a, b):
    diff = unified_diff(a, b, "src/f.py")
    assert diff.startswith("--- a/src/f.py\n+++ b/src/f.py\n")
    patch = unidiff.PatchSet(diff)
    assert len(patch) == 1 and patch[0].path == "src/f.py"
    assert apply_unified_diff(a, diff) == b


def test_identical_texts_give_an_empty_diff():
    assert unified_diff("a\n", "a\n") == ""


def test_round_trip_on_dev_results(dev_cases):
    for case in dev_cases[::6]:
        merged = merge(case["original"], case["update_snippet"], case["language"]).text
        diff = unified_diff(case["original"], merged, case["path"])
        patch = unidiff.PatchSet(diff)
        assert patch[0].added > 0 or patch[0].removed > 0
        assert apply_unified_diff(case["original"], diff) == merged


ORIGINAL = "".join(f"line {i}\n" for i in range(1, 61))


def test_hunks_with_shifted_line_numbers_apply_near_the_stated_line():
    # The file grew by 5 lines at the top since the diff was made.
    grown = "".join(f"header {i}\n" for i in range(5)) + ORIGINAL
    diff = "--- a/f\n+++ b/f\n@@ -30,3 +30,3 @@\n line 30\n-line 31\n+LINE 31\n line 32\n@@ -50,2 +50,3 @@\n line 50\n+line 50.5\n line 51\n"
    out = apply_unified_diff(grown, diff)
    assert "line 30\nLINE 31\nline 32\n" in out and "line 50\nline 50.5\nline 51\n" in out
    assert out.count("\n") == grown.count("\n") + 1


def test_nearest_occurrence_wins_for_repeated_context():
    text = "x = 1\ny = 2\n" * 3
    diff = "@@ -3,2 +3,2 @@\n x = 1\n-y = 2\n+y = 20\n"
    assert apply_unified_diff(text, diff) == "x = 1\ny = 2\nx = 1\ny = 20\nx = 1\ny = 2\n"


def test_sloppy_model_diff_without_headers_or_counts_in_a_fence():
    diff = "Here is the patch:\n```diff\n@@ @@\n line 10\n-line 11\n+line eleven\n line 12\n```\n"
    assert apply_unified_diff(ORIGINAL, diff) == ORIGINAL.replace("line 11\n", "line eleven\n")


def test_wrong_hunk_counts_are_recomputed():
    diff = "--- a/f\n+++ b/f\n@@ -10,9 +10,1 @@\n line 10\n-line 11\n+line eleven\n line 12\n"
    assert apply_unified_diff(ORIGINAL, diff) == ORIGINAL.replace("line 11\n", "line eleven\n")


def test_lf_diff_applied_to_a_crlf_file_keeps_crlf():
    crlf = ORIGINAL.replace("\n", "\r\n")
    out = apply_unified_diff(crlf, "@@ -2,2 +2,2 @@\n line 2\n-line 3\n+line three\n")
    assert out == crlf.replace("line 3\r\n", "line three\r\n")


def test_diff_that_does_not_apply():
    with pytest.raises(DiffError, match="hunk 1 .* does not apply"):
        apply_unified_diff(ORIGINAL, "@@ -1,2 +1,2 @@\n no such line\n-line 1\n+x\n")


def test_diff_touching_several_files_needs_a_path():
    diff = "--- a/one.py\n+++ b/one.py\n@@ -1 +1 @@\n-line 1\n+ONE\n--- a/two.py\n+++ b/two.py\n@@ -1 +1 @@\n-line 1\n+TWO\n"
    with pytest.raises(DiffError, match="exactly one file"):
        apply_unified_diff(ORIGINAL, diff)
    assert apply_unified_diff(ORIGINAL, diff, path="two.py").startswith("TWO\n")
