"""Apply-pipeline eval: how well each method turns (original, snippet) into the expected file.

    python -m bench.apply_eval                       # table over bench/data/dev.jsonl
    python -m bench.apply_eval --json results.json   # also write per-case records and summaries
    python -m bench.apply_eval --show-failures       # list the cases a method got wrong

A *method* is a function `case -> CaseRecord`, registered in `METHODS`; the table has one row per
method. Only the deterministic merge is here for now; model-based methods (model only, model with
predicted-output drafting) add their own function and registry entry, and fill `extra` with what
only they have (accepted tokens per step, tokens/s).

Columns: exact-match rate against `expected`; mean line similarity (difflib ratio over lines);
`silent` = results whose status claims success but differ from `expected` (must be 0); merge
status counts; validation outcome counts; time per case. Benchmarks print, they never assert.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import difflib
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

from engine.apply import merge, validate

DEV_SET = Path(__file__).resolve().parent / "data" / "dev.jsonl"


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
    """The model-free merge alone (`--mode deterministic`)."""
    started = time.perf_counter()
    result = merge(case["original"], case["update_snippet"], case["language"])
    check = validate(case["original"], result, language=case["language"])
    seconds = time.perf_counter() - started
    return CaseRecord(
        id=case["id"],
        language=case["language"],
        method="deterministic",
        exact=result.text == case["expected"],
        similarity=line_similarity(result.text, case["expected"]),
        status=result.status,
        success=result.ok,
        validation=[p.name for p in check.problems if p.severity == "error"],
        seconds=seconds,
        confidence=result.confidence,
    )


METHODS: dict[str, Callable[[dict], CaseRecord]] = {"deterministic": run_deterministic}


def load_cases(path: Path, limit: int | None = None) -> list[dict]:
    cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return cases[:limit] if limit else cases


def summarize(records: list[CaseRecord]) -> dict:
    times = [r.seconds for r in records]
    return {
        "cases": len(records),
        "exact_rate": sum(r.exact for r in records) / len(records),
        "mean_similarity": statistics.fmean(r.similarity for r in records),
        "silent_wrong": sum(r.success and not r.exact for r in records),
        "status": dict(Counter(r.status for r in records).most_common()),
        "validation": dict(Counter(",".join(r.validation) or "ok" for r in records).most_common()),
        "seconds_mean": statistics.fmean(times),
        "seconds_p50": statistics.median(times),
        "seconds_max": max(times),
    }


def machine() -> str:
    return f"{platform.node()} · {platform.machine()} · {platform.processor() or platform.system()} · Python {platform.python_version()}"


def print_table(summaries: dict[str, dict], data: Path, console: Console) -> None:
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    console.print(f"apply eval on {data.name} · {machine()} · {now}")
    table = Table()
    for column in ("method", "cases", "exact", "line sim", "silent", "ms/case", "p50", "max"):
        table.add_column(column, justify="left" if column == "method" else "right", no_wrap=True)
    for name, s in summaries.items():
        table.add_row(
            name, str(s["cases"]), f"{s['exact_rate']:.1%}", f"{s['mean_similarity']:.4f}", str(s["silent_wrong"]),
            *(f"{s[k] * 1e3:.1f}" for k in ("seconds_mean", "seconds_p50", "seconds_max")),
        )
    console.print(table)
    outcomes = Table()
    for column in ("method", "status", "validation"):
        outcomes.add_column(column)
    for name, s in summaries.items():
        outcomes.add_row(name, *(" ".join(f"{k}={v}" for k, v in s[key].items()) for key in ("status", "validation")))
    console.print(outcomes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEV_SET, help="JSONL eval set (default: the dev set)")
    parser.add_argument("--methods", nargs="+", choices=sorted(METHODS), default=sorted(METHODS))
    parser.add_argument("--limit", type=int, help="only the first N cases")
    parser.add_argument("--json", metavar="PATH", help="write summaries and per-case records ('-' for stdout)")
    parser.add_argument("--show-failures", action="store_true", help="list the cases each method got wrong")
    args = parser.parse_args(argv)

    cases = load_cases(args.data, args.limit)
    console = Console(stderr=args.json == "-")
    records = {name: [METHODS[name](case) for case in cases] for name in args.methods}
    summaries = {name: summarize(recs) for name, recs in records.items()}
    print_table(summaries, args.data, console)
    if args.show_failures:
        for name, recs in records.items():
            for r in recs:
                if not r.exact:
                    console.print(f"[{name}] {r.id}: status={r.status} similarity={r.similarity:.3f} validation={r.validation or 'ok'}")
    if args.json:
        payload = {
            "data": str(args.data),
            "machine": machine(),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "summaries": summaries,
            "records": {name: [dataclasses.asdict(r) for r in recs] for name, recs in records.items()},
        }
        text = json.dumps(payload, indent=2)
        if args.json == "-":
            sys.stdout.write(text + "\n")
        else:
            Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
