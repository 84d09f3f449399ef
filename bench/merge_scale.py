"""The deterministic apply's time by file size: does the merge stay linear? (issue 31, item 1)

    python -m bench.merge_scale                               # this tree
    python -m bench.merge_scale --base /tmp/base              # and an older tree, for before/after

Each row is `prepare` + `apply_edit` in deterministic mode (what `editapply apply --no-model`
does after reading the files: snippet parsing, every reading's merge, validation, the diff), in
a fresh process per tree, on three shapes of N lines:

* `repeated, whole file` -- the issue's repro: one 4-line function repeated, the whole file
  written back with one line changed (every line occurs N/4 times: the worst case for a search
  that grows a block from each place of a line);
* `dev file, whole file` -- the largest Python dev-set file repeated, with its names renamed
  per copy, written back whole with a line added in the middle;
* `dev file, edit` -- the same file, with the case's own lazy snippet (markers, a few lines).

A run over `--timeout` seconds is shown as such. Benchmarks print; they never assert.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from bench.common import header, load_dev, table

ROOT = Path(__file__).resolve().parents[1]
SIZES = (1_000, 4_000, 8_000, 16_000, 32_000, 50_000)
# Run in the tree under test: time prepare + apply_edit on the file and snippet given on stdin.
TIMER = """
import json, sys, time
from engine.apply.pipeline import ApplyRequest, prepare
from engine.apply.run import apply_edit
job = json.load(sys.stdin)
req = ApplyRequest(job["text"], job["snippet"], path="big.py", mode="deterministic")
start = time.perf_counter()
result = apply_edit(None, req, plan=prepare(req))
print(json.dumps({"seconds": time.perf_counter() - start, "ok": result.ok,
                  "exact": result.merged_code == job["expected"]}))
"""


def shapes(lines: int) -> list[tuple[str, str, str, str]]:
    """(name, file, snippet, expected) of each shape at `lines` lines."""
    unit = "def f(x):\n    y = x + 1  # padding padding padding\n    return y\n\n"
    text = unit * (lines // 4)
    rows = text.splitlines(keepends=True)
    rows[len(rows) // 2 + 1] = "    y = x + 2\n"
    out = [("repeated, whole file", text, "".join(rows), "".join(rows))]
    case = max((c for c in load_dev() if c["path"].endswith(".py")), key=lambda c: len(c["original"]))
    copies = max(1, lines // case["original"].count("\n"))
    grown = case["original"] + "".join(re.sub(r"\b([a-z_][a-z0-9_]{3,})\b", lambda m: f"{m.group(1)}_{i}",
                                              case["original"]) for i in range(1, copies))
    middle = grown.split("\n")
    whole = "\n".join(middle[: len(middle) // 2] + ["    added = compute(1)"] + middle[len(middle) // 2 :])
    expected_edit = case["expected"] + grown[len(case["original"]) :]
    out.append(("dev file, whole file", grown, whole, whole))
    out.append(("dev file, edit", grown, case["update_snippet"], expected_edit))
    return out


def run(tree: Path, text: str, snippet: str, expected: str, timeout: float) -> str:
    job = json.dumps({"text": text, "snippet": snippet, "expected": expected})
    try:
        done = subprocess.run([sys.executable, "-c", TIMER], input=job, capture_output=True, text=True, cwd=tree,
                              env={"PYTHONPATH": str(tree), "PATH": ""}, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"> {timeout:.0f} s"
    if done.returncode:
        return "error: " + (done.stderr.strip().splitlines() or ["?"])[-1][:60]
    out = json.loads(done.stdout)
    verdict = "exact" if out["exact"] and out["ok"] else "refused" if not out["ok"] else "WRONG"
    return f"{out['seconds']:.2f} s ({verdict})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, help="an older tree to time beside this one")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    trees = [("this tree", ROOT)] + ([(str(args.base), args.base.resolve())] if args.base else [])
    rows = []
    for lines in (int(n) for n in args.sizes.split(",")):
        for name, text, snippet, expected in shapes(lines):
            rows.append([f"{text.count(chr(10)):,}", name] + [run(tree, text, snippet, expected, args.timeout)
                                                              for _, tree in trees])
    print(header("Deterministic apply time by file size (prepare + apply_edit, a fresh process per run)"))
    print(table(["lines", "shape"] + [label for label, _ in trees], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
