"""Plain edit shapes written by hand, each with the file it must give: the merge's outcome on
them, in this tree or another (issue 30: shapes the dev sets miss).

    python -m bench.shapes [--base /tmp/old-tree]

Each shape runs in deterministic mode in a fresh process per tree: `exact` (validates, equals the
expected file), `offered` (refused, the expected file among its readings), `refused`, `WRONG`
(validates, differs). Benchmarks print; they never assert.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

from bench.common import header, table

ROOT = Path(__file__).resolve().parents[1]
M = "# ... existing code ...\n"
C = 'import os\n\nTIMEOUT = 30\nRETRIES = 3\nNAME = "svc"\n\n\ndef main():\n    return TIMEOUT\n'
O1 = 'import os\nimport sys\n\nTIMEOUT = 30\nRETRIES = 3\n\n\ndef main():\n    return TIMEOUT\n'
SHAPES = [  # (language, original, snippet, expected)
 ("py", C, "import os\n\nTIMEOUT = 60\n" + M, C.replace("TIMEOUT = 30", "TIMEOUT = 60")),
 ("py", C, "import os\n\nTIMEOUT = 60\nRETRIES = 3\n" + M, C.replace("TIMEOUT = 30", "TIMEOUT = 60")),
 ("py", "def main():\n    timeout = 30\n\n    retries = 3\n    run(timeout, retries)\n", "def main():\n    timeout = 30\n\n    retries = 5\n    " + M,
  "def main():\n    timeout = 30\n\n    retries = 5\n    run(timeout, retries)\n"),
 ("py", O1, M + "RETRIES = 5\n\n\ndef main():\n    return TIMEOUT\n", O1.replace("RETRIES = 3", "RETRIES = 5")),
 ("py", 'def run(x):\n    y = x + 1\n\n    z = y * 2\n    return z\n', "def run(x):\n    y = x + 1\n\n    z = y * 3\n    " + M, 'def run(x):\n    y = x + 1\n\n    z = y * 3\n    return z\n'),
 ("py", 'def a():\n    return 1\n\n\ndef b():\n    return 2\n', "def a():\n    return 10\n\n\n" + M, 'def a():\n    return 10\n\n\ndef b():\n    return 2\n'),
 ("go", 'package x\n\nconst (\n\tA = 1\n\tB = 2\n)\n\nfunc f() int { return A }\n', "package x\n\nconst (\n\tA = 10\n// ... existing code ...\n", 'package x\n\nconst (\n\tA = 10\n\tB = 2\n)\n\nfunc f() int { return A }\n'),
 ("js", "import a from 'a';\n\nconst LIMIT = 5;\nconst NAME = 'x';\n\nexport function f() { return LIMIT; }\n", "import a from 'a';\n\nconst LIMIT = 10;\n// ... existing code ...\n", "import a from 'a';\n\nconst LIMIT = 10;\nconst NAME = 'x';\n\nexport function f() { return LIMIT; }\n"),
 ("py", "import os\nimport sys\n\n\ndef f():\n    return os.sep\n", "import os\nimport json\n" + M, "import os\nimport json\nimport sys\n\n\ndef f():\n    return os.sep\n"),
 ("py", "CONFIG = {\n    'a': 1,\n    'b': 2,\n    'c': 3,\n}\n", "CONFIG = {\n    'a': 1,\n    'b': 20,\n    " + M + "}\n", "CONFIG = {\n    'a': 1,\n    'b': 20,\n    'c': 3,\n}\n"),
 ("py", "CONFIG = {\n    'a': 1,\n    'b': 2,\n}\n", "CONFIG = {\n    'a': 1,\n    'x': 9,\n    " + M + "}\n", "CONFIG = {\n    'a': 1,\n    'x': 9,\n    'b': 2,\n}\n"),
 ("py", "def f(a):\n    b = a + 1\n    c = b * 2\n    d = c - 3\n    return d\n", "def f(a):\n    " + M + "    c = b * 5\n    " + M, "def f(a):\n    b = a + 1\n    c = b * 5\n    d = c - 3\n    return d\n"),
 ("py", "def f(a):\n    b = a + 1\n    return b\n", "def f(a):\n    b = a + 1\n    print(b)\n    " + M, "def f(a):\n    b = a + 1\n    print(b)\n    return b\n"),
 ("py", "def f(a):\n    log('start')\n    b = g(a, 1)\n    return b\n", "    " + M + "    b = g(a, 2)\n    " + M, "def f(a):\n    log('start')\n    b = g(a, 2)\n    return b\n"),
]

RUN = """
import json, sys
from engine.apply.pipeline import ApplyRequest
from engine.apply.run import apply_edit
out = []
for lang, o, s, exp in json.load(sys.stdin):
    r = apply_edit(None, ApplyRequest(o, s, path="x." + lang, mode="deterministic"))
    out.append("exact" if r.ok and r.merged_code == exp else "WRONG" if r.ok else
               "offered" if any(x.merged_code == exp for x in r.readings) else "refused")
print(json.dumps(out))
"""


def outcomes(tree: Path) -> list[str]:
    done = subprocess.run([sys.executable, "-c", RUN], input=json.dumps(SHAPES), capture_output=True, text=True,
                          cwd=tree, env={"PYTHONPATH": str(tree), "PATH": ""}, check=True)
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="another tree to compare (e.g. a git worktree of an older commit)")
    args = parser.parse_args(argv)
    trees = ([("base", Path(args.base))] if args.base else []) + [("this tree", ROOT)]
    rows = []
    for name, tree in trees:
        counts = collections.Counter(outcomes(tree))
        rows.append([name, len(SHAPES), *(counts.get(k, 0) for k in ("exact", "offered", "refused", "WRONG"))])
    print(header("Hand-written edit shapes, deterministic mode"))
    print(table(["tree", "shapes", "exact", "offered", "refused", "wrong but valid"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
