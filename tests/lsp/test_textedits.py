"""The minimal line edits the language server sends (lsp_server/textedits.py), without a server."""

from __future__ import annotations

import json
from difflib import SequenceMatcher
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsp_server.textedits import LineEdit, apply_edits, line_edits, split_lsp_lines, units

DEV_SET = Path(__file__).resolve().parents[2] / "bench" / "data" / "dev.jsonl"


def test_one_changed_line_is_one_edit_of_that_line():
    assert line_edits("a\nb\nc\n", "a\nB\nc\n") == [LineEdit((1, 0), (2, 0), "B\n")]


def test_equal_texts_give_no_edits():
    assert line_edits("a\nb\n", "a\nb\n") == []


def test_insertion_is_an_empty_range():
    assert line_edits("a\nc\n", "a\nb\nc\n") == [LineEdit((1, 0), (1, 0), "b\n")]


def test_insertion_at_the_end_goes_before_the_final_line_break():
    """Not at (2, 0), past the last line: Neovim would add an empty line there."""
    assert line_edits("a\nb\n", "a\nb\nc\nd\n") == [LineEdit((1, 1), (1, 1), "\nc\nd")]
    assert line_edits("a\r\n", "a\r\nb\r\n") == [LineEdit((0, 1), (0, 1), "\r\nb")]
    assert line_edits("a\nλ\n", "a\nλ\nb\n", "utf-8") == [LineEdit((1, 2), (1, 2), "\nb")]
    assert apply_edits("a\nb\n", line_edits("a\nb\n", "a\nb\nc\nd\n")) == "a\nb\nc\nd\n"
    # Another line break at the end of the new text: left at the end, where only it is exact.
    assert line_edits("a\n", "a\nb\r\n") == [LineEdit((1, 0), (1, 0), "b\r\n")]


def test_deletion_has_empty_text():
    assert line_edits("a\nb\nc\n", "a\nc\n") == [LineEdit((1, 0), (2, 0), "")]


def test_two_hunks_are_two_edits():
    old = "".join(f"line {i}\n" for i in range(20))
    new = old.replace("line 3\n", "line three\n").replace("line 15\n", "")
    assert line_edits(old, new) == [LineEdit((3, 0), (4, 0), "line three\n"), LineEdit((15, 0), (16, 0), "")]


def test_last_line_without_newline_ends_at_its_last_character():
    # No line follows the last line, so the range ends at its end, counted in UTF-16 units.
    assert line_edits("a\nhé😀", "a\nhé😀 x") == [LineEdit((1, 0), (1, 4), "hé😀 x")]
    assert line_edits("a\nhé😀", "a\nhé😀 x", encoding="utf-8") == [LineEdit((1, 0), (1, 7), "hé😀 x")]


def test_adding_a_final_newline_is_a_change_of_the_last_line():
    assert line_edits("a\nb", "a\nb\n") == [LineEdit((1, 0), (1, 1), "b\n")]


def test_line_endings_are_part_of_a_line():
    assert line_edits("a\r\nb\r\n", "a\r\nb\n") == [LineEdit((1, 0), (2, 0), "b\n")]


def test_lsp_line_breaks_are_crlf_lf_and_lone_cr_only():
    assert split_lsp_lines("a\rb\r\nc\x0cd\u2028e\nf") == ["a\r", "b\r\n", "c\x0cd\u2028e\n", "f"]


def test_units_per_encoding():
    assert (units("é😀", "utf-16"), units("é😀", "utf-8"), units("é😀", "utf-32")) == (3, 6, 2)
    with pytest.raises(ValueError):
        units("x", "latin-1")


def test_dev_set_edits_touch_only_the_changed_lines_and_rebuild_expected():
    """Every dev case: the edits rebuild `expected` exactly, and they replace only the lines a
    full (no-heuristics) line diff removes: nothing unchanged is rewritten."""
    for case in map(json.loads, DEV_SET.read_text(encoding="utf-8").splitlines()):
        old, new = case["original"], case["expected"]
        edits = line_edits(old, new)
        assert apply_edits(old, edits) == new, case["id"]
        opcodes = SequenceMatcher(None, split_lsp_lines(old), split_lsp_lines(new), autojunk=False).get_opcodes()
        removed = sum(i2 - i1 for tag, i1, i2, _, _ in opcodes if tag != "equal")
        replaced = sum(e.end[0] - e.start[0] + (1 if e.end[1] else 0) for e in edits if e.start != e.end)
        assert replaced == removed, case["id"]


lines = st.lists(st.sampled_from(["a", "b", "", "  x = 1", "é😀", "}"]), max_size=12)
eols = st.sampled_from(["\n", "\r\n", "\r"])


@settings(max_examples=300, deadline=None)
@given(lines, lines, eols, st.booleans(), st.booleans())
def test_edits_rebuild_the_new_text(old_lines, new_lines, eol, old_final, new_final):
    old = eol.join(old_lines) + (eol if old_final and old_lines else "")
    new = eol.join(new_lines) + (eol if new_final and new_lines else "")
    for encoding in ("utf-16", "utf-8", "utf-32"):
        assert apply_edits(old, line_edits(old, new, encoding), encoding) == new


def test_docstring_example():
    import doctest

    from lsp_server import textedits

    assert doctest.testmod(textedits).failed == 0
