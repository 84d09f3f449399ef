"""HTTP load test: N concurrent clients against `editapply serve` on loopback, for a bounded time.

    python -m bench.load                                  # 16 clients, 60 s, smollm2-135m, own server
    python -m bench.load --clients 32 --duration 120 --model qwen2.5-coder-0.5b
    python -m bench.load --url http://127.0.0.1:8000      # an already running server (no RSS then)

Each client loops over a mix of requests (default: chat, streamed chat, RAG, deterministic apply on
dev-set cases; `--mix` adds `apply-model`). The server runs in its own process, started here on a
free port, so its resident memory (RSS) can be sampled every second. Prints: errors (must be 0),
latency p50/p99 per kind, time to first token for streams, generated tokens/s, and RSS at the
start (after warm-up), the end, the peak, and its slope (flat = no leak). Benchmarks print; they
never assert.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field

import httpx

from bench.common import header, load_dev, save_json, table

TOPICS = ["the sea", "a compiler", "autumn", "a cache miss", "the moon", "coffee", "a merge conflict", "snow"]
RAG_DOC = ("editapply merges lazy edit snippets into files. It regenerates the whole file with a language model "
           "and uses speculative decoding with lookup drafts: drafts come from the open file, the snippet and a "
           "predicted merge, and each step verifies a block of 16 tokens, so copied code is accepted about 15 "
           "tokens per step. Verification is exact: greedy output equals plain greedy decoding.")
RAG_QUESTIONS = ["How many tokens does each step verify?", "Where do the drafts come from?", "Is verification exact?"]
KINDS = ("chat", "chat-stream", "rag", "apply", "apply-model")


@dataclass
class Record:
    kind: str
    ok: bool
    seconds: float
    tokens: int = 0
    ttft: float | None = None
    error: str | None = None


@dataclass
class Run:
    records: list[Record] = field(default_factory=list)
    rss: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, bytes)
    wall: float = 0.0


def requests(kind: str, n: int, cases: list[dict], max_tokens: int) -> tuple[str, dict]:
    if kind in ("chat", "chat-stream"):
        body = {"messages": [{"role": "user", "content": f"Write a haiku about {TOPICS[n % len(TOPICS)]}."}],
                "max_tokens": max_tokens, "temperature": 0}
        if kind == "chat-stream":
            body.update(stream=True, stream_options={"include_usage": True})
        return "/v1/chat/completions", body
    if kind == "rag":
        return "/v1/rag", {"documents": [{"id": "readme", "text": RAG_DOC}], "question": RAG_QUESTIONS[n % 3],
                           "max_tokens": max_tokens}
    case = cases[n % len(cases)]
    return "/v1/apply", {"initial_code": case["original"], "edit_snippet": case["update_snippet"], "path": case["path"],
                         "mode": "model" if kind == "apply-model" else "deterministic",
                         **({"max_tokens": max_tokens} if kind == "apply-model" else {})}


async def one(client: httpx.AsyncClient, kind: str, path: str, body: dict) -> Record:
    start = time.perf_counter()
    try:
        if body.get("stream"):
            ttft, tokens = None, 0
            async with client.stream("POST", path, json=body) as r:
                if r.status_code != 200:
                    await r.aread()
                    return Record(kind, False, time.perf_counter() - start, error=f"{r.status_code} {r.text[:200]}")
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        return Record(kind, False, time.perf_counter() - start, error=str(chunk["error"])[:200])
                    if ttft is None and chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                        ttft = time.perf_counter() - start
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
            return Record(kind, True, time.perf_counter() - start, tokens, ttft)
        r = await client.post(path, json=body)
        seconds = time.perf_counter() - start
        if r.status_code != 200:
            return Record(kind, False, seconds, error=f"{r.status_code} {r.text[:200]}")
        return Record(kind, True, seconds, r.json()["usage"]["completion_tokens"])
    except httpx.HTTPError as exc:
        return Record(kind, False, time.perf_counter() - start, error=f"{type(exc).__name__}: {exc}")


async def client_loop(client, mix, index, deadline, cases, max_tokens, records):
    for n in itertools.count(index):
        if time.monotonic() >= deadline:
            return
        kind = mix[n % len(mix)]
        path, body = requests(kind, n, cases, max_tokens)
        records.append(await one(client, kind, path, body))


async def sample_rss(pid: int | None, started: float, deadline: float, out: list):
    if pid is None:
        return
    import psutil

    proc = psutil.Process(pid)
    while time.monotonic() < deadline:
        out.append((time.monotonic() - started, proc.memory_info().rss))
        await asyncio.sleep(1.0)


async def drive(url, clients, duration, mix, cases, max_tokens, pid, warmup) -> Run:
    run = Run()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600), limits=limits) as client:
        # Warm-up: one of each kind, so first-call costs (graph capture, caches) stay out of the figures.
        for kind in dict.fromkeys(mix):
            await one(client, kind, *requests(kind, 0, cases, max_tokens))
        await asyncio.sleep(warmup)
        started = time.monotonic()
        deadline = started + duration
        sampler = asyncio.create_task(sample_rss(pid, started, deadline, run.rss))
        await asyncio.gather(*(client_loop(client, mix, i, deadline, cases, max_tokens, run.records) for i in range(clients)))
        run.wall = time.monotonic() - started
        await sampler
    return run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str, port: int, max_num_seqs: int, max_model_len: int) -> subprocess.Popen:
    env = {**os.environ, "EDITAPPLY_MAX_NUM_SEQS": str(max_num_seqs), "EDITAPPLY_MAX_MODEL_LEN": str(max_model_len)}
    cmd = [sys.executable, "-m", "engine.cli", "serve", "--model", model, "--port", str(port), "--log-level", "warning"]
    return subprocess.Popen(cmd, env=env)


def wait_healthy(url: str, proc: subprocess.Popen | None, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"no healthy server at {url} after {timeout} s")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def slope_mb_per_min(samples: list[tuple[float, int]]) -> float:
    if len(samples) < 3:
        return float("nan")
    xs, ys = [s[0] for s in samples], [s[1] / 2**20 for s in samples]
    return statistics.linear_regression(xs, ys).slope * 60


def report(run: Run, args, model: str) -> dict:
    by_kind = defaultdict(list)
    for r in run.records:
        by_kind[r.kind].append(r)
    rows = []
    for kind, recs in by_kind.items():
        ok = [r for r in recs if r.ok]
        ttfts = [r.ttft * 1000 for r in ok if r.ttft is not None]
        rows.append([kind, len(recs), len(recs) - len(ok), pct([r.seconds * 1000 for r in ok], 0.5),
                     pct([r.seconds * 1000 for r in ok], 0.99), pct(ttfts, 0.5) if ttfts else "-",
                     sum(r.tokens for r in ok)])
    all_ok = [r for r in run.records if r.ok]
    errors = [r for r in run.records if not r.ok]
    tokens = sum(r.tokens for r in all_ok)
    rows.append(["all", len(run.records), len(errors), pct([r.seconds * 1000 for r in all_ok], 0.5),
                 pct([r.seconds * 1000 for r in all_ok], 0.99), "-", tokens])
    print(header(f"HTTP load: {args.clients} clients, {args.duration:.0f} s, {model}"))
    print(table(["kind", "requests", "errors", "p50 ms", "p99 ms", "ttft p50 ms", "tokens"], rows))
    summary = {"clients": args.clients, "duration_s": round(run.wall, 1), "requests": len(run.records),
               "errors": len(errors), "requests_per_s": len(run.records) / run.wall, "tokens_per_s": tokens / run.wall}
    if run.rss:
        mb = [b / 2**20 for _, b in run.rss]
        summary.update(rss_start_mb=mb[0], rss_end_mb=mb[-1], rss_peak_mb=max(mb), rss_slope_mb_per_min=slope_mb_per_min(run.rss))
    print()
    print(table(list(summary), [list(summary.values())]))
    for r in errors[:5]:
        print(f"error ({r.kind}): {r.error}")
    return {"summary": summary, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=float, default=60, help="seconds of load (after the warm-up)")
    parser.add_argument("--warmup", type=float, default=2, help="seconds of rest between the warm-up calls and the load")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--url", help="an already running server (RSS is then not measured)")
    parser.add_argument("--mix", default="chat,chat-stream,rag,apply", help=f"comma-separated, from {', '.join(KINDS)}")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-num-seqs", type=int, default=8, help="for the server started here")
    parser.add_argument("--max-model-len", type=int, default=4096, help="for the server started here")
    parser.add_argument("--json", metavar="NAME", help="also write the figures to bench/results/NAME (or $OUT/NAME)")
    args = parser.parse_args(argv)
    mix = [k.strip() for k in args.mix.split(",") if k.strip()]
    if unknown := set(mix) - set(KINDS):
        parser.error(f"unknown kinds in --mix: {', '.join(sorted(unknown))}")
    cases = sorted(load_dev(), key=lambda c: len(c["original"]))[:6]

    proc = None
    url = args.url
    if url is None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start_server(args.model, port, args.max_num_seqs, args.max_model_len)
    try:
        wait_healthy(url, proc)
        run = asyncio.run(drive(url, args.clients, args.duration, mix, cases, args.max_tokens,
                                proc.pid if proc else None, args.warmup))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    result = report(run, args, args.model)
    if args.json:
        print(f"wrote {save_json(args.json, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
