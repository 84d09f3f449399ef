"""Chat answers with several fenced blocks: the blocks for the file being edited, by path hint."""

from __future__ import annotations

import pytest

from engine.apply import SnippetError, merge, parse_snippet
from engine.apply.fences import excerpts, same_file

APP = "import os\n\n\ndef main():\n    return 0\n"
TWO_FILES = (
    "Change `app.py`:\n\n```python\ndef main():\n    return 1\n```\n\n"
    "And add a test in `tests/test_app.py`:\n\n```python\ndef test_main():\n    assert main() == 1\n```\n"
)


def test_blocks_for_another_file_are_dropped_by_prose_hint():
    code, fenced = excerpts(TWO_FILES, "python", "src/app.py")
    assert fenced and code == [["def main():", "    return 1"]]
    assert merge(APP, TWO_FILES, "python", "app.py").text == APP.replace("return 0", "return 1")


@pytest.mark.parametrize("fence", ["```python title=\"app.py\"", "```app.py", "```py:app.py"])
def test_a_path_in_the_fence_info(fence):
    answer = f"{fence}\ndef main():\n    return 1\n```\n```python title=\"other.py\"\nx = 1\n```\n"
    assert excerpts(answer, "python", "app.py")[0] == [["def main():", "    return 1"]]


def test_a_path_comment_names_the_block_and_is_not_code():
    answer = "```python\n# app.py\ndef main():\n    return 1\n```\n```python\n# other.py\nx = 1\n```\n"
    assert excerpts(answer, "python", "app.py")[0] == [["def main():", "    return 1"]]
    # ... unless the original has that line: then it is context.
    original = "# app.py\n" + APP
    assert excerpts(answer, "python", "app.py", original)[0] == [["# app.py", "def main():", "    return 1"]]


def test_a_block_without_hint_belongs_to_the_file_named_before_it():
    answer = ("In `app.py`:\n```python\nimport os\n```\nand further down:\n```python\ndef main():\n    return 1\n```\n"
              "In `b.py`:\n```python\nx = 1\n```\n")
    assert excerpts(answer, "python", "app.py")[0] == [["import os"], ["def main():", "    return 1"]]


def test_without_a_path_two_files_are_not_plain():
    with pytest.raises(SnippetError, match="several files"):
        parse_snippet(TWO_FILES, "python")


def test_blocks_without_hints_stay_excerpts_of_one_file():
    answer = "```python\ndef main():\n    return 1\n```\nThen:\n```python\nimport sys\n```\n"
    assert len(parse_snippet(answer, "python", path="app.py").segments) == 2


def test_an_unfenced_snippet_labelled_with_its_path():
    snippet = "// src/app.ts\nexport const x = 2;\n"
    assert excerpts(snippet, "typescript", "src/app.ts")[0] == [["export const x = 2;"]]
    assert excerpts(snippet, "typescript", "src/other.ts")[0] == [["// src/app.ts", "export const x = 2;"]]


@pytest.mark.parametrize("opening", ["Sure!", "Done.", "Got it.", "Okay, here:"])
def test_a_short_sentence_before_the_fence_is_prose(opening):
    """Issue 32, item 5: "Sure!" then a fenced block was merged with its fence as code."""
    answer = f"{opening}\n```python\ndef main():\n    return 1\n```\n"
    assert excerpts(answer, "python", "app.py") == ([["def main():", "    return 1"]], True)
    assert merge(APP, answer, "python", "app.py").text == APP.replace("return 0", "return 1")


@pytest.mark.parametrize("hint, path, same", [("app.py", "src/app.py", True), ("src/app.py", "app.py", True),
                                               ("./src/app.py", "src/app.py", True), ("app.py", "src/apps.py", False)])
def test_same_file(hint, path, same):
    assert same_file(hint, path) == same
