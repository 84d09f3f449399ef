"""The cheap limits (limits.py) in `prepare`, the context check from the CI model's tokenizer, safe
diff labels, and apply errors that survive the trip to a merge worker and back (pickling)."""

from __future__ import annotations

import pickle

import pytest

from engine.apply import limits
from engine.apply.diff import diff_label, unified_diff
from engine.apply.errors import (
    ContextTooLongError, EmptySnippetError, FileOverContextError, InputTooLargeError, InvalidUtf8Error,
    MarkerOnlySnippetError, NoMatchError,
)
from engine.apply.pipeline import ApplyRequest, prepare
from engine.loader import registry
from engine.tokenizer import Tokenizer
from tests.apply.conftest import SHAPES_PY

SNIPPET = "    def area(self):\n        return 0\n"


@pytest.fixture(scope="module")
def tokenizer(ci_model_dir):
    return Tokenizer(registry.model_dir("smollm2-135m"))


@pytest.mark.parametrize("field", ["initial_code", "edit_snippet", "instruction"])
@pytest.mark.parametrize("unit", ["bytes", "lines"])
def test_a_text_over_the_limits_is_refused_by_prepare(field, unit):
    small = limits.Limits(max_bytes=1000, max_lines=10)
    text = "x = 1\n" * (11 if unit == "lines" else 200)
    req = ApplyRequest(**{"initial_code": "x = 1\n", "edit_snippet": "x = 2\n", field: text})
    with pytest.raises(InputTooLargeError, match="the limit is 1,000 bytes|the limit is 10 lines") as info:
        limits.check(req, small)
    assert info.value.param == field


def test_prepare_refuses_a_3_mb_file_in_every_mode():
    big = SHAPES_PY * (3_000_000 // len(SHAPES_PY))
    for mode in ("auto", "deterministic", "model"):
        with pytest.raises(InputTooLargeError, match=r"the file is 2,99\d,\d{3} bytes; the limit is 2,097,152 bytes"):
            prepare(ApplyRequest(big, SNIPPET, path="big.py", mode=mode))


def test_a_large_source_file_within_the_limits_merges():
    code = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(3_000))  # 12,000 lines
    plan = prepare(ApplyRequest(code, "def f7(x):\n    return x - 7\n", path="big.py", mode="deterministic"))
    assert plan.merge_status in ("exact", "fuzzy") and "    return x - 7\n" in plan.candidate


@pytest.mark.parametrize("snippet, instruction", [(None, None), ("  \n", None), ("", "   ")])
def test_a_request_with_nothing_to_apply_says_what_to_give(snippet, instruction):
    with pytest.raises(EmptySnippetError, match="give edit_snippet or instruction"):
        prepare(ApplyRequest(SHAPES_PY, snippet, instruction))


def test_limits_come_from_the_environment():
    assert limits.Limits.from_env({"EDITAPPLY_MAX_INPUT_BYTES": "10", "EDITAPPLY_MAX_INPUT_LINES": "3"}) == limits.Limits(10, 3)
    with pytest.raises(ValueError, match="EDITAPPLY_MAX_INPUT_LINES='many'"):
        limits.Limits.from_env({"EDITAPPLY_MAX_INPUT_LINES": "many"})


# ---- the context check: bounds first, the tokenizer only when they cannot decide --------------------

def test_min_tokens_is_a_lower_bound(tokenizer):
    for text in (SHAPES_PY, "=" * 5000, " " * 5000, "é" * 3000, "\n" * 4000):
        assert tokenizer.min_tokens(text) <= len(tokenizer.encode(text))


@pytest.mark.parametrize("size, exact", [(3_000_000, False), (200_000, False), (30_000, True)])
def test_a_file_over_the_context_is_refused(tokenizer, size, exact):
    """3 MB: the bound from the length; 200 KB: a prefix's tokens; 30 KB (under the prefix's
    size): the whole file's tokens, exactly."""
    code = SHAPES_PY * (size // len(SHAPES_PY))
    with pytest.raises(FileOverContextError, match="too large for the model's context") as info:
        limits.check_context(ApplyRequest(code, SNIPPET, mode="model"), tokenizer, 4096)
    tokens = len(tokenizer.encode(code))
    assert info.value.prompt_tokens <= tokens and (info.value.prompt_tokens == tokens) == exact
    assert ("at least" not in str(info.value)) == exact


def test_a_file_that_fits_passes_and_instructions_are_not_checked(tokenizer):
    limits.check_context(ApplyRequest(SHAPES_PY, SNIPPET, mode="model"), tokenizer, 4096)
    limits.check_context(ApplyRequest(SHAPES_PY * 200, None, "Add docstrings", mode="model"), tokenizer, 4096)


# ---- diff labels and errors across processes -------------------------------------------------------

@pytest.mark.parametrize("path, label", [
    ("../../../../etc/passwd", "etc/passwd"), ("/abs/./x.py", "abs/x.py"), ("a\\..\\..\\b.py", "a/b.py"),
    ("evil\0name.py", "evil\\x00name.py"), ("two\nlines.py", "two\\x0alines.py"), ("", "file"), ("..", "file"),
])
def test_diff_labels_are_safe(path, label):
    assert diff_label(path) == label
    assert unified_diff("a\n", "b\n", path).startswith(f"--- a/{label}\n+++ b/{label}\n@@")


@pytest.mark.parametrize("error", [
    EmptySnippetError(), EmptySnippetError(limits.NOTHING_TO_APPLY), MarkerOnlySnippetError(3), NoMatchError("detail"),
    InputTooLargeError("the file", "initial_code", "3 bytes", "2 bytes", "X"), ContextTooLongError(10, 20, 16),
    FileOverContextError(99, 16, exact=False), InvalidUtf8Error("f.py", UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")),
], ids=lambda e: type(e).__name__)
def test_apply_errors_survive_pickling(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error) and copy.__dict__ == error.__dict__
