"""Apply-pipeline eval: how well each method turns (original, snippet) into the expected file.

    python -m bench.apply_eval                       # deterministic merge over dev.jsonl and dev_messy.jsonl
    python -m bench.apply_eval --calibration         # ... and how its confidence separates right from wrong
    python -m bench.apply_eval --json results.json   # also write per-case records and summaries
    python -m bench.apply_eval --show-failures       # list the cases a method got wrong
    python -m bench.apply_eval --methods model-0.5b-draft+pred model-0.5b-rewrite+pred --limit 8 --json m.json
    python -m bench.apply_eval --report m.json other.json   # Markdown tables for RESULTS.md

A *method* is a function `case -> CaseRecord`, registered in `METHODS`; the table has one row per
method. Methods:

* `deterministic` -- the model-free merge alone (`--mode deterministic`);
* `model-<size>-<form>[+pred]` -- the apply pipeline with the model path forced (`mode=model`),
  prompt form `rewrite` or `draft`; `+pred` drafts from the predicted output (the deterministic
  merge) first, without it the lookup drafter reads only the original, the snippet and the prompt.
  Greedy verification is exact, so `+pred` changes speed, never the text;
* `auto-<size>` -- the pipeline's default: the deterministic merge when trusted, else the model.

Model methods fill `extra` with tokens, steps, committed tokens per step (histogram), drafted
and accepted tokens, tokens/s and time to first token. CPU runs are slow: `--limit N` takes an
even spread of N cases over the set sorted by file size (not the N smallest).

Columns: `exact` = results that validate and equal `expected` byte for byte; `refused` = results
that fail validation (or bad input): the user's file is not written; `wrong but valid` = results
that validate but differ from `expected` (the one outcome an apply tool must not have); mean line
similarity (difflib ratio over lines); time per case; for model methods, tokens committed per
verify step and decode tokens/s. `--calibration` prints, per band of the merge's confidence, how
many results were exact, wrong but valid, or refused. Benchmarks print, they never assert.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import difflib
import functools
import json
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table

from engine.apply import validate
from engine.apply.readings import explore
from engine.apply.confidence import HIGH_CONFIDENCE
from engine.apply.errors import ApplyError
from engine.apply.pipeline import ApplyRequest, prepare
from engine.apply.run import apply_edit

DEV_SET = Path(__file__).resolve().parent / "data" / "dev.jsonl"
MESSY_SET = DEV_SET.with_name("dev_messy.jsonl")


@dataclasses.dataclass
class CaseRecord:
    """What one method did on one case."""

    id: str
    language: str
    method: str
    exact: bool
    similarity: float
    status: str  # the method's own outcome (merge status for the deterministic merge)
    success: bool  # whether the method claims its result is right
    validation: list[str]  # names of the validation problems with severity 'error' ([] = ok)
    seconds: float
    confidence: float | None = None
    extra: dict = dataclasses.field(default_factory=dict)


def line_similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a.splitlines(), b.splitlines(), autojunk=False).ratio()


def run_deterministic(case: dict) -> CaseRecord:
    """The pipeline without a model (`--mode deterministic`): the merge, validated."""
    req = ApplyRequest(case["original"], case["update_snippet"], case["instruction"], case["language"], case["path"],
                       mode="deterministic")
    started = time.perf_counter()
    try:
        plan = prepare(req)
        result = apply_edit(None, req, plan=plan)
    except ApplyError as exc:  # refused as bad input (a snippet that matches nowhere)
        return CaseRecord(case["id"], case["language"], "deterministic", False, 0.0, type(exc).__name__, False,
                          [type(exc).__name__], time.perf_counter() - started, 0.0)
    return CaseRecord(
        id=case["id"],
        language=case["language"],
        method="deterministic",
        exact=result.merged_code == case["expected"],
        similarity=line_similarity(result.merged_code, case["expected"]),
        status=plan.merge_status,
        success=result.ok,
        validation=[p.name for p in result.validation.problems if p.severity == "error"],
        seconds=time.perf_counter() - started,
        confidence=plan.confidence,
        extra=_readings(result, case),
    )


def _readings(result, case: dict) -> dict:
    """What a result offers an ambiguous snippet: how many readings, whether the commit's file is
    one of them, and when the model ranked them, its margin and whether its first was right."""
    out = {"readings": len(result.readings),
           "offered": any(r.merged_code == case["expected"] for r in result.readings)}
    ranking = result.stats.ranking
    if ranking is not None:
        out["ranking"] = {**dataclasses.asdict(ranking), "top_right": result.readings[0].merged_code == case["expected"]}
    return out


@functools.lru_cache(maxsize=1)
def engine_for(model: str):
    """One loaded engine at a time (the 1.5B model in fp32 needs ~6 GB on CPU)."""
    from engine.config import EngineConfig
    from engine.engine import LLMEngine
    from engine.service import EngineService

    return EngineService(LLMEngine(EngineConfig.from_env(model=model)))


def run_model(case: dict, model: str, form: str, use_prediction: bool, mode: str = "model") -> CaseRecord:
    """The apply pipeline on the model path (or `auto`), greedy."""
    engine = engine_for(model)
    req = ApplyRequest(case["original"], case["update_snippet"], case["instruction"], case["language"],
                       case["path"], mode=mode, prompt_form=form, use_prediction=use_prediction)
    started = time.perf_counter()
    try:
        result = apply_edit(engine, req)
    except ApplyError as exc:  # refused as bad input
        return CaseRecord(case["id"], case["language"], "", False, 0.0, type(exc).__name__, False,
                          [type(exc).__name__], time.perf_counter() - started, None)
    seconds = time.perf_counter() - started
    s, u = result.stats, result.usage
    return CaseRecord(
        id=case["id"],
        language=case["language"],
        method="",
        exact=result.merged_code == case["expected"],
        similarity=line_similarity(result.merged_code, case["expected"]),
        status=s.finish_reason or s.path,
        success=result.ok,
        validation=[p.name for p in result.validation.problems if p.severity == "error"],
        seconds=seconds,
        confidence=s.merge_confidence,
        # `model_ran`: the model wrote an answer, even where `auto` then returned the merge.
        extra={"path": s.path, "model_ran": u.completion_tokens > 0, "prompt_tokens": u.prompt_tokens, "tokens": u.completion_tokens,
               "steps": s.steps, "hist": s.accepted_per_step_hist, "drafted": s.drafted,
               "accepted": s.accepted, "tokens_per_second": s.tokens_per_second, "ttft_ms": s.ttft_ms,
               "merge_status": s.merge_status, **_readings(result, case),
               # What the model got wrong, for reading (expected -> output).
               "diff_vs_expected": "".join(difflib.unified_diff(case["expected"].splitlines(True),
                                                                result.merged_code.splitlines(True), n=1))[:4000],
               "output": result.merged_code},
    )


METHODS: dict[str, Callable[[dict], CaseRecord]] = {"deterministic": run_deterministic}
for _size in ("0.5b", "1.5b"):
    _model = f"qwen2.5-coder-{_size}"
    for _form in ("rewrite", "draft"):
        METHODS[f"model-{_size}-{_form}"] = functools.partial(run_model, model=_model, form=_form, use_prediction=False)
        METHODS[f"model-{_size}-{_form}+pred"] = functools.partial(run_model, model=_model, form=_form, use_prediction=True)
    METHODS[f"auto-{_size}"] = functools.partial(run_model, model=_model, form=None, use_prediction=True, mode="auto")


def load_cases(path: Path, limit: int | None = None, ids: list[str] | None = None) -> list[dict]:
    """The eval cases; with `limit`, an even spread over the set sorted by file size, in file order."""
    cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if ids:
        cases = [c for c in cases if c["id"] in set(ids)]
    if limit and limit < len(cases):
        by_size = sorted(range(len(cases)), key=lambda i: len(cases[i]["original"]))
        step = len(cases) / limit
        chosen = sorted(by_size[int(k * step + step / 2)] for k in range(limit))
        cases = [cases[i] for i in chosen]
    return cases


def summarize(records: list[CaseRecord]) -> dict:
    times = [r.seconds for r in records]
    model = [r for r in records if r.extra.get("model_ran", r.extra.get("path") == "model") and "steps" in r.extra]
    speed = {}
    if model:
        steps = sum(r.extra["steps"] for r in model)
        committed = sum(int(k) * v for r in model for k, v in r.extra["hist"].items())
        hist: Counter = Counter()
        for r in model:
            hist.update({int(k): v for k, v in r.extra["hist"].items()})
        decode_s = sum(r.extra["tokens"] / r.extra["tokens_per_second"] for r in model if r.extra["tokens_per_second"])
        speed = {
            "model_cases": len(model),
            "tokens": sum(r.extra["tokens"] for r in model),
            "prompt_tokens": sum(r.extra["prompt_tokens"] for r in model),
            "accepted_per_step": committed / max(1, steps),
            "acceptance": sum(r.extra["accepted"] for r in model) / max(1, sum(r.extra["drafted"] for r in model)),
            "tokens_per_second": sum(r.extra["tokens"] for r in model) / decode_s if decode_s else 0.0,
            "ttft_s_mean": statistics.fmean((r.extra["ttft_ms"] or 0) / 1000 for r in model),
            "hist": dict(sorted(hist.items(), reverse=True)),
        }
    ranked = [r.extra["ranking"] for r in records if "ranking" in r.extra]
    return {
        "cases": len(records),
        "ambiguous": sum(r.extra.get("readings", 0) > 1 for r in records),
        "ranked": len(ranked),
        "ranking_s_mean": statistics.fmean(x["seconds"] for x in ranked) if ranked else 0.0,
        "exact": sum(r.exact and r.success for r in records),
        "exact_rate": sum(r.exact and r.success for r in records) / len(records),
        "refused": sum(not r.success for r in records),
        "mean_similarity": statistics.fmean(r.similarity for r in records),
        "wrong_but_valid": sum(r.success and not r.exact for r in records),
        "status": dict(Counter(r.status for r in records).most_common()),
        "validation": dict(Counter(",".join(r.validation) or "ok" for r in records).most_common()),
        "seconds_mean": statistics.fmean(times),
        "seconds_p50": statistics.median(times),
        "seconds_max": max(times),
        **speed,
    }


def machine() -> str:
    return f"{platform.node()} · {platform.machine()} · {platform.processor() or platform.system()} · Python {platform.python_version()}"


def print_table(summaries: dict[str, dict], data: Path, console: Console) -> None:
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    console.print(f"apply eval on {data.name} · {machine()} · {now}")
    table = Table()
    for column in ("method", "cases", "exact", "refused", "wrong but valid", "ambiguous", "ranked", "line sim", "s/case",
                   "max", "tok/step", "tok/s", "ttft s"):
        table.add_column(column, justify="left" if column == "method" else "right", no_wrap=True)
    for name, s in summaries.items():
        speed = [f"{s['accepted_per_step']:.2f}", f"{s['tokens_per_second']:.1f}", f"{s['ttft_s_mean']:.1f}"] \
            if "accepted_per_step" in s else ["-", "-", "-"]
        table.add_row(name, str(s["cases"]), str(s["exact"]), str(s["refused"]), str(s["wrong_but_valid"]),
                      str(s["ambiguous"]), str(s["ranked"]), f"{s['mean_similarity']:.4f}", f"{s['seconds_mean']:.3f}",
                      f"{s['seconds_max']:.3f}", *speed)
    console.print(table)
    outcomes = Table()
    for column in ("method", "status", "validation"):
        outcomes.add_column(column)
    for name, s in summaries.items():
        outcomes.add_row(name, *(" ".join(f"{k}={v}" for k, v in s[key].items()) for key in ("status", "validation")))
    console.print(outcomes)


BANDS = ((1.0, 1.01), (0.95, 1.0), (HIGH_CONFIDENCE, 0.95), (0.7, HIGH_CONFIDENCE), (0.01, 0.7), (0.0, 0.01))
MARGIN_BANDS = ((0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 5.0), (5.0, 10.0), (10.0, float("inf")))


def margin_calibration(records: list[CaseRecord]) -> str:
    """A Markdown table: per band of the ranking's margin (nats between the model's first and
    second reading), how often the first was the commit's file. `ranking.MARGIN` is the bar."""
    from bench.common import table

    ranked = [r.extra["ranking"] for r in records if "ranking" in r.extra]
    rows = []
    for lo, hi in MARGIN_BANDS:
        band = [x for x in ranked if lo <= x["margin"] < hi]
        right = sum(x["top_right"] for x in band)
        rows.append([f"[{lo:g}, {hi:g})", len(band), right, len(band) - right,
                     f"{right / len(band):.0%}" if band else "-"])
    return table(["margin (nats)", "ranked", "first right", "first wrong", "share right"], rows)


def calibration(records: list[CaseRecord]) -> str:
    """A Markdown table: per confidence band, the merges that were exact, wrong but valid, or
    refused. `auto` takes a merge from HIGH_CONFIDENCE up (when it validates)."""
    from bench.common import table

    rows = []
    for lo, hi in BANDS:
        band = [r for r in records if lo <= (r.confidence or 0.0) < hi]
        name = "1.00" if lo == 1.0 else ("0" if hi == 0.01 else f"[{lo:.2f}, {hi:.2f})")
        rows.append([name, len(band), sum(r.exact and r.success for r in band), sum(r.success and not r.exact for r in band),
                     sum(not r.success for r in band)])
    return table(["merge confidence", "cases", "exact", "wrong but valid", "refused"], rows)


def revalidate(record: CaseRecord, case: dict) -> CaseRecord:
    """The record with today's validation of its stored model output (runs made before a check
    existed report it too)."""
    output = record.extra.get("output")
    if output is None or record.extra.get("path") != "model":  # a merge is checked already
        return record
    merged = explore(case["original"], case["update_snippet"], case["language"], case["path"]).result
    found = [p.name for p in validate(case["original"], output, language=case["language"], merge=merged).problems
             if p.severity == "error"]
    names = record.validation + [n for n in found if n not in record.validation]
    return dataclasses.replace(record, validation=names, success=not names)


def markdown_report(paths: list[str], data: list[Path], ids: list[str] | None = None, split: str | None = None) -> str:
    """Markdown tables (for bench/RESULTS.md) from the `--json` files of earlier runs, their
    model outputs re-validated with today's checks. A record set `method · name` is checked
    against the cases of the `--data` file named `name`; `ids` and `split` keep only those cases."""
    from bench.common import histogram_text, table

    sets = {d.stem: {c["id"]: c for c in load_cases(d)} for d in data}
    quality, speed = [], []
    for path in paths:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        for name, recs in payload["records"].items():
            cases = sets[name.split(" · ")[-1]]
            recs = [r for r in recs if (not ids or r["id"] in ids) and (not split or cases[r["id"]].get("split") == split)]
            if not recs:
                continue
            records = [revalidate(CaseRecord(**r), cases[r["id"]]) for r in recs]
            s = summarize(records)
            checks = Counter(n for r in records for n in r.validation)
            s["validation"] = {"ok": sum(not r.validation for r in records), **dict(checks.most_common())}
            quality.append([name, s["cases"], s["exact"], s["refused"], s["wrong_but_valid"], f"{s['mean_similarity']:.3f}",
                            " ".join(f"{k}={v}" for k, v in s["validation"].items()), f"{s['seconds_mean']:.1f}"])
            if "accepted_per_step" in s:
                speed.append([name, s["model_cases"], s["prompt_tokens"], s["tokens"], f"{s['accepted_per_step']:.2f}",
                              f"{s['acceptance']:.1%}", f"{s['tokens_per_second']:.1f}", f"{s['ttft_s_mean']:.1f}",
                              histogram_text(s["hist"])])
    out = table(["method", "cases", "exact", "refused", "wrong but valid", "line sim", "validation", "s/case"], quality)
    if speed:
        out += "\n\n" + table(["method", "model cases", "prompt tok", "output tok", "tok/step", "drafts accepted",
                                "decode tok/s", "ttft s", "committed per step: steps"], speed)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, nargs="+", default=[DEV_SET, MESSY_SET],
                        help="JSONL eval sets (default: the dev set and its chat-style twin)")
    parser.add_argument("--methods", nargs="+", choices=sorted(METHODS), default=["deterministic"])
    parser.add_argument("--limit", type=int, help="N cases spread evenly over the file sizes")
    parser.add_argument("--ids", nargs="+", help="only these case ids")
    parser.add_argument("--json", metavar="PATH", help="write summaries and per-case records ('-' for stdout)")
    parser.add_argument("--show-failures", action="store_true", help="list the cases each method got wrong")
    parser.add_argument("--calibration", action="store_true", help="the merge's confidence against its outcomes")
    parser.add_argument("--split", choices=("train", "eval"), help="only the cases of this split (dev_hard)")
    parser.add_argument("--report", nargs="+", metavar="JSON", help="print Markdown tables from earlier --json files")
    args = parser.parse_args(argv)
    if args.report:
        print(markdown_report(args.report, args.data, args.ids, args.split))
        return 0

    console = Console(stderr=args.json == "-", width=170)
    records: dict[str, list[CaseRecord]] = {}
    for data in args.data:
        cases = [c for c in load_cases(data, args.limit, args.ids) if not args.split or c.get("split") == args.split]
        for name in args.methods:
            key = f"{name} · {data.stem}"
            records[key] = []
            for case in cases:
                record = dataclasses.replace(METHODS[name](case), method=name)
                records[key].append(record)
                if name != "deterministic":
                    console.print(f"[{key}] {record.id}: exact={record.exact} sim={record.similarity:.3f} "
                                  f"validation={record.validation or 'ok'} {record.seconds:.0f} s {record.extra.get('tokens', 0)} tok "
                                  f"{record.extra.get('steps', 0)} steps", markup=False, highlight=False)
                    if args.json and args.json != "-":
                        _write_json(args, records)  # keep what is done so far
        print_table({k: summarize(r) for k, r in records.items() if k.endswith(data.stem)}, data, console)
    if args.calibration:
        merged = [r for k, recs in records.items() if k.startswith("deterministic") for r in recs]
        console.print(f"merge confidence over {', '.join(d.name for d in args.data)}:\n" + calibration(merged),
                      markup=False, highlight=False)
    if any("ranking" in r.extra for recs in records.values() for r in recs):
        console.print("ranking margin against the commit's file:\n" + margin_calibration(
            [r for recs in records.values() for r in recs]), markup=False, highlight=False)
    if args.show_failures:
        for name, recs in records.items():
            for r in recs:
                if not (r.exact and r.success):
                    console.print(f"[{name}] {r.id}: status={r.status} exact={r.exact} similarity={r.similarity:.3f} "
                                  f"validation={r.validation or 'ok'}", markup=False, highlight=False)
    if args.json:
        _write_json(args, records)
    return 0


def _write_json(args, records: dict[str, list[CaseRecord]]) -> None:
    payload = {
        "data": [str(d) for d in args.data],
        "machine": machine(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cases": [r.id for r in next(iter(records.values()), [])],
        "summaries": {name: summarize(recs) for name, recs in records.items() if recs},
        "records": {name: [dataclasses.asdict(r) for r in recs] for name, recs in records.items()},
    }
    text = json.dumps(payload, indent=2)
    if args.json == "-":
        sys.stdout.write(text + "\n")
    else:
        Path(args.json).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
