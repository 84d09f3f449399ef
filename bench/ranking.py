"""What ranking an ambiguous snippet's readings costs (`engine/apply/ranking.py`).

    python -m bench.ranking                          # qwen2.5-coder-0.5b, the device's dtype
    python -m bench.ranking --model qwen2.5-coder-1.5b --repeats 5
    python -m bench.ranking --sets bench/data/dev.jsonl bench/data/dev_hard.jsonl --scored-tokens 24

The file: the largest dev case between 250 and 350 lines (a "300-line file"). The snippet: its own
snippet with the trailing marker dropped and the last line cut short of the end of its block, so
the merge has two readings (keep the rest of the block, or end it there) -- or, when that is not
ambiguous for this file, the first snippet of the set that is. Each repeat ranks the readings
with a prompt the prefix cache has not seen past the system prompt (a comment with the repeat's
number at the top of the window), so the figure is what a user's first apply of this edit pays;
the prompt and scored tokens are printed beside.

`--sets`: instead, every case of the sets whose readings include the commit's file, ranked once
each: whether the model's first is that file, and by what margin (`--scored-tokens N` scores N
tokens of each answer where the readings part, 0 the whole answers; default the module's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.common import DEV_SET, commit, machine, table
from engine.apply.ranking import MARGIN, rank, rank_prompt
from engine.apply.readings import explore

LINES = (250, 350)


def ambiguous_case(cases: list[dict]) -> tuple[dict, str]:
    """A dev case of about 300 lines and a snippet of it with two or more readings."""
    sized = sorted((c for c in cases if LINES[0] <= c["original"].count("\n") <= LINES[1]),
                   key=lambda c: -c["original"].count("\n"))
    for case in sized:
        for snippet in _variants(case):
            if explore(case["original"], snippet, case["language"], case["path"]).ambiguous:
                return case, snippet
    raise SystemExit("no ambiguous variant of a 250-350 line dev case")


def _variants(case: dict):
    """The case's snippet without its trailing marker, cut after each of its last lines in turn."""
    lines = case["update_snippet"].rstrip("\n").split("\n")
    if "existing code" in lines[-1]:
        lines = lines[:-1]
    for cut in range(len(lines), max(1, len(lines) - 8), -1):
        yield "\n".join(lines[:cut]) + "\n"


def agreement(service, paths: list[str]) -> int:
    """The model's first reading against the commit's file, per case and by margin band."""
    rows, bands = [], {}
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            case = json.loads(line)
            found = explore(case["original"], case["update_snippet"], case["language"], case["path"])
            if not found.ambiguous or case["expected"] not in [r.text for r in found.readings]:
                continue
            ranking = rank(service, found.readings, case["original"], found.result.snippet, case["language"], case["path"])
            right = ranking.scored[0].reading.text == case["expected"]
            band = next(b for b in (2, 5, 10, float("inf")) if ranking.margin < b)
            bands.setdefault(band, [0, 0])[0 if right else 1] += 1
            rows.append([case["id"][:60], ",".join(k.split("@")[0] for k, _ in found.readings[0].choices),
                         f"{ranking.margin:.2f}", "yes" if right else "no"])
    print(table(["case", "decisions", "margin", "first right"], rows))
    print(table(["margin below", "ranked", "first right", "first wrong"],
                [[b, r + w, r, w] for b, (r, w) in sorted(bands.items())]))
    taken = [row for row in rows if float(row[2]) >= MARGIN]
    print(f"first right {sum(r[3] == 'yes' for r in rows)}/{len(rows)}; taken at >= {MARGIN:g} nats: "
          f"{sum(r[3] == 'yes' for r in taken)} right, {sum(r[3] == 'no' for r in taken)} wrong")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sets", nargs="+", help="rank every case of these JSONL sets with several readings")
    parser.add_argument("--scored-tokens", type=int, help="tokens scored where the readings part (0: all)")
    args = parser.parse_args(argv)
    from engine.apply import ranking
    from engine.config import EngineConfig
    from engine.engine import LLMEngine
    from engine.service import EngineService

    if args.scored_tokens is not None:
        ranking.SCORED_TOKENS = args.scored_tokens or 1 << 30
    config = EngineConfig.from_env(model=args.model)
    where = machine(config.torch_device.type)
    if args.sets:
        service = EngineService(LLMEngine(config))
        print(f"ranking against the commit's file · {args.model} · scored tokens {ranking.SCORED_TOKENS} · "
              f"{where} · {time.strftime('%Y-%m-%d')} · commit {commit()}")
        try:
            return agreement(service, args.sets)
        finally:
            service.shutdown()

    cases = [json.loads(line) for line in DEV_SET.read_text(encoding="utf-8").splitlines() if line.strip()]
    case, snippet = ambiguous_case(cases)
    service = EngineService(LLMEngine(config))
    comment = "#" if case["language"] == "python" else "//"
    rows, seconds = [], []
    first = explore(case["original"], snippet, case["language"], case["path"])
    top = rank_prompt(service.tokenizer, first.readings, case["original"], first.result.snippet, case["language"],
                      case["path"]).window[0]
    lines = case["original"].split("\n")
    try:
        for n in range(args.repeats + 1):  # the first run warms the process up, and is not counted
            # A comment at the top of the window: each repeat's prompt is new past the system prompt.
            original = "\n".join(lines[: top + 2] + [f"{comment} run {n}"] + lines[top + 2 :])
            found = explore(original, snippet, case["language"], case["path"])
            started = time.perf_counter()
            ranking = rank(service, found.readings, original, found.result.snippet, case["language"], case["path"])
            if n:
                seconds.append(time.perf_counter() - started)
                rows.append([n, len(found.readings), ranking.prompt_tokens, ranking.scored_tokens,
                             f"{ranking.margin:.2f}", f"{seconds[-1] * 1000:.1f}"])
    finally:
        service.shutdown()
    print(f"ranking cost · {args.model} · {where} · {time.strftime('%Y-%m-%d')} · commit {commit()}")
    print(f"file: {case['id']} ({case['original'].count(chr(10))} lines); margin bar {MARGIN:g} nats")
    print(table(["repeat", "readings", "prompt tokens", "scored tokens", "margin", "ms"], rows))
    print(f"median {statistics.median(seconds) * 1000:.1f} ms, max {max(seconds) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
