"""Build bench/data/dev_search_replace.jsonl: the real commits of dev.jsonl and dev_hard.jsonl
(their `original` and `expected` files, exact bytes; sources in bench/data/README.md), each edit
written as search/replace blocks the way assistants write them.

Blocks, per commit: the changed runs of lines (engine/apply/hunks.py) with context lines around
each, widened one line at a time (up to MAX_CONTEXT) until the SEARCH text occurs once in the
original, as Aider's and Cline's prompts ask; runs whose context would touch are one block. A
block still not unique at MAX_CONTEXT stays so (assistants write those too: a correct tool
refuses it, or needs the start line Roo Code gives).

Styles, taken in turn over the commits (every block of one answer in one style):

* `aider`: prose, the file's path on its own line, a fenced block of `<<<<<<< SEARCH` blocks;
* `cline`: `------- SEARCH` / `=======` / `+++++++ REPLACE`, unfenced, one line of context;
* `reversed`: as aider, with the blocks in the reverse order of the file;
* `drift`: as aider, SEARCH without trailing whitespace and dedented by its common indentation (a
  method quoted out of its class), REPLACE alike (`dedent`);
* `roo`: `:start_line:N` and `-------` after `<<<<<<< SEARCH`, no context beyond the change (one
  line where the change is an insertion), so a SEARCH may occur several times and the start line
  says which.

    .venv/bin/python bench/make_dev_search_replace.py --out bench/data/dev_search_replace.jsonl

editapply's merge is never run here: no case is picked or dropped by its result.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from engine.apply.hunks import hunks

DATA = Path(__file__).parent / "data"
SOURCES = ("dev.jsonl", "dev_hard.jsonl")
STYLES = ("aider", "cline", "reversed", "drift", "roo")
MAX_CONTEXT = 6


def rows(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def occurrences(haystack: list[str], needle: list[str]) -> int:
    n = len(needle)
    return sum(1 for i in range(len(haystack) - n + 1) if haystack[i : i + n] == needle)


def windows(original: list[str], expected: list[str], found, context_for) -> list[tuple[int, int, int, int]]:
    """(start, end, new_start, new_end) per block: each change with its context, merged when they touch."""
    out: list[list[int]] = []
    for h in found:
        c = context_for(h)
        start, end = max(0, h.start - c), min(len(original), h.end + c)
        new_start, new_end = h.new_start - (h.start - start), h.new_end + (end - h.end)
        if out and start <= out[-1][1]:
            out[-1][1], out[-1][3] = end, new_end
        else:
            out.append([start, end, new_start, new_end])
    return [tuple(w) for w in out]


def unique_context(original: list[str], h) -> int:
    for c in range(1, MAX_CONTEXT + 1):
        start, end = max(0, h.start - c), min(len(original), h.end + c)
        if occurrences(original, original[start:end]) == 1:
            return c
    return MAX_CONTEXT


def dedent(search: list[str], replace: list[str]) -> tuple[list[str], list[str]]:
    """A quote with drift: SEARCH without trailing whitespace, and REPLACE's copies of SEARCH lines
    alike (its new lines as the commit wrote them); both without SEARCH's common indentation when
    every line of both has it (else a careful reader could not put the lines back)."""
    stripped = {line.rstrip() for line in search}
    search = [line.rstrip() for line in search]
    replace = [line.rstrip() if line.strip() and line.rstrip() in stripped else line for line in replace]
    indents = [line[: len(line) - len(line.lstrip())] for line in search if line.strip()]
    cut = min(indents, key=len, default="")
    if not all(line.startswith(cut) for line in search + replace if line.strip()):
        return search, replace
    def out(lines: list[str]) -> list[str]:
        return [line[len(cut):] if line.strip() else line for line in lines]

    return out(search), out(replace)


def answer(case: dict, style: str) -> str | None:
    original, expected = rows(case["original"]), rows(case["expected"])
    found = hunks(case["original"], case["expected"])
    if not found:
        return None
    minimal = style == "roo"
    blocks = windows(original, expected, found,
                     (lambda h: 0 if h.end > h.start else 1) if minimal else
                     (lambda h: 1) if style == "cline" else (lambda h: unique_context(original, h)))
    if style == "reversed":
        blocks = blocks[::-1]
    text = []
    for start, end, new_start, new_end in blocks:
        search = [line.rstrip("\r\n") for line in original[start:end]]
        replace = [line.rstrip("\r\n") for line in expected[new_start:new_end]]
        if style == "drift":
            search, replace = dedent(search, replace)
        head, tail = ("------- SEARCH", "+++++++ REPLACE") if style == "cline" else ("<<<<<<< SEARCH", ">>>>>>> REPLACE")
        if style == "roo":
            head += f"\n:start_line:{start + 1}\n-------"
        text.append("\n".join([head, *search, "=======", *replace, tail]) + "\n")
    body = "".join(text)
    if style == "cline":
        return body
    fence = "````" if any(line.lstrip().startswith("```") for line in original + expected) else "```"
    lang = case.get("language") or ""
    return f"Here are the changes to {os.path.basename(case['path'])}:\n\n{case['path']}\n{fence}{lang}\n{body}{fence}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(DATA / "dev_search_replace.jsonl"))
    args = parser.parse_args(argv)
    cases = [json.loads(line) for name in SOURCES for line in (DATA / name).read_text().splitlines() if line.strip()]
    counts: dict[str, int] = {}
    with open(args.out, "w", encoding="utf-8") as out:
        for n, case in enumerate(cases):
            style = STYLES[n % len(STYLES)]
            text = answer(case, style)
            if text is None:
                continue
            keep = {k: case[k] for k in ("repo", "commit", "parent", "path", "language", "original", "expected")
                    if k in case}
            out.write(json.dumps({"id": f"{case['id']}#{style}", **keep, "instruction": case.get("instruction", ""),
                                  "update_snippet": text, "style": style}, ensure_ascii=False) + "\n")
            counts[style] = counts.get(style, 0) + 1
    print(f"{sum(counts.values())} cases: " + ", ".join(f"{s} {counts.get(s, 0)}" for s in STYLES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
