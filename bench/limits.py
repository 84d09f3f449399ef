"""What the input limits (engine/apply/limits.py) are set from, and what they buy (issue 10).

    python -m bench.limits                                  # this tree
    python -m bench.limits --source-root /tmp/base          # also `editapply apply` from an older tree

Prints three tables. The merge's time by file size: the work `prepare` does for a snippet (the
merge, snippet parsing included, then validation), without the limits, on a dev-set Python file
grown to N lines, as unique code (each copy's names renamed) and as repeated code (every snippet
line matches in every copy: the worst case for the candidate search), with the case's own
snippet and with a whole-file snippet (the file with a line added in the middle, no markers).
The model-mode context check (`limits.check_context`) by file size and context, against
tokenizing the file whole. Then `editapply apply FILE SNIPPET` on an oversized file (3 MB of
repeated code by default) in each mode, as a subprocess: exit code, the reason, wall seconds.
Benchmarks print; they never assert.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import header, load_dev, table
from engine.apply.errors import FileOverContextError
from engine.apply.limits import check_context
from engine.apply.merge import merge
from engine.apply.pipeline import ApplyRequest
from engine.apply.validate import validate

ROOT = Path(__file__).resolve().parents[1]
MODES = ("auto", "deterministic", "model")


def grown(text: str, lines: int, unique: bool) -> str:
    copies = max(1, lines // text.count("\n"))
    if not unique:
        return text * copies
    # The first copy keeps its names, so the snippet matches there and only there.
    return text + "".join(re.sub(r"\b([a-z_][a-z0-9_]{3,})\b", lambda m: f"{m.group(1)}_{i}", text)
                          for i in range(1, copies))


def whole_file(text: str) -> str:
    lines = text.split("\n")
    return "\n".join(lines[: len(lines) // 2] + ["    added = compute(1)"] + lines[len(lines) // 2 :])


def merge_times(sizes: list[int]) -> list[list]:
    case = max((c for c in load_dev() if c["path"].endswith(".py")), key=lambda c: len(c["original"]))
    rows = []
    for lines in sizes:
        for unique in (True, False):
            text = grown(case["original"], lines, unique)
            for kind, snippet in (("edit", case["update_snippet"]), ("whole file", whole_file(text))):
                start = time.perf_counter()
                result = merge(text, snippet, "python")
                validate(text, result, language="python")
                rows.append([f"{text.count(chr(10)):,}", f"{len(text.encode()):,}", "unique" if unique else "repeated",
                             kind, result.status, time.perf_counter() - start])
    return rows


def context_times(model: str, sizes: list[int], contexts: list[int]) -> list[list]:
    from engine.loader import registry
    from engine.tokenizer import Tokenizer

    tokenizer = Tokenizer(registry.resolve(model))
    tokenizer.max_token_bytes  # read the vocabulary once, outside the timings
    base = Path(__file__).read_text()
    rows = []
    for size in sizes:
        text = (base * (size // len(base) + 1))[:size]
        start = time.perf_counter()
        whole = len(tokenizer.encode(text))
        encode_ms = (time.perf_counter() - start) * 1000
        for context in contexts:
            start = time.perf_counter()
            try:
                check_context(ApplyRequest(text, "x = 1\n", mode="model"), tokenizer, context)
                verdict = "fits"
            except FileOverContextError as exc:
                verdict = f"refused: {'at least ' if 'at least' in str(exc) else ''}{exc.prompt_tokens} tokens"
            rows.append([f"{size:,}", context, verdict, (time.perf_counter() - start) * 1000, whole, encode_ms])
    return rows


def cli_times(size: int, model: str, root: Path, label: str) -> list[list]:
    case = max(load_dev(), key=lambda c: len(c["original"]))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path, snippet = Path(tmp) / Path(case["path"]).name, Path(tmp) / "edit.snippet"
        path.write_text((case["original"] * (size // len(case["original"]) + 1))[:size])
        snippet.write_text(case["update_snippet"])
        env = {**os.environ, "PYTHONPATH": str(root)}
        for mode in MODES:
            start = time.perf_counter()
            run = subprocess.run([sys.executable, "-m", "engine.cli", "apply", str(path), str(snippet), "--mode", mode,
                                  "--model", model], cwd=root, env=env, capture_output=True, text=True)
            reason = (run.stderr.strip().splitlines() or [""])[-1].removeprefix("editapply: ")
            rows.append([label, mode, run.returncode, reason[:90], time.perf_counter() - start])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", default="12000,25000,50000", help="file sizes for the merge table, in lines")
    parser.add_argument("--oversized-bytes", type=int, default=3_000_000)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--source-root", help="also run `editapply apply` from this tree (e.g. an older commit, unpacked)")
    args = parser.parse_args(argv)
    print(header("Deterministic merge time by file size (merge + validation, one process, no limits)"))
    print(table(["lines", "bytes", "code", "snippet", "merge status", "seconds"], merge_times([int(n) for n in args.lines.split(",")])))
    print()
    print(header(f"The model-mode context check ({args.model}'s tokenizer)"))
    rows = context_times(args.model, [10_000, 100_000, 1_000_000, 3_000_000], [4096, 16384])
    print(table(["file bytes", "context", "check_context", "check ms", "tokens (whole)", "tokenizing whole ms"], rows))
    print()
    print(header(f"`editapply apply` on a {args.oversized_bytes:,}-byte file"))
    rows = cli_times(args.oversized_bytes, args.model, ROOT, "this tree")
    if args.source_root:
        rows += cli_times(args.oversized_bytes, args.model, Path(args.source_root).resolve(), args.source_root)
    print(table(["tree", "mode", "exit", "reason", "seconds"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
