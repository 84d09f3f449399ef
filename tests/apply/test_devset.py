"""The deterministic merge over the dev eval set (bench/data/dev.jsonl, 60 real commits).

Two promises: at least 90% of the cases come out byte-identical to `expected`, and no case is
silently wrong -- every result that validates equals `expected`, and an ambiguous one offers it
among its readings. The same must hold
when the snippets are rewritten the way chat models write them (other marker forms, a markdown
fence with prose around it), since held-out cases and real requests are not the dev set.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.apply import merge, validate
from engine.apply.merge import STATUSES
from engine.apply.readings import explore

DEV_MARKER = re.compile(r"^(\s*)(?:#|//) \.\.\. existing code \.\.\.$", re.M)
MESSY = Path(__file__).resolve().parents[2] / "bench" / "data" / "dev_messy.jsonl"

STYLES = {
    "python": ["# ...", "# ... rest of the code unchanged ...", "...", "# (unchanged)"],
    "other": ["// ...", "/* ... */", "// ... rest of the code unchanged ...", "// existing code"],
}


def assert_never_silently_wrong(cases, snippets, minimum_exact: float) -> None:
    """The merge as the pipeline runs it (`readings.explore`): a result that validates equals
    `expected`; an ambiguous one offers `expected` among its readings; a refusal says why."""
    exact, wrong, unoffered = 0, [], []
    for case, snippet in zip(cases, snippets):
        found = explore(case["original"], snippet, case["language"], case["path"])
        result = found.result
        assert result.status in STATUSES and 0.0 <= result.confidence <= 1.0
        if found.validation.ok:
            if result.text == case["expected"]:
                exact += 1
            else:
                wrong.append((case["id"], result.status, [str(p) for p in result.problems]))
        elif found.ambiguous and case["expected"] not in [r.text for r in found.readings]:
            unoffered.append(case["id"])
        else:
            assert found.validation.problems, f"{case['id']}: refused ({result.status}) without saying why"
    assert not wrong, f"validated but wrong: {wrong}"
    assert not unoffered, f"ambiguous, and no reading is the expected file: {unoffered}"
    assert exact / len(cases) >= minimum_exact, f"exact {exact}/{len(cases)}"


def test_dev_set_exact_and_never_silently_wrong(dev_cases):
    assert len(dev_cases) >= 50
    assert_never_silently_wrong(dev_cases, [c["update_snippet"] for c in dev_cases], minimum_exact=0.90)


def restyle(case: dict, k: int) -> str:
    """The case's snippet with its markers in another form, fenced, with prose around it."""
    forms = STYLES["python" if case["language"] == "python" else "other"]
    form = forms[k % len(forms)]
    lines = [
        (m[1] + form) if (m := DEV_MARKER.match(line)) else line
        for line in case["update_snippet"].split("\n")
    ]
    body = "\n".join(lines)
    return f"Here is the updated code for `{case['path']}`:\n\n```{case['language']}\n{body}```\n\nThis {case['instruction'].lower()}.\n"


@pytest.mark.parametrize("style", range(4))
def test_dev_set_in_chat_model_style(dev_cases, style):
    snippets = [restyle(case, style + n) for n, case in enumerate(dev_cases)]
    assert_never_silently_wrong(dev_cases, snippets, minimum_exact=0.90)


def test_dev_set_results_validate(dev_cases):
    """Merged dev results introduce no syntax errors and no copied markers."""
    for case in dev_cases:
        result = merge(case["original"], case["update_snippet"], case["language"])
        names = validate(case["original"], result).names
        assert "parse_errors" not in names and "markers_copied" not in names, (case["id"], names)


def test_dev_set_without_the_final_newline_convention_is_not_counted_as_luck(dev_cases):
    """The cases whose expected file lacks a final newline pass on purpose, not by accident."""
    no_newline = [c for c in dev_cases if not c["expected"].endswith("\n")]
    assert no_newline, "the dev set has such cases"
    for case in no_newline:
        assert case["update_snippet"].endswith("\n")
        assert merge(case["original"], case["update_snippet"], case["language"]).text == case["expected"]


def test_a_doubtful_snippet_is_ambiguous_or_refused_never_guessed(dev_cases):
    """Over the dev snippets, their chat-style twins and a doubtful variant of each (a new first
    line above a snippet without its leading marker, with code above: does it go above the
    anchor, at the top of the file, or replace what is above?), every result that validates is
    exact; for every doubtful variant each place of the new line is a reading, and the variant is
    refused (ambiguous, or no reading validates) unless exactly one reading validates."""
    messy = [json.loads(line) for line in MESSY.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert_never_silently_wrong(dev_cases + messy, [c["update_snippet"] for c in dev_cases + messy], 0.95)
    doubtful = [(c, "import_this_new_line = 1\n" + DEV_MARKER.sub("", c["update_snippet"], count=1).lstrip("\n"))
                for c in dev_cases if c["update_snippet"].lstrip().startswith(("#", "//"))]
    assert len(doubtful) >= 30
    for case, snippet in doubtful:
        found = explore(case["original"], snippet, case["language"], case["path"])
        assert found.runs > 1, case["id"]  # the other places of the new line were tried
        assert found.ambiguous or not found.validation.ok or len(found.readings) == 1, case["id"]


HARD = MESSY.with_name("dev_hard.jsonl")


@pytest.mark.parametrize("name", ["dev", "dev_messy", "dev_hard"])
def test_auto_takes_every_merge_deterministic_mode_would_return(dev_cases, name):
    """`auto` is never worse than the merge alone: wherever deterministic mode returns a result
    that validates, `auto` plans no model and returns the same text; wherever the snippet is
    ambiguous, `auto` ranks exactly the readings deterministic mode would offer (or offers them
    unranked, as deterministic mode does, where the snippet may move code)."""
    from engine.apply.pipeline import ApplyRequest, prepare
    from engine.apply.run import apply_edit

    path = {"dev": None, "dev_messy": MESSY, "dev_hard": HARD}[name]
    cases = dev_cases if path is None else [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for case in cases:
        args = (case["original"], case["update_snippet"], None, case["language"], case["path"])
        sure = apply_edit(None, ApplyRequest(*args, mode="deterministic"))
        plan = prepare(ApplyRequest(*args, mode="auto"))
        if sure.ok:
            assert plan.path == "deterministic" and apply_edit(None, plan.request, plan=plan).merged_code == sure.merged_code
        elif sure.readings:
            moved = any(k.startswith("moved@") for r in plan.readings for k, _ in r.choices)
            assert plan.path == ("deterministic" if moved else "rank")
            assert [r.text for r in plan.readings] == [r.merged_code for r in sure.readings]
