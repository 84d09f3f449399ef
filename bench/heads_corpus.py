"""The corpus the benchmarks' draft heads were trained on (engine/training/heads.py), as a tarball.

Source files and prose from what this machine has installed: the virtualenv's Python packages
(code, and their .md/.rst/.txt docs), the JavaScript/TypeScript of node_modules folders found
under --node, Rust sources under --rust. Nothing from the benchmarks' own data: files of the
projects the dev cases come from (bench/data/dev.jsonl: flask, httpx, commander, koa,
vscode-languageserver-node, urfave/cli, groupcache, serde-json) are skipped by path, and any file
sharing more than a few distinctive lines with a dev case's original or expected file is dropped.

    python -m bench.heads_corpus --out .devmodel/corpus.tar.xz [--mb 24] [--node DIR...] [--rust DIR...]
"""

from __future__ import annotations

import argparse
import io
import random
import site
import tarfile
from pathlib import Path

from bench.common import load_dev
from engine.training.heads import MAX_FILE_BYTES

EXCLUDED = ("flask", "httpx", "commander", "koa", "vscode-languageserver", "vscode-jsonrpc", "vscode-languageclient",
            "urfave", "groupcache", "serde")
CODE = (".py", ".js", ".ts", ".go", ".rs")
PROSE = (".md", ".rst", ".txt")
MIN_LINE = 30  # a line this long is distinctive enough to recognize a dev file by
MAX_SHARED = 3


def dev_lines() -> set[str]:
    lines = set()
    for row in load_dev():
        for text in (row["original"], row["expected"]):
            lines.update(s.strip() for s in text.splitlines() if len(s.strip()) >= MIN_LINE)
    return lines


def candidates(roots: list[Path], suffixes: tuple[str, ...]) -> list[Path]:
    out = []
    for root in roots:
        for p in sorted(root.rglob("*")):
            low = str(p).lower()
            if p.suffix in suffixes and p.is_file() and 800 < p.stat().st_size <= MAX_FILE_BYTES \
                    and not any(x in low for x in EXCLUDED) and ".min." not in low and ".d.ts" not in low:
                out.append(p)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mb", type=float, default=24.0, help="megabytes of text in all (half code, half prose)")
    ap.add_argument("--node", nargs="*", default=[], help="node_modules folders")
    ap.add_argument("--rust", nargs="*", default=[], help="folders of Rust sources")
    args = ap.parse_args(argv)
    seen = dev_lines()
    sp = [Path(p) for p in site.getsitepackages()]
    pools = {"code": candidates(sp, (".py",)) + candidates([Path(p) for p in args.node], (".js", ".ts"))
             + candidates([Path(p) for p in args.rust], (".rs",)),
             "prose": candidates(sp, PROSE)}
    budget = args.mb * 1e6 / 2
    rng = random.Random(0)
    buf = io.BytesIO()
    kept = dropped = 0
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for kind, files in pools.items():
            rng.shuffle(files)
            total = 0
            for p in files:
                try:
                    text = p.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
                if sum(s.strip() in seen for s in text.splitlines() if len(s.strip()) >= MIN_LINE) > MAX_SHARED:
                    dropped += 1
                    continue
                data = text.encode()
                info = tarfile.TarInfo(f"corpus/{kind}/{kept:06d}{p.suffix}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                kept += 1
                total += len(data)
                if total >= budget:
                    break
            print(f"{kind}: {total / 1e6:.1f} MB")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_bytes(buf.getvalue())
    print(f"{kept} files ({dropped} dropped as overlapping the dev cases), {len(buf.getvalue()) / 1e6:.1f} MB -> {args.out}")


if __name__ == "__main__":
    main()
