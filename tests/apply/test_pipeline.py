"""The apply pipeline (`apply_edit`): modes and paths, the model path's plumbing, errors, stats.

Two engines: the real CI model (SmolLM2-135M, too weak to merge edits, so its tests assert
behaviour -- which path ran, the stats and usage it reports, truncation, cancellation, what
stays untouched -- never quality), and `EchoEngine`, an Engine-protocol stand-in that "writes"
the predicted output, so that everything around the model (prompt, fence, answer parsing, region
splicing, line endings) is checked exactly on real dev-set files.
"""

from __future__ import annotations

import asyncio
import json

import threading
from types import SimpleNamespace

import pytest

from engine.apply import apply_unified_diff, merge, unified_diff
from engine.apply.errors import (
    ApplyCancelled, ApplyError, BinaryFileError, ContextTooLongError, DiffError, EmptySnippetError,
    MarkerOnlySnippetError, NeedsModelError, NoMatchError,
)
from engine.apply.model_path import build_job, restore_endings, uncertain_window
from engine.apply.pipeline import ApplyRequest, prepare
from engine.apply.run import ApplyStream, apply_edit
from engine.apply.result import ApplyResult, ApplyStats, Progress
from engine.apply.targets import find_region
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.types import Event, GenerationStats
from engine.service import EngineService
from engine.tokenizer import Tokenizer
from prompts.apply import build_apply_prompt, fence_for, parse_answer

AREA_EXACT = '# ... existing code ...\n    def area(self):\n        """Area in square units."""\n        return self.w * self.h\n# ... existing code ...\n'
# The changed line has no exact anchor below it: the merge is `fuzzy`, so `auto` asks the model.
AREA_FUZZY = "# ... existing code ...\n    def area(self):\n        return self.w * self.h * 1\n# ... existing code ...\n"
# The area change, and a method the merge cannot place (nothing in it occurs in the file): the
# model writes the stretch between the placed neighbours.
UNPLACED = AREA_FUZZY + "    def volume_zzz(self, depth):\n        return depth * 0\n# ... existing code ...\n"
RESPONSE_KEYS = {"merged_code", "diff", "validation", "usage", "stats", "readings", "hunks", "candidate"}
USAGE_KEYS = {"prompt_tokens", "completion_tokens", "accepted_prediction_tokens", "rejected_prediction_tokens"}
STATS_KEYS = {"steps", "accepted_per_step", "accepted_per_step_hist", "tokens_per_second", "ttft_ms", "path", "merge_status"}


class EchoEngine:
    """Writes `request.sources['prediction']` back (or `answer(prediction text)`), 16 tokens an
    event, through the Engine protocol; scores every reading alike (a tie: no ranking takes one)."""

    def __init__(self, tokenizer, max_model_len: int = 1 << 16, answer=None):
        self.tokenizer = tokenizer
        self.cfg = SimpleNamespace(max_model_len=max_model_len)
        self.requests = []
        self.answer = answer

    def submit(self, request, loop=None):
        self.requests.append(request)
        return request

    async def astream(self, request):
        for event in self.stream(request):
            yield event

    def stream(self, request):
        if request.score_from is not None:
            yield Event("echo", [], "", True, "stop", GenerationStats(), logprob=0.0)
            return
        ids = request.sources["prediction"]
        if self.answer is not None:
            ids = self.tokenizer.encode(self.answer(self.tokenizer.decode(ids)))
        ids = ids[: request.params.max_tokens]
        for i in range(0, len(ids), 16):
            last = i + 16 >= len(ids)
            stats = GenerationStats(prompt_tokens=len(request.prompt_ids), generated_tokens=min(i + 16, len(ids)),
                                    steps=i // 16, accepted_per_step=16.0, accepted_per_step_hist={16: i // 16},
                                    tokens_per_second=1.0, ttft_ms=1.0)
            yield Event("echo", ids[i : i + 16], "", last, "stop" if last else None, stats)

    def cancel(self, handle):
        pass


@pytest.fixture(scope="module")
def tokenizer(ci_model_dir):
    return Tokenizer(ci_model_dir)


@pytest.fixture(scope="module")
def echo(tokenizer):
    return EchoEngine(tokenizer)


@pytest.fixture(scope="module")
def service(ci_model_dir):
    svc = EngineService(LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=1536, max_num_seqs=2)))
    yield svc
    svc.shutdown()


# ---- modes and paths --------------------------------------------------------------------------

def test_deterministic_mode_is_exact_on_the_dev_set(dev_cases):
    exact = 0
    for c in dev_cases:
        result = apply_edit(None, ApplyRequest(c["original"], c["update_snippet"], c["instruction"], path=c["path"],
                                               mode="deterministic"))
        assert result.path == "deterministic" and result.usage.completion_tokens == 0
        exact += result.merged_code == c["expected"]
        if result.merged_code == c["expected"]:
            assert apply_unified_diff(c["original"], result.diff) == c["expected"]
    assert exact / len(dev_cases) >= 0.9


def test_auto_takes_a_trusted_merge_without_the_model(shapes_py):
    # No engine at all: a trusted merge must not need one.
    result = apply_edit(None, ApplyRequest(shapes_py, AREA_EXACT, path="shapes.py"))
    assert result.path == "deterministic" and result.ok and not result.validation.problems
    assert result.stats.merge_status == "exact" and "Area in square units" in result.merged_code


def test_the_result_s_seconds_count_from_before_the_merge(shapes_py, monkeypatch):
    # `stats.seconds` is the merge's time (issue 31): the plan's clock starts before `explore`.
    import engine.apply.pipeline as pipeline

    seen = []
    explore = pipeline.explore
    monkeypatch.setattr(pipeline, "explore", lambda *a, **k: seen.append(pipeline.time.perf_counter()) or explore(*a, **k))
    plan = prepare(ApplyRequest(shapes_py, AREA_EXACT, path="shapes.py"))
    assert seen and plan.started <= seen[0]


def test_auto_sends_a_snippet_the_merge_cannot_place_to_the_model(shapes_py, service):
    req = ApplyRequest(shapes_py, UNPLACED, path="shapes.py", max_tokens=24)
    plan = prepare(req)
    assert plan.needs_model and plan.merge_status == "partial" and not plan.validation.ok
    result = apply_edit(service, req)
    d = result.as_dict()
    assert set(d) == RESPONSE_KEYS and set(d["usage"]) == USAGE_KEYS and STATS_KEYS <= set(d["stats"])
    s, u = d["stats"], d["usage"]
    assert s["mode"] == "auto" and s["merge_status"] == "partial" and s["prompt_form"] == "draft"
    # Usage and stats agree: every token (but the prefill's, where the prefill samples one) came
    # from a verify step.
    assert u["completion_tokens"] == 24 and s["finish_reason"] == "length"
    committed = sum(int(k) * n for k, n in s["accepted_per_step_hist"].items())
    assert committed in (u["completion_tokens"], u["completion_tokens"] - 1)
    assert sum(s["accepted_per_step_hist"].values()) == s["steps"] > 0
    assert u["accepted_prediction_tokens"] + u["rejected_prediction_tokens"] == s["drafted"]
    assert u["prompt_tokens"] == len(build_job(plan, service.tokenizer, 1536).request.prompt_ids)
    # 24 tokens cannot hold the file, so the model's answer fails validation; `auto` then refuses:
    # the merge it did not trust is no answer either, and it says why.
    assert s["path"] == "model" and not result.ok
    names = [p.name for p in result.validation.problems]
    assert names[0] == "truncated" and names[-1] == "merge_not_trusted"
    assert "merge partial" in result.validation.problems[-1].reason
    assert result.candidate is None  # the partial merge did not validate: nothing to offer


def test_model_mode_always_runs_the_model_and_reports_validation(shapes_py, service):
    result = apply_edit(service, ApplyRequest(shapes_py, AREA_EXACT, path="shapes.py", mode="model", max_tokens=12))
    assert result.path == "model" and result.stats.merge_status == "exact" and result.usage.completion_tokens == 12
    v = result.as_dict()["validation"]
    assert not v["ok"] and v["problems"][0]["name"] == "truncated"  # reported, not hidden
    assert v["ok"] == (not any(p["severity"] == "error" for p in v["problems"]))
    assert {"name", "reason", "severity", "line"} <= set(v["problems"][0])


def test_a_refused_model_file_offers_the_merge_that_validated_for_review(shapes_py, service):
    """Issue 32 item 4: mode model, and the model's file fails validation (12 tokens cannot hold
    the file) where the merge validated: the refusal carries that merge as `candidate`, said to be
    unconfirmed by the model, and still refuses (`merged_code` is the model's text)."""
    req = ApplyRequest(shapes_py, AREA_EXACT, path="shapes.py", mode="model", max_tokens=12)
    result = apply_edit(service, req)
    merge = apply_edit(None, ApplyRequest(shapes_py, AREA_EXACT, path="shapes.py", mode="deterministic"))
    assert not result.ok and result.merged_code != merge.merged_code
    c = result.candidate
    assert c.merged_code == merge.merged_code and c.diff == merge.diff and c.logprob is None
    assert c.label == "the deterministic merge (exact, confidence 1.00) validates, but the model did not confirm it"
    assert ApplyResult.from_dict(result.as_dict()).candidate == c


@pytest.mark.parametrize("form", ["rewrite", "draft"])
def test_both_prompt_forms_predict_the_merge(shapes_py, tokenizer, form):
    plan = prepare(ApplyRequest(shapes_py, AREA_EXACT, path="shapes.py", mode="model", prompt_form=form))
    job = build_job(plan, tokenizer, 4096)
    rendered = tokenizer.decode(job.request.prompt_ids, skip_special=False)
    assert ("<draft>" in rendered) == (form == "draft")
    assert list(job.request.sources) == ["prediction", "original", "snippet"]
    assert tokenizer.decode(job.request.sources["prediction"]) == plan.candidate + "```"
    assert job.request.params.greedy and job.max_tokens > len(job.request.sources["prediction"])


# ---- the model path's plumbing, exactly (EchoEngine) --------------------------------------------

def test_model_path_reproduces_expected_when_the_model_writes_the_merge(dev_cases, echo):
    """Prompt, fence, answer parsing and final-newline handling over every dev file (some have no
    final newline)."""
    for c in dev_cases:
        result = apply_edit(echo, ApplyRequest(c["original"], c["update_snippet"], c["instruction"], path=c["path"], mode="model"))
        assert result.path == "model" and result.stats.finish_reason == "stop"
        assert result.merged_code == prepare(ApplyRequest(c["original"], c["update_snippet"], path=c["path"])).candidate, c["id"]
        assert result.validation.ok or c["id"] == "encode/httpx@e51b2125c9:noxfile.py", (c["id"], result.validation.names)


@pytest.mark.parametrize("damage, problem", [
    ("drop the head", "untouched_lines_changed"),
    ("drop the tail", "untouched_lines_changed"),
    ("touch a line", "untouched_lines_changed"),
    ("ignore the snippet", "snippet_lines_missing"),
])
def test_a_model_that_strays_from_the_merge_fails_validation(shapes_py, tokenizer, damage, problem):
    def answer(prediction: str) -> str:
        lines = prediction.split("\n")
        if damage == "drop the head":
            return "\n".join(lines[2:])
        if damage == "drop the tail":
            return "\n".join(lines[:-4] + lines[-1:])  # keeps the closing fence
        if damage == "touch a line":
            return prediction.replace("print(s.area())", "print(s.area(), flush=True)")
        return prediction.replace('        """Area in square units."""\n', "")  # the original's copy bias

    req = ApplyRequest(shapes_py, AREA_EXACT, path="shapes.py", mode="model")
    result = apply_edit(EchoEngine(tokenizer, answer=answer), req)
    assert not result.ok and problem in [p.name for p in result.validation.problems if p.severity == "error"]


CALCULATOR_JS = """class Calculator {
  constructor() {
    this.result = 0;
  }

  add(number) {
    this.result += number;
    return this;
  }

  divide(number) {
    this.result /= number;
    return this;
  }
}
"""


def test_a_model_that_drops_an_untouched_line_is_refused_whatever_the_merge(tokenizer):
    """The check runs on every model result, also when the merge was not exact: here the snippet
    only half-places (a new method the merge cannot put anywhere for sure), so the model writes
    the stretch from `divide` to the end, and it drops `divide`'s `return this;`, which the
    snippet elides. `add`, outside that stretch, is copied: the model never sees it."""
    snippet = ("  constructor() {\n    this.result = 1;\n  }\n// ... existing code ...\n  divide(number) {\n"
               "    if (number === 0) throw new Error('zero');\n    this.result /= number;\n// ... existing code ...\n"
               "  reset() {\n    globalThis.counter = 42;\n  }\n// ...\n")
    plan = prepare(ApplyRequest(CALCULATOR_JS, snippet, path="calc.js", mode="model"))
    assert plan.merge_status == "ambiguous" and uncertain_window(plan.merge, 16) == (9, 16)

    def answer(prediction: str) -> str:
        assert "add(number)" not in prediction
        return prediction.replace("    this.result /= number;\n    return this;\n", "    this.result /= number;\n", 1)

    result = apply_edit(EchoEngine(tokenizer, answer=answer), ApplyRequest(CALCULATOR_JS, snippet, path="calc.js", mode="model"))
    assert not result.ok and "unexplained_change" in result.validation.names
    assert "return this;" in result.merged_code.split("add(number)")[1].split("divide")[0]


@pytest.mark.parametrize("path", ["notes.txt", None])
def test_an_edit_the_model_drops_is_never_a_success(tokenizer, path):
    """An empty file of no known language, in model mode: a model that writes nothing has not
    applied the edit, so the result is refused (the snippet's lines are not in it)."""
    req = ApplyRequest("", "first line\nsecond line\n", path=path, mode="model")
    result = apply_edit(EchoEngine(tokenizer, answer=lambda prediction: "```"), req)
    assert not result.ok and "snippet_lines_missing" in result.validation.names


def test_auto_without_an_engine_refuses_an_unplaced_snippet(shapes_py):
    result = apply_edit(None, ApplyRequest(shapes_py, UNPLACED, path="shapes.py"))
    assert result.path == "deterministic" and not result.ok
    assert "model_unavailable" in result.validation.names


def test_the_model_rewrites_only_a_window_around_what_the_merge_doubts(dev_cases, tokenizer):
    """A segment the merge cannot place between two it can: the model sees (and writes) only the
    stretch between those neighbours; the rest of the file is the merge's text, byte for byte."""
    case = next(c for c in dev_cases if c["id"].startswith("koajs/koa@4f968298f9"))
    parts = case["update_snippet"].split("// ... existing code ...")
    snippet = "// ... existing code ...".join(parts[:2] + ["\nzzz_not_here(1, 2, 3);\n"] + parts[2:])
    req = ApplyRequest(case["original"], snippet, path=case["path"], mode="model")
    plan = prepare(req)
    assert plan.merge_status == "partial"
    engine = EchoEngine(tokenizer, answer=lambda prediction: "zzz_not_here(1, 2, 3);\n" + prediction)
    result = apply_edit(engine, req, plan=plan)
    prompt = tokenizer.decode(engine.requests[-1].prompt_ids)
    shown = prompt.split("<code>\n")[1].split("</code>")[0]
    assert shown in case["original"] and len(shown) < len(case["original"]) / 4
    head = plan.candidate.split("\n")[:9]
    assert result.merged_code.split("\n")[:9] == head and "zzz_not_here(1, 2, 3);" in result.merged_code
    assert result.validation.ok, result.validation.names


def test_crlf_files_come_back_crlf(dev_cases, echo):
    for c in dev_cases[:12]:
        original, expected = c["original"].replace("\n", "\r\n"), c["expected"].replace("\n", "\r\n")
        result = apply_edit(echo, ApplyRequest(original, c["update_snippet"], path=c["path"], mode="model"))
        prompt_text = echo.tokenizer.decode(echo.requests[-1].prompt_ids)
        assert "\r" not in prompt_text  # the model sees LF only
        assert result.merged_code == expected, c["id"]


def test_mixed_line_endings_keep_each_unchanged_line_ending():
    original = "a = 1\r\nb = 2\nc = 3\r\n"
    assert restore_endings(original, "a = 1\nb = 2\nx = 0\nc = 3\n") == "a = 1\r\nb = 2\nx = 0\r\nc = 3\r\n"
    assert restore_endings("a\nb", "a\nb\nc") == "a\nb\nc"


def test_a_file_with_fence_lines_gets_a_longer_fence(echo):
    original = 'def doc():\n    """Example:\n\n    ```python\n    doc()\n    ```\n    """\n    return 1\n'
    snippet = "def doc():\n    # ... existing code ...\n    return 2\n"
    assert fence_for(original) == "````"
    result = apply_edit(echo, ApplyRequest(original, snippet, path="doc.py", mode="model"))
    assert result.merged_code == original.replace("return 1", "return 2")
    assert parse_answer("x\n```\ny\n", "a\n") == "x\n"


def test_instruction_only_rewrites_the_named_definition_and_splices_it_back(shapes_py, echo):
    region = find_region(shapes_py, "Add type hints to main", "python")
    assert region is not None and region.names == ("main",)
    result = apply_edit(echo, ApplyRequest(shapes_py, None, "Add type hints to main", path="shapes.py"))
    assert result.path == "model" and result.stats.kind == "instruction" and "main" in result.stats.reason
    prompt_text = echo.tokenizer.decode(echo.requests[-1].prompt_ids)
    assert "def main(argv):" in prompt_text and "def perimeter" not in prompt_text  # only the region is sent
    assert result.merged_code == shapes_py


def test_instruction_only_splice_keeps_the_rest_byte_identical(shapes_py, service):
    """The real model rewrites `main`; whatever it writes, the lines outside it are untouched."""
    result = apply_edit(service, ApplyRequest(shapes_py, "", "Make main return 1", path="shapes.py", max_tokens=40))
    assert result.stats.kind == "instruction" and result.path == "model"
    lines = shapes_py.splitlines(keepends=True)
    head, tail = "".join(lines[:18]), "".join(lines[22:])
    assert result.merged_code.startswith(head) and result.merged_code.endswith(tail)


def test_instruction_without_a_target_rewrites_the_whole_file(shapes_py):
    assert find_region(shapes_py, "Sort the imports", "python") is None
    assert prepare(ApplyRequest(shapes_py, None, "Sort the imports", path="shapes.py")).region is None


def test_a_unified_diff_is_applied_as_the_edit(dev_cases):
    c = dev_cases[0]
    diff = unified_diff(c["original"], c["expected"], c["path"])
    result = apply_edit(None, ApplyRequest(c["original"], diff, path=c["path"]))
    assert result.path == "deterministic" and result.stats.merge_status == "diff"
    assert result.merged_code == c["expected"]
    with pytest.raises(DiffError):
        apply_edit(None, ApplyRequest(c["original"], "--- a/x\n+++ b/x\n@@ -1,1 +1,1 @@\n-nope\n+yes\n", mode="deterministic"))


# ---- limits, errors, cancellation -----------------------------------------------------------------

def test_a_file_over_the_context_fails_before_generating(dev_cases, service):
    """A snippet the merge places nowhere: the model would write the whole file, which does not fit."""
    big = max(dev_cases, key=lambda c: len(c["original"]))
    steps = service.steps
    nowhere = "# ... existing code ...\nzzz_not_here(1, 2, 3)\n# ... existing code ...\n"
    with pytest.raises(ContextTooLongError, match="too large for the model's context"):
        apply_edit(service, ApplyRequest(big["original"], nowhere, path=big["path"], mode="model"))
    assert service.steps == steps


@pytest.mark.parametrize("req, error", [
    (dict(edit_snippet=""), EmptySnippetError),
    (dict(edit_snippet="  \n"), EmptySnippetError),
    (dict(edit_snippet="# ... existing code ...\n"), MarkerOnlySnippetError),
    (dict(edit_snippet="# ... existing code ...\nzzz = 1\n# ... existing code ...\n", mode="deterministic"), NoMatchError),
    (dict(edit_snippet=None, instruction="Make main return 1", mode="deterministic"), NeedsModelError),
    (dict(edit_snippet="x = 1\0\n"), BinaryFileError),
    (dict(edit_snippet="x = 1\n", mode="fast"), ApplyError),
    (dict(edit_snippet="x = 1\n", prompt_form="essay"), ApplyError),
    (dict(edit_snippet="x = 1\n", language="klingon"), ApplyError),
])
def test_bad_input_raises_a_specific_error(shapes_py, req, error):
    with pytest.raises(error):
        apply_edit(None, ApplyRequest(shapes_py, path="shapes.py", **req))


NOWHERE = "zzz = qqq(1)\n"


@pytest.mark.parametrize("snippet", [
    f"# ... existing code ...\n{NOWHERE}# ... existing code ...\n",
    f"# ... existing code ...\n{NOWHERE}# ... existing code ...\nyyy = www(2)\n",
    f"{NOWHERE}# ... existing code ...\nyyy = www(2)\n# ... existing code ...\n",
    f"# ... existing code ...\n{NOWHERE}# ... existing code ...\nyyy = www(2)\n# ... existing code ...\n",
], ids=["one segment", "two, the last at the open end", "two, the first at the open top", "two between markers"])
def test_a_snippet_matching_nowhere_is_no_match_however_many_segments(shapes_py, snippet):
    """Issue 31, item 11: one segment or two, a snippet none of whose lines occurs in the file is
    the same answer (no_match), not a partial merge for two and a refusal for one."""
    with pytest.raises(NoMatchError, match="matches nowhere"):
        apply_edit(None, ApplyRequest(shapes_py, snippet, path="shapes.py", mode="deterministic"))


def test_a_snippet_with_one_matching_segment_is_still_merged_partially(shapes_py):
    snippet = AREA_EXACT + NOWHERE + "# ... existing code ...\n"
    result = apply_edit(None, ApplyRequest(shapes_py, snippet, path="shapes.py", mode="deterministic"))
    assert result.stats.merge_status == "partial" and not result.ok


def test_a_snippet_starting_with_a_byte_order_mark_merges_as_without_it(shapes_py):
    """Issue 31, item 12: the BOM is not code; the first marker stays a marker."""
    plain = apply_edit(None, ApplyRequest(shapes_py, AREA_EXACT, path="shapes.py", mode="deterministic"))
    bom = apply_edit(None, ApplyRequest(shapes_py, "\ufeff" + AREA_EXACT, path="shapes.py", mode="deterministic"))
    assert bom.ok and bom.merged_code == plain.merged_code and "\ufeff" not in bom.merged_code


def test_model_mode_without_an_engine_is_refused(shapes_py):
    with pytest.raises(NeedsModelError):
        apply_edit(None, ApplyRequest(shapes_py, AREA_EXACT, path="shapes.py", mode="model"))


def test_cancel_event_stops_the_generation_and_frees_its_blocks(shapes_py, service):
    free = service.engine.kv.allocator.num_free
    cancel, seen = threading.Event(), []

    def on_progress(p: Progress):
        seen.append(p)
        cancel.set()

    with pytest.raises(ApplyCancelled):
        apply_edit(service, ApplyRequest(shapes_py, UNPLACED, path="shapes.py", max_tokens=200), on_progress, cancel)
    assert len(seen) == 1
    wait_until(lambda: service.engine.kv.allocator.num_free == free and not service.engine.running)


def test_closing_the_stream_cancels_the_generation(shapes_py, service):
    free = service.engine.kv.allocator.num_free

    async def first_then_close():
        stream = aiter(ApplyStream(service, ApplyRequest(shapes_py, UNPLACED, path="shapes.py", max_tokens=200)))
        first = await anext(stream)
        await stream.aclose()
        return first

    first = asyncio.run(first_then_close())
    assert isinstance(first, Progress) and first.tokens >= 1
    wait_until(lambda: service.engine.kv.allocator.num_free == free and not service.engine.running)


def wait_until(condition, timeout: float = 30.0) -> None:
    import time

    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_request_and_result_round_trip_as_json(shapes_py):
    req = ApplyRequest(shapes_py, AREA_EXACT, path="shapes.py", mode="deterministic")
    assert ApplyRequest.from_dict({**req.as_dict(), "stream": False}) == req
    assert req.as_dict().keys() == {"initial_code", "edit_snippet", "path", "mode"}
    result = apply_edit(None, req)
    assert ApplyResult.from_dict(result.as_dict()).as_dict() == result.as_dict()
    with pytest.raises(ApplyError):
        ApplyRequest.from_dict({"edit_snippet": "x"})
    stats = ApplyStats("model", "r", "model", "python", "snippet", "exact", 1.0, steps=4,
                       accepted_per_step_hist={16: 3, 2: 1})
    assert ApplyStats.from_dict(json.loads(json.dumps(stats.as_dict()))) == stats  # int keys again


def test_draft_form_without_a_draft_falls_back_to_rewrite(shapes_py):
    prompt = build_apply_prompt(shapes_py, AREA_EXACT, form="draft", draft=None)
    assert prompt.form == "rewrite"


@pytest.mark.parametrize("damage, problem", [
    ("re-indent the sure segment", "sure_lines_changed"),
    ("delete an unshown line", "unexplained_change"),
    ("rewrite a line", "unexplained_change"),
])
def test_a_model_result_is_held_to_what_the_merge_is_sure_of_and_to_the_snippet(shapes_py, tokenizer, damage, problem):
    """On `auto`'s model path (the merge could not place part of the snippet), the model writes
    the stretch around what it could not place, and within it may not re-indent what the merge
    placed with full confidence, delete a line the snippet does not frame, or rewrite a line into
    one the snippet lacks (EchoEngine writes the damaged merge)."""
    snippet = AREA_EXACT + "def nowhere_yet():\n    pass\n# ... existing code ...\n"

    def answer(prediction: str) -> str:
        if damage == "re-indent the sure segment":
            return prediction.replace('        """Area in square units."""', '    """Area in square units."""')
        if damage == "delete an unshown line":
            return prediction.replace("    print(s.area())\n", "")
        return prediction.replace("    s = Shape(1, 2)\n", "    s = Shape(2, 2)\n")

    req = ApplyRequest(shapes_py, snippet, path="shapes.py")
    assert prepare(req).needs_model
    result = apply_edit(EchoEngine(tokenizer, answer=answer), req)
    assert not result.ok and problem in result.validation.names, result.validation.names


def test_a_run_cancelled_before_its_first_token_submits_nothing(shapes_py, tokenizer):
    """`ApplyStream.cancel()` before the engine took the request (the language server's cancel
    button during the merge): the iteration raises ApplyCancelled and nothing reaches the engine."""
    engine = EchoEngine(tokenizer)
    run = ApplyStream(engine, ApplyRequest(shapes_py, AREA_EXACT, path="shapes.py", mode="model"))
    run.cancel()

    async def drain():
        async for _ in run:
            pass

    with pytest.raises(ApplyCancelled):
        asyncio.run(drain())
    assert engine.requests == []


def test_lines_inserted_at_a_window_s_edges_are_inside_it():
    """The model writes a window's merged lines: one inserted at the window's first line (here the
    top of an empty file) is among them, not copied in the head where the model cannot see it."""
    from engine.apply.merge import merge
    from engine.apply.model_path import _split_window

    m = merge("", "first\nsecond\n", "python")
    assert (m.merged_line(0), m.merged_line(0, after_inserts=False)) == (2, 0)
    assert _split_window("", m.text, m, (0, 0)) == ("", "", "first\nsecond\n", "", [0])
