"""Snippets as chat models write them, applied to real files by the real CLI.

Each kind of mess in `bench/data/dev_messy.jsonl` (reworded or re-indented markers, a leading
marker left out, a context line dropped, fences with and without prose, tabs turned into spaces,
the final newline dropped or a blank line added) on real dev-set files: `editapply apply --write`
must write exactly the commit's bytes, and a snippet whose reading is not plain must leave the
file untouched. The whole messy set runs through `prepare` in-process (fast), with the promise
the issue makes: no wrong result reported valid, in deterministic and in auto mode.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.apply.pipeline import ApplyRequest, prepare
from engine.apply.run import apply_edit
from tests.test_cli import OLD, editapply, snippet_file

MESSY = Path(__file__).resolve().parents[2] / "bench" / "data" / "dev_messy.jsonl"
KINDS = ("marker_wording", "marker_reindent", "drop_context", "omit_leading_marker", "whitespace_drift",
         "code_fence", "code_fence_prose", "trailing_newline_stripped", "trailing_blank_line")


@pytest.fixture(scope="module")
def messy() -> list[dict]:
    return [json.loads(line) for line in MESSY.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_case(tmp_path: Path, case: dict) -> Path:
    path = tmp_path / Path(case["path"]).name
    path.write_bytes(case["original"].encode())
    os.utime(path, ns=(OLD, OLD))
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_written_exactly(tmp_path, messy, kind):
    case = next(c for c in messy if kind in c["perturbations"])
    target = write_case(tmp_path, case)
    run = editapply(str(target), snippet_file(tmp_path, case["update_snippet"]), "--write", "--no-model")
    assert run.returncode == 0, run.stderr.decode()
    assert target.read_bytes() == case["expected"].encode()


def test_a_snippet_with_no_plain_reading_leaves_the_file_untouched(tmp_path, messy):
    # New first lines, no leading marker, code above the anchor: insert, or replace the code
    # above? Not plain, so refused (exit 1) and nothing written.
    case = next(c for c in messy if c["perturbations"] == ["omit_leading_marker"] and c["language"] == "python")
    target = write_case(tmp_path, case)
    snippet = "import this_is_new\n" + case["update_snippet"]
    run = editapply(str(target), snippet_file(tmp_path, snippet), "--write", "--no-model")
    assert run.returncode == 1 and b"ambiguous_reading" in run.stderr
    assert target.read_bytes() == case["original"].encode() and target.stat().st_mtime_ns == OLD


@pytest.mark.parametrize("mode", ["deterministic", "auto"])
def test_no_messy_case_is_wrong_but_valid(messy, mode):
    """Every result either is the commit's bytes or is not valid (or, in auto, goes to the model);
    at least 57 of 60 come out exact without a model."""
    exact = 0
    for case in messy:
        req = ApplyRequest(case["original"], case["update_snippet"], path=case["path"], mode=mode)
        plan = prepare(req)
        if plan.needs_model:
            continue
        result = apply_edit(None, req, plan=plan)
        assert result.merged_code == case["expected"] or not result.ok, (case["id"], plan.reason)
        exact += result.merged_code == case["expected"]
    assert exact >= 57
