"""Fuzzing the deterministic merge with lazy snippets written as chat models write them.

    python -m bench.fuzz_merge [--cases 4000] [--seeds 1 2 3] [--languages python javascript go]

The files are Python, JavaScript or Go functions (Python's in a class 40% of the time, a fifth of
them decorated; Go's bodies indented with tabs) whose bodies often repeat an earlier function's
lines (copy-pasted code), with blank lines between them. A snippet shows windows of the file,
each starting and ending on a line found once in it (context that says where it is), with body
statements changed, deleted or added inside, an import added, a comment written above a
function, or a new function after one; one marker stands between windows, written in one of
several wordings. Chat style on top: a blank line written next to a marker where the original
has one at that join, a window's first line a changed signature (`f(x)` -> `f(x, y)`), and the
code inside a fenced block with prose around it. The expected file is the original with those
edits. Each case runs through the deterministic pipeline: `exact` (valid, the expected file),
`refused` (not valid, or refused as bad input) or `WRONG` (valid, another file). The generator is
also tests/apply/test_merge_chat_properties.py's, under hypothesis. Benchmarks print; they never
assert.
"""

from __future__ import annotations

import argparse
import random

from bench.apply_eval import run_deterministic
from bench.common import header, table

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
MARKERS = {
    "python": ["# ... existing code ...", "# ... rest of the code ...", "# existing code", "    # ... existing code ...",
               "# ... unchanged ..."],
    "javascript": ["// ... existing code ...", "// ... rest of the code ...", "  // ...", "// existing code"],
    "go": ["// ... existing code ...", "// ... rest of the code ...", "\t// ...", "// existing code"],
}
IMPORTS = {"python": ["import os", "import sys"], "javascript": ["const os = require('os');", "const fs = require('fs');"],
           "go": ["package main", "", 'import "os"']}
ADDED_IMPORT = {"python": "import json", "javascript": "const path = require('path');", "go": 'import "fmt"'}
COMMENT = {"python": "#", "javascript": "//", "go": "//"}
EXTENSIONS = {"python": "py", "javascript": "js", "go": "go"}
HEADERS = ("def ", "function ", "func ")


def source(rng: random.Random, language: str) -> list[str]:
    """Imports, then 2-7 functions (in Python, 40% of the time a class's methods, a fifth of them
    decorated); 40% of bodies copy an earlier one's."""
    js, go = language == "javascript", language == "go"
    end = ";" if js else ""
    pad = "\t" if go else "    "
    lines: list[str] = []
    if go or rng.random() < 0.7:
        lines += IMPORTS[language] + [""]
    bodies: list[list[str]] = []
    n = rng.randint(2, 7)
    in_class = language == "python" and rng.random() < 0.4
    if in_class:
        lines.append("class Service:")
    for f in range(n):
        name = f"{rng.choice(WORDS)}_{f}"
        header = {"javascript": f"function {name}(x) {{", "go": f"func {name}(x int) int {{"}.get(language, f"def {name}(x):")
        if bodies and rng.random() < 0.4:
            body = list(rng.choice(bodies))
        else:
            body = []
            for s in range(rng.randint(1, 5)):
                kind = rng.random()
                if kind < 0.15:
                    body.append("")
                elif kind < 0.3:
                    body.append(f"{pad}return {'null' if js else 'x' if go else 'None'}{end}")
                elif kind < 0.4:
                    body.append(f"{pad}x += 1{end}")
                elif (js or go) and kind < 0.5:
                    call = f"compute({rng.choice(WORDS)}, x){end}"
                    body += [f"{pad}if x > {s} {{" if go else f"{pad}if (x > {s}) {{", f"{pad * 2}x = {call}", f"{pad}}}"]
                else:
                    body.append(f"{pad}v_{f}_{s} {':=' if go else '='} compute({rng.choice(WORDS)}, {s}){end}")
            bodies.append(body)
        decorator = ["@cached"] if in_class and rng.random() < 0.2 else []
        function = decorator + [header] + body + [f"{pad}return {'x' if go else rng.choice(WORDS)}{end}"] + (
            [] if language == "python" else ["}"])
        lines += [("    " + line if line else line) for line in function] if in_class else function
        if f < n - 1:
            lines += ["", ""] if language == "python" and rng.random() < 0.5 else [""]
    return lines


def statement(line: str) -> bool:
    """A body line an edit may change, delete or follow with a new one: not a header, a brace or a
    blank."""
    return (line.startswith(("    ", "\t")) and any(ch.isalnum() for ch in line)
            and not any(ch in line for ch in "{}@") and not line.rstrip().endswith(":")
            and not line.lstrip().startswith(HEADERS + ("class ",)))


def chat_case(rng: random.Random, language: str) -> tuple[str, str, str]:
    """(original, snippet, expected) texts: one case drawn with `rng`."""
    js = language == "javascript"
    end = ";" if js else ""
    original = source(rng, language)
    n = len(original)
    solid = [i for i, line in enumerate(original) if line.strip() and original.count(line) == 1]
    k = rng.randint(1, 3)
    if len(solid) < 2 * k:
        k = len(solid) // 2
    cuts = sorted(rng.sample(solid, 2 * k)) if k else [0, n - 1]
    windows = [(cuts[i], cuts[i + 1] + 1) for i in range(0, len(cuts) - 1, 2)]
    marker = rng.choice(MARKERS[language])
    snippet: list[str] = []
    expected: list[str] = []
    cursor, fresh = 0, 0
    for start, stop in windows:
        expected += original[cursor:start]
        if start > 0:
            snippet.append(marker)
            if not original[start - 1] and rng.random() < 0.5:
                snippet.append("")  # the blank line the original has at this join
        for i in range(start, stop):
            line = original[i]
            if i == start and line.lstrip().startswith(HEADERS) and rng.random() < 0.3:
                action = "signature"
            elif (i != start and line.lstrip().startswith(HEADERS) and not original[i - 1].lstrip().startswith("@")
                  and rng.random() < 0.2):
                action = "comment"
            elif line.startswith(("import ", "const ")) and i != stop - 1 and rng.random() < 0.3:
                action = "import"
            elif (language == "python" and line.lstrip().startswith("return ") and i != stop - 1
                  and next((later for later in original[i + 1 :] if later.strip()), "def").lstrip().startswith("def ")
                  and rng.random() < 0.3):
                action = "function"
            elif i in (start, stop - 1) or not statement(line):
                action = "keep"
            else:
                action = rng.choice(["keep", "keep", "keep", "change", "delete", "insert"])
                if action == "delete" and line.lstrip().startswith("return "):
                    action = "keep"  # a body is never left empty: the expected file must compile
            indent = line[: len(line) - len(line.lstrip())]
            if action == "signature":
                snippet.append(line.replace("(x)", "(x, y)").replace("(x int)", "(x int, y int)"))
                expected.append(snippet[-1])
            elif action == "comment":  # a comment written above a function header
                snippet += [f"{indent}{COMMENT[language]} {line.split('(')[0].split()[-1]}: note {fresh}", line]
                expected += snippet[-2:]
                fresh += 1
            elif action == "keep":
                snippet.append(line)
                expected.append(line)
            elif action == "change":
                snippet.append(f"{indent}changed_{fresh} = {rng.choice(WORDS)}(){end}")
                expected.append(snippet[-1])
                fresh += 1
            elif action == "function":  # a new one after the function this return ends
                snippet += [line, "", f"{indent[:-4]}def added_{fresh}(x):", f"{indent}return {fresh}"]
                expected += snippet[-4:]
                fresh += 1
            elif action == "import":
                snippet += [line, ADDED_IMPORT[language]]
                expected += snippet[-2:]
            elif action == "insert":
                snippet += [line, f"{indent}inserted_{fresh}(){end}"]
                expected += snippet[-2:]
                fresh += 1
        cursor = stop
        if stop < n and not original[stop] and rng.random() < 0.5:
            snippet.append("")  # the blank line the original has at this join
    expected += original[cursor:]
    if cursor < n:
        snippet.append(marker)
    text = lambda lines: "".join(line + "\n" for line in lines)
    code = text(snippet)
    if rng.random() < 0.5:
        code = f"Here is the updated code:\n\n```{language}\n{code}```\n\nThis changes the function as asked.\n"
    return text(original), code, text(expected)


def outcome(case: tuple[str, str, str], language: str) -> str:
    """`exact`, `refused` or `WRONG` for one case through the deterministic pipeline
    (`apply_eval.run_deterministic`, as the dev sets run)."""
    original, snippet, expected = case
    record = run_deterministic({"id": "fuzz", "original": original, "update_snippet": snippet, "instruction": None,
                                "language": language, "path": f"x.{EXTENSIONS[language]}",
                                "expected": expected})
    if not record.success:
        return "refused"
    return "exact" if record.exact else "WRONG"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=4000, help="cases per seed and language")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--languages", nargs="+", default=sorted(MARKERS), choices=sorted(MARKERS))
    args = ap.parse_args(argv)
    print(header(f"Fuzzed chat-style snippets, deterministic merge, seeds {' '.join(map(str, args.seeds))}"))
    rows = []
    for language in args.languages:
        counts = {"exact": 0, "refused": 0, "WRONG": 0}
        for seed in args.seeds:
            rng = random.Random(seed)
            for _ in range(args.cases):
                counts[outcome(chat_case(rng, language), language)] += 1
        rows.append([language, sum(counts.values()), counts["exact"], counts["refused"], counts["WRONG"]])
    print(table(["language", "cases", "exact", "refused", "wrong but valid"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
