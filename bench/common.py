"""Shared benchmark plumbing: machine/date/commit header, tables, dev-set loading, results files."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch

BENCH = Path(__file__).parent
DEV_SET = BENCH / "data" / "dev.jsonl"


def machine(device: str | None = None) -> str:
    """The GPU, or with `device` "cpu" (an engine run with EDITAPPLY_DEVICE=cpu beside one) or no
    GPU, the CPU: model, cores, threads."""
    if device != "cpu" and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    cpu = platform.processor() or "cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} threads, torch {torch.__version__}"


def commit() -> str:
    if os.environ.get("EDITAPPLY_COMMIT"):  # set on machines that get the tree without .git (device runs)
        return os.environ["EDITAPPLY_COMMIT"]
    try:
        root = BENCH.parent
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=root)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "engine", "kernels", "prompts"],
                               capture_output=True, text=True, cwd=root).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except OSError:
        return "unknown"


def header(title: str) -> str:
    return f"## {title}\n\nmachine: {machine()}; date: {dt.date.today().isoformat()}; commit: {commit()}\n"


def table(columns: list[str], rows: list[list]) -> str:
    """A Markdown table (printable and pasteable into RESULTS.md)."""
    def fmt(v):
        if isinstance(v, float):
            return f"{v:,.2f}" if abs(v) < 1000 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(" --- " for _ in columns) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def load_dev(limit: int | None = None, ids: list[str] | None = None, spread: bool = True) -> list[dict]:
    """Dev-set cases; with `limit`, an even spread over the set sorted by size (not just the smallest)."""
    rows = [json.loads(line) for line in DEV_SET.read_text().splitlines() if line.strip()]
    if ids:
        rows = [r for r in rows if r["id"] in set(ids)]
    if limit and limit < len(rows):
        rows = sorted(rows, key=lambda r: len(r["original"]))
        if spread:
            step = len(rows) / limit
            rows = [rows[int(i * step)] for i in range(limit)]
        else:
            rows = rows[:limit]
    return rows


def histogram_text(hist: dict) -> str:
    """{committed tokens per step: steps} as 'k:n' pairs, largest k first."""
    return " ".join(f"{k}:{v}" for k, v in sorted(((int(k), v) for k, v in hist.items()), reverse=True))


def save_json(name: str, payload: dict, out_dir: str | None = None) -> Path:
    folder = Path(out_dir or os.environ.get("OUT") or BENCH / "results")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(payload, indent=2))
    return path


def teacher_forced_logits(runner, ids: list[int], chunk: int) -> torch.Tensor:
    """[len(ids), vocab] fp32 logits of a ModelRunner fed `ids` in chunks of `chunk` tokens (later
    chunks attend over the earlier chunks' stored K/V, as a long prompt does); row i predicts
    token i + 1. Its KV blocks are released afterwards."""
    from engine.sequence import Sequence
    from engine.types import Request

    seq = Sequence(Request(ids), None, 1, None)
    seq.block_table = runner.kv.blocks.allocate(runner.kv.blocks_for(len(ids)))
    rows = []
    for start in range(0, len(ids), chunk):
        feed = ids[start : start + chunk]
        rows.append(runner.forward([(seq, feed)], logits=True).float().cpu())
        seq.num_cached += len(feed)
    runner.kv.blocks.release(seq.block_table)
    return torch.cat(rows)


def graphed(fn):
    """fn captured in a CUDA graph (after a warm-up run); returns the replay and fn's output."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g.replay, out


def bench_us(fn) -> float:
    """µs of one replay of fn captured alone in a CUDA graph, the median of triton's do_bench,
    which flushes the L2 cache between replays (a layer's weights and KV are not in L2 when the
    layer runs). The kernel micro-benchmarks' timer (bench.attention, int8_head, linear_small)."""
    from triton.testing import do_bench

    replay, _ = graphed(fn)
    return do_bench(replay, warmup=10, rep=60, return_mode="median") * 1000


@dataclass(frozen=True)
class Mode:
    """One speculation setting of the speed benchmarks, named as their tables name it: "plain"
    (no drafts, K=1), or "<drafter> K=<n>" with "+prediction" where the deterministic merge is a
    draft source ("lookup K=32 +prediction", "hybrid K=16 +prediction", "pld K=16")."""

    drafter: str  # EngineConfig.drafter
    k: int  # verify_tokens: positions verified per step
    prediction: bool

    @classmethod
    def parse(cls, name: str) -> "Mode":
        if name == "plain":
            return cls("none", 1, False)
        m = re.fullmatch(r"(\S+) K=(\d+)( \+prediction)?", name)
        if not m or not 2 <= int(m[2]) <= 64:
            raise ValueError(f"a mode is 'plain' or '<drafter> K=<2..64>[ +prediction]', not {name!r}")
        return cls(m[1], int(m[2]), bool(m[3]))

    def engine_k(self, default: int) -> int:
        """The verify_tokens of the engine this mode runs on: its K, or for plain (K=1, which any
        engine decodes) `default`."""
        return self.k if self.k > 1 else default
