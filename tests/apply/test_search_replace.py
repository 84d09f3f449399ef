"""Search/replace blocks as the edit (issue 34), in the forms assistants write them: Aider's (a file
name, a fence, several blocks), Cline's (------- SEARCH / +++++++ REPLACE), Roo Code's
(:start_line:); out of order, with whitespace drift; refused, naming the block, when a block
matches nowhere or at several places."""

from __future__ import annotations

import pytest

from engine.apply.pipeline import ApplyRequest, prepare
from engine.apply.run import apply_edit
from engine.apply.search_replace import SearchBlockError, apply_blocks, blocks, looks_like_search_replace

FILE = "import os\n\n\ndef load(path):\n    with open(path) as f:\n        return f.read()\n\n\n" \
       "def save(path, text):\n    with open(path, 'w') as f:\n        f.write(text)\n"


def block(search: str, replace: str, head: str = "<<<<<<< SEARCH", tail: str = ">>>>>>> REPLACE") -> str:
    return f"{head}\n{search}=======\n{replace}{tail}\n"


def apply(answer: str, original: str = FILE, path: str = "io_utils.py") -> str:
    result = apply_edit(None, ApplyRequest(original, answer, path=path, mode="deterministic"))
    assert result.ok and result.stats.kind == "search_replace", result.validation
    return result.merged_code


def test_aider_s_answer_two_blocks_in_a_fence_under_the_file_name_out_of_order():
    answer = ("I'll make both functions take an encoding.\n\nio_utils.py\n```python\n"
              + block("def save(path, text):\n    with open(path, 'w') as f:\n",
                      "def save(path, text, encoding='utf-8'):\n    with open(path, 'w', encoding=encoding) as f:\n")
              + block("def load(path):\n    with open(path) as f:\n",
                      "def load(path, encoding='utf-8'):\n    with open(path, encoding=encoding) as f:\n")
              + "```\n")
    merged = apply(answer)
    assert "def load(path, encoding='utf-8'):\n    with open(path, encoding=encoding) as f:\n" in merged
    assert "def save(path, text, encoding='utf-8'):\n" in merged and merged.startswith("import os\n")


def test_cline_s_form_and_a_block_that_matches_what_another_wrote():
    answer = (block("import os\n", "import os\nimport sys\n", "------- SEARCH", "+++++++ REPLACE")
              + block("import sys\n", "import sys\nimport json\n", "------- SEARCH", "+++++++ REPLACE"))
    assert apply(answer).startswith("import os\nimport sys\nimport json\n\n\ndef load")


@pytest.mark.parametrize("drift", ["trailing spaces", "indentation"])
def test_whitespace_drift_matches_and_the_file_s_indentation_is_kept(drift):
    search = ("        return f.read()   \n" if drift == "trailing spaces" else "    return f.read()\n")
    replace = ("        return f.read().strip()\n" if drift == "trailing spaces" else "    return f.read().strip()\n")
    assert "        return f.read().strip()\n" in apply(block(search, replace))


def test_a_block_for_another_file_is_left_out():
    answer = "io_utils.py\n```python\n" + block("import os\n", "import pathlib\n") + "```\n" \
             "tests/test_io.py\n```python\n" + block("import pytest\n", "import pytest\nimport io\n") + "```\n"
    assert apply(answer).startswith("import pathlib\n")


def test_crlf_and_a_missing_final_newline_are_kept():
    original = FILE.replace("\n", "\r\n").removesuffix("\r\n")
    merged = apply(block("import os\n", "import sys\n"), original)
    assert merged == original.replace("import os", "import sys")


@pytest.mark.parametrize("answer, words", [
    (block("def delete(path):\n", "def remove(path):\n"), "block 1 (SEARCH 'def delete(path):') matches nowhere"),
    (block("        f.write(text)\n", "        f.write(text)\n        f.flush()\n") + block("zzz\n", "yyy\n"),
     "block 2 (SEARCH 'zzz') matches nowhere"),
])
def test_a_block_that_matches_nowhere_is_refused_naming_it(answer, words):
    with pytest.raises(SearchBlockError, match=words.replace("(", r"\(").replace(")", r"\)")):
        prepare(ApplyRequest(FILE, answer, path="io_utils.py"))


def test_a_block_matching_twice_is_refused_unless_its_start_line_names_one():
    twice = "x = 1\nprint(x)\n\nx = 1\nprint(x)\n"
    with pytest.raises(SearchBlockError, match=r"block 1 \(SEARCH 'x = 1'\) matches 2 places \(at lines 1, 4\)"):
        prepare(ApplyRequest(twice, block("x = 1\nprint(x)\n", "x = 2\nprint(x)\n"), path="a.py"))
    roo = "<<<<<<< SEARCH\n:start_line:4\n-------\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n"
    assert apply(roo, twice, "a.py") == "x = 1\nprint(x)\n\nx = 2\nprint(x)\n"


def test_detection_and_what_is_not_a_block():
    assert looks_like_search_replace(block("a\n", "b\n"))
    assert not looks_like_search_replace("<<<<<<< HEAD\nx\n=======\ny\n>>>>>>> branch\n")  # a merge conflict
    with pytest.raises(SearchBlockError, match="no '>>>>>>> REPLACE' line"):
        blocks("<<<<<<< SEARCH\na\n=======\nb\n", None)
    assert apply_blocks("", blocks(block("", "print(1)\n"))) == "print(1)\n"
    with pytest.raises(SearchBlockError, match="empty SEARCH"):
        apply_blocks("x = 1\n", blocks(block("", "print(1)\n")))


def test_start_lines_name_lines_of_the_original_while_blocks_above_add_lines():
    """Roo Code's :start_line: counts in the file as it was: the lines a block above adds move it."""
    twice = "x = 1\nprint(x)\n\nx = 1\nprint(x)\n"
    roo = ("<<<<<<< SEARCH\n:start_line:1\n-------\nx = 1\n=======\n# first\n# more\nx = 1\n>>>>>>> REPLACE\n"
           "<<<<<<< SEARCH\n:start_line:4\n-------\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n")
    assert apply(roo, twice, "a.py") == "# first\n# more\nx = 1\nprint(x)\n\nx = 2\nprint(x)\n"


def test_a_quote_s_context_lines_stay_the_file_s_own_and_whitespace_edits_are_edits():
    """SEARCH quoted without the file's trailing spaces: the context lines REPLACE repeats keep
    them; a line REPLACE re-indents is re-indented."""
    original = "def f():  \n    a = 1\n  b = 2\n"
    answer = block("def f():\n    a = 1\n  b = 2\n", "def f():\n    a = 1\n    b = 2\n")
    assert apply(answer, original, "f.py") == "def f():  \n    a = 1\n    b = 2\n"
