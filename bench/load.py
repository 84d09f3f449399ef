"""HTTP load test: N concurrent clients against `editapply serve` on loopback, for a bounded time.

    python -m bench.load                                  # 16 clients, 60 s, smollm2-135m, own server
    python -m bench.load --clients 32 --duration 120 --model qwen2.5-coder-0.5b
    python -m bench.load --url http://127.0.0.1:8000      # an already running server (no RSS then)
    python -m bench.load --mixed --duration 60            # robustness under load (issue 10), below
    python -m bench.load --mixed --rounds 4 --client-nice 19 [--apply-server]   # chat beside applies, paired

Each client loops over a mix of requests (default: chat, streamed chat, RAG, deterministic apply on
dev-set cases; `--mix` adds `apply-model`). The server runs in its own process, started here on a
free port, so its resident memory (RSS) can be sampled every second. Prints: errors (must be 0),
latency p50/p99 per kind, time to first token for streams, generated tokens/s, and RSS at the
start (after warm-up), the end, the peak, and its slope (flat = no leak). Benchmarks print; they
never assert.

`--mixed` asks whether one kind of traffic hurts another: a probe chat (4 tokens) alone and beside
one oversized apply (`--oversized-bytes` of code, mode auto) on the idle server; then
`--chat-clients` chat clients alone for `--duration` s; then the same beside `--apply-clients`
clients of deterministic `/v1/apply` (12 dev-set cases spread by size) and one more oversized
apply. `--rounds N` repeats the two phases N times, alternating, and prints each pair's ratio of
chat p50 (beside / alone) and their median: on a shared machine, whose speed drifts over minutes,
only phases run side by side compare. `--apply-server` sends the applies of the loaded phases to a
second server process started here: the CPU is shared as before, the interpreter is not (what
costs chat its speed: the CPU, or the server's GIL). Prints chat latency in both phases, errors, what the
oversized requests got and when, and the memory of the server and of its children (merge workers, engine) before and
after. `--server-root` starts the
server from another source tree (an unpacked older commit: the same run before a change), and
`--server-env K=V` sets its environment (`EDITAPPLY_MERGE_WORKERS=0`: merges in threads).
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
KINDS = ("chat", "chat-stream", "rag", "apply", "apply-model", "apply-tiny")
# A two-line edit: the merge costs next to nothing, so the server's own handling of each request
# is what a stream of them measures (hundreds a second, as a busy team's assistant sends).
TINY = {"initial_code": "x = 1\ny = 2\n", "edit_snippet": "x = 3\ny = 2\n", "path": "tiny.py", "mode": "deterministic"}


@dataclass
class Record:
    kind: str
    ok: bool
    seconds: float
    tokens: int = 0
    ttft: float | None = None
    error: str | None = None
    status: int = 0


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
    if kind == "apply-tiny":
        return "/v1/apply", TINY
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
                    return Record(kind, False, time.perf_counter() - start, error=_error_text(r), status=r.status_code)
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
            return Record(kind, False, seconds, error=_error_text(r), status=r.status_code)
        return Record(kind, True, seconds, r.json()["usage"]["completion_tokens"], status=200)
    except httpx.HTTPError as exc:
        return Record(kind, False, time.perf_counter() - start, error=f"{type(exc).__name__}: {exc}")


def _error_text(r: httpx.Response) -> str:
    """'413 input_too_large: the file is ...' (the code first: messages can be long)."""
    try:
        error = r.json()["error"]
        return f"{r.status_code} {error['code']}: {error['message'][:160]}"
    except (ValueError, KeyError, TypeError):
        return f"{r.status_code} {r.text[:200]}"


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


def start_server(model: str, port: int, max_num_seqs: int, max_model_len: int, root: str | None = None,
                 extra_env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, "EDITAPPLY_MAX_NUM_SEQS": str(max_num_seqs), "EDITAPPLY_MAX_MODEL_LEN": str(max_model_len),
           **(extra_env or {})}
    if root:  # another source tree: its `engine` package first on the path
        env["PYTHONPATH"] = os.path.abspath(root)
    cmd = [sys.executable, "-m", "engine.cli", "serve", "--model", model, "--port", str(port), "--log-level", "warning"]
    return subprocess.Popen(cmd, env=env, cwd=root)


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


# ---- --mixed: does one kind of traffic hurt another (issue 10) ----------------------------------------

PROBE = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0})


def oversized_body(size: int, cases: list[dict]) -> dict:
    """An apply of `size` bytes: the largest case's file repeated (mode auto), with its snippet."""
    case = max(cases, key=lambda c: len(c["original"]))
    text = (case["original"] * (size // len(case["original"]) + 1))[:size]
    return {"initial_code": text, "edit_snippet": case["update_snippet"], "path": case["path"], "mode": "auto"}


def memory_mb(pid: int | None) -> tuple[float, float] | None:
    """RSS of the server process and of its children (the merge workers and the engine process), in MB."""
    if pid is None:
        return None
    import psutil

    proc = psutil.Process(pid)
    return proc.memory_info().rss / 2**20, sum(c.memory_info().rss for c in proc.children(recursive=True)) / 2**20


async def phase(clients: dict[str, httpx.AsyncClient], kinds: dict[str, int], duration: float, cases,
                max_tokens: int) -> list[Record]:
    """`kinds[k]` clients of each kind (on `clients[k]`), each looping over its kind's requests for
    `duration` s."""
    records: list[Record] = []
    deadline = time.monotonic() + duration
    await asyncio.gather(*(client_loop(clients[kind], [kind], i, deadline, cases, max_tokens, records)
                           for kind, n in kinds.items() for i in range(n)))
    return records


async def drive_mixed(url: str, args, cases: list[dict], pid: int | None, apply_url: str | None = None) -> dict:
    n = args.chat_clients + args.apply_clients + 2
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    big = oversized_body(args.oversized_bytes, cases)
    async with (httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600), limits=limits) as client,
                httpx.AsyncClient(base_url=apply_url or url, timeout=httpx.Timeout(600), limits=limits) as applier):
        clients = {args.chat_kind: client, args.apply_kind: applier}
        for kind in (args.chat_kind, args.apply_kind):
            await one(clients[kind], kind, *requests(kind, 0, cases, args.max_tokens))
        await asyncio.sleep(args.warmup)
        before = memory_mb(pid)
        probe_idle = await one(client, "probe", *PROBE)
        oversized_idle, probe_beside = await asyncio.gather(one(client, "oversized", "/v1/apply", big),
                                                            one(client, "probe", *PROBE))
        pairs, oversized_loaded = [], None
        for _ in range(args.rounds):
            alone = await phase(clients, {args.chat_kind: args.chat_clients}, args.duration, cases, args.max_tokens)
            oversized = asyncio.create_task(one(client, "oversized", "/v1/apply", big)) if not pairs else None
            loaded = await phase(clients, {args.chat_kind: args.chat_clients, args.apply_kind: args.apply_clients},
                                 args.duration, cases, args.max_tokens)
            oversized_loaded = oversized_loaded or await oversized
            pairs.append((alone, loaded))
        after = memory_mb(pid)
    return {"probe_idle": probe_idle, "probe_beside": probe_beside, "oversized_idle": oversized_idle,
            "oversized_loaded": oversized_loaded, "pairs": pairs, "before": before, "after": after}


def _outcome(r: Record) -> str:
    return "200" if r.ok else (r.error or "?").split(":", 1)[0]


def report_mixed(m: dict, args, model: str) -> dict:
    print(header(f"Robustness under load: {args.chat_clients} chat clients, then beside {args.apply_clients} "
                 f"deterministic-apply clients, {args.duration:.0f} s each, {model}"))
    rows = []
    alone = [r for a, _ in m["pairs"] for r in a]
    loaded = [r for _, b in m["pairs"] for r in b]
    for name, records in (("chat alone", alone), ("chat + applies", loaded)):
        for kind in (args.chat_kind, args.apply_kind):
            if recs := [r for r in records if r.kind == kind]:
                ok = [r.seconds * 1000 for r in recs if r.ok]
                ttft = [r.ttft * 1000 for r in recs if r.ok and r.ttft is not None]
                rows.append([name, kind, len(recs), len(recs) / (args.duration * args.rounds), len(recs) - len(ok), pct(ok, 0.5),
                             pct(ok, 0.99), pct(ttft, 0.5) if ttft else "-"])
    print(table(["phase", "kind", "requests", "per s", "errors", "p50 ms", "p99 ms", "ttft p50 ms"], rows))
    print()
    ratios = []
    for n, (a, b) in enumerate(m["pairs"], 1):
        p50 = [pct([r.seconds * 1000 for r in recs if r.ok and r.kind == args.chat_kind], 0.5) for recs in (a, b)]
        applies = sum(r.kind == args.apply_kind and r.ok for r in b) / args.duration
        ratios.append([n, p50[0], p50[1], applies, p50[1] / p50[0]])
    print(table(["round", "chat p50 alone ms", "chat p50 beside applies ms", "applies per s", "beside / alone"], ratios))
    print(f"median of the rounds' ratios: {statistics.median(r[-1] for r in ratios):.2f}")
    print()
    size = f"{args.oversized_bytes:,}-byte apply (auto)"
    big = [[f"{size}, idle server", _outcome(m["oversized_idle"]), m["oversized_idle"].seconds * 1000,
            m["probe_idle"].seconds * 1000, m["probe_beside"].seconds * 1000],
           [f"{size}, chat + applies", _outcome(m["oversized_loaded"]), m["oversized_loaded"].seconds * 1000, "-", "-"]]
    print(table(["oversized request", "answer", "answered after ms", "probe chat alone ms", "probe chat beside it ms"], big))
    memory = {}
    if m["before"] and m["after"]:
        memory = {"server_rss_before_mb": m["before"][0], "server_rss_after_mb": m["after"][0],
                  "workers_rss_before_mb": m["before"][1], "workers_rss_after_mb": m["after"][1]}
        print()
        print(table(list(memory), [list(memory.values())]))
    for r in [r for r in alone + loaded if not r.ok][:5]:
        print(f"error ({r.kind}): {r.error}")
    return {"rows": rows, "rounds": ratios, "oversized": big, "memory": memory}


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
    parser.add_argument("--mixed", action="store_true", help="the mixed run: chat alone, then beside applies")
    parser.add_argument("--chat-clients", type=int, default=8, help="--mixed: chat clients")
    parser.add_argument("--apply-clients", type=int, default=8, help="--mixed: deterministic-apply clients")
    parser.add_argument("--apply-kind", choices=("apply", "apply-tiny"), default="apply",
                        help="--mixed: dev-set applies, or two-line ones (the server's per-request cost, at hundreds a second)")
    parser.add_argument("--small-applies", action="store_true",
                        help="--mixed: the 12 smallest dev cases (the most applies a second) instead of 12 spread by size")
    parser.add_argument("--chat-kind", choices=("chat", "chat-stream"), default="chat",
                        help="--mixed: the chat clients' requests (chat-stream: streamed, time to first token too)")
    parser.add_argument("--oversized-bytes", type=int, default=3_000_000, help="--mixed: the oversized apply's size")
    parser.add_argument("--rounds", type=int, default=1, help="--mixed: alone/beside pairs, alternating")
    parser.add_argument("--apply-server", action="store_true",
                        help="--mixed: the applies go to a second server process started here (no shared interpreter)")
    parser.add_argument("--client-nice", type=int, default=0,
                        help="lower the load generator's CPU priority by this much (clients on other machines take none)")
    parser.add_argument("--server-root", help="start the server from this source tree (e.g. an older commit, unpacked)")
    parser.add_argument("--server-env", action="append", default=[], metavar="K=V", help="environment of the server")
    args = parser.parse_args(argv)
    mix = [k.strip() for k in args.mix.split(",") if k.strip()]
    if unknown := set(mix) - set(KINDS):
        parser.error(f"unknown kinds in --mix: {', '.join(sorted(unknown))}")
    smallest = sorted(load_dev(), key=lambda c: len(c["original"]))
    cases = (smallest[:12] if args.small_applies else load_dev(limit=12)) if args.mixed else smallest[:6]

    proc = None
    url = args.url
    if url is None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start_server(args.model, port, args.max_num_seqs, args.max_model_len, args.server_root,
                            dict(kv.split("=", 1) for kv in args.server_env))
    pid = proc.pid if proc else None
    applier, apply_url = None, None
    if args.apply_server:
        apply_port = free_port()
        apply_url = f"http://127.0.0.1:{apply_port}"
        applier = start_server(args.model, apply_port, args.max_num_seqs, args.max_model_len, args.server_root,
                               dict(kv.split("=", 1) for kv in args.server_env))
    if args.client_nice:
        os.nice(args.client_nice)  # after the server started: it keeps its own priority
    try:
        wait_healthy(url, proc)
        if applier is not None:
            wait_healthy(apply_url, applier)
        if args.mixed:
            run = asyncio.run(drive_mixed(url, args, cases, pid, apply_url))
        else:
            run = asyncio.run(drive(url, args.clients, args.duration, mix, cases, args.max_tokens, pid, args.warmup))
    finally:
        for p in (proc, applier):
            if p is not None:
                p.terminate()
                p.wait(timeout=30)
    result = report_mixed(run, args, args.model) if args.mixed else report(run, args, args.model)
    if args.json:
        print(f"wrote {save_json(args.json, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
