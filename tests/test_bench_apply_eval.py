"""`bench.apply_eval`, the script behind RESULTS' apply-quality tables, on a few dev cases in
deterministic mode: its live table and its `--report` from the JSON it wrote (a GPU run's
figures go through both)."""

from __future__ import annotations

import json

from bench import apply_eval


def test_apply_eval_prints_and_reports_its_tables(tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert apply_eval.main(["--methods", "deterministic", "--limit", "3", "--json", str(out)]) == 0
    live = capsys.readouterr().out
    assert "deterministic" in live and "wrong but valid" in live
    records = json.loads(out.read_text())["records"]
    assert sum(len(r) for r in records.values()) == 6  # 3 cases of each default set
    assert apply_eval.main(["--report", str(out)]) == 0
    report = capsys.readouterr().out
    assert "| deterministic · dev |" in report and "| deterministic · dev_messy |" in report


def test_the_report_keeps_the_split_asked_for(tmp_path, capsys):
    """Two dev cases marked as a train and an eval case: `--split eval` reports one case."""
    cases = [json.loads(line) for line in apply_eval.DEV_SET.read_text().splitlines()[:2]]
    data = tmp_path / "marked.jsonl"
    data.write_text("".join(json.dumps({**c, "split": s}) + "\n" for c, s in zip(cases, ("train", "eval"))))
    out = tmp_path / "eval.json"
    assert apply_eval.main(["--data", str(data), "--json", str(out)]) == 0
    capsys.readouterr()
    assert apply_eval.main(["--report", str(out), "--data", str(data), "--split", "eval"]) == 0
    assert "| deterministic · marked | 1 |" in capsys.readouterr().out
