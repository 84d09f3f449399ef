"""The same apply requests through both backends: our engine and vLLM (its CPU build, here).

    python -m bench.backends [--model qwen2.5-coder-0.5b] [--limit 4 | --ids ID ...] [--levels 1 4 8]
                             [--vllm-url URL] [--json out.json]

Every request goes through the apply pipeline with the model path forced (`mode=model`, the draft
prompt form, greedy), through `service.open_service` with `backend` engine, then vllm -- exactly
what `editapply serve --backend ...` runs. Without `--vllm-url` a `vllm serve` is started here on
the same converted model folder (fp32 on a CPU, as ours; `engine/backends/vllm_serve.py`). One
backend at a time, alone on the machine (`run_backends`): an idle one loaded beside slows the
other. On a shared machine speed drifts, so compare backends measured close together.

Part 1, one request at a time: tokens, tokens committed per step after the first token (and the
histogram), decode tok/s, time to first token, wall seconds, exact against `expected`, and whether
both backends wrote the same text. Part 2, N requests at once (the cases cycled, so their prompts
are in both backends' prefix caches by then): total generated tokens over wall time, and the
median request's seconds.

How vLLM's figures are read (engine/backends/vllm.py): tokens and timings from its stream, drafted
and accepted tokens and the histogram of accepted drafts per verify step from its per-request
speculation metrics (`--per-request-spec-decode-metrics summary`); its steps without a draft are
inferred (each commits one token). Time to first token is measured by our client, over HTTP.
Benchmarks print, they never assert.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from bench.apply_eval import load_cases
from bench.common import DEV_SET, header, save_json, table
from engine.apply.pipeline import ApplyRequest
from engine.apply.run import apply_edit
from engine.config import EngineConfig
from engine.service import open_service


def request(case: dict) -> ApplyRequest:
    return ApplyRequest(case["original"], case["update_snippet"], case["instruction"], case["language"], case["path"],
                        mode="model", prompt_form="draft", use_prediction=True)


def one(service, case: dict) -> dict:
    started = time.perf_counter()
    result = apply_edit(service, request(case))
    s, u = result.stats, result.usage
    return {"id": case["id"], "tokens": u.completion_tokens, "steps": s.steps, "hist": s.accepted_per_step_hist,
            "drafted": s.drafted, "accepted": s.accepted, "tokens_per_second": s.tokens_per_second,
            "ttft_ms": s.ttft_ms, "seconds": time.perf_counter() - started, "ok": result.ok,
            "exact": result.ok and result.merged_code == case["expected"], "output": result.merged_code}


def at_once(service, cases: list[dict], n: int) -> dict:
    batch = [cases[i % len(cases)] for i in range(n)]
    started = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        runs = list(pool.map(lambda c: one(service, c), batch))
    wall = time.perf_counter() - started
    tokens = sum(r["tokens"] for r in runs)
    return {"n": n, "tokens": tokens, "wall": wall, "tokens_per_second": tokens / wall,
            "p50_seconds": statistics.median(r["seconds"] for r in runs)}


def run_backends(cfgs: dict[str, EngineConfig], cases: list[dict], levels: list[int], warmup: dict) -> dict[str, dict]:
    """Each backend alone: opened, warmed, measured on every case and level, and shut down before
    the next one opens (a loaded backend slows the other even idle: vLLM's idle server took ours
    from 63 to 48 decode tok/s on a 2-core CPU, bench/RESULTS.md "Packed weights on the CPU")."""
    results = {}
    for name, cfg in cfgs.items():
        started = time.perf_counter()
        service = open_service(cfg)
        try:
            results[name] = {"ready_seconds": time.perf_counter() - started, "singles": [], "levels": []}
            one(service, warmup)  # graphs, allocator, vLLM's first request; not a measured case
            for case in cases:
                results[name]["singles"].append(one(service, case))
                print(f"{name} · {case['id']}: done", flush=True)
            for n in levels:
                results[name]["levels"].append(at_once(service, cases, n))
                print(f"{name} · {n} at once: done", flush=True)
        finally:
            service.shutdown()
    return results


def merged_hist(runs: list[dict]) -> dict[int, int]:
    out: dict[int, int] = {}
    for r in runs:
        for k, v in r["hist"].items():
            out[int(k)] = out.get(int(k), 0) + v
    return dict(sorted(out.items()))


def report(model: str, results: dict[str, dict], cases: list[dict]) -> str:
    lines = [header(f"Both backends on the same apply requests ({model}, {len(cases)} dev cases, model path, draft form)")]
    rows = []
    for name, res in results.items():
        s = res["singles"]
        tokens, steps = sum(r["tokens"] for r in s), sum(r["steps"] for r in s)
        decode = sum(r["tokens"] - 1 for r in s) / sum((r["tokens"] - 1) / r["tokens_per_second"] for r in s
                                                       if r["tokens_per_second"])
        rows.append([name, f"{res['ready_seconds']:.0f} s", tokens, steps,
                     round((tokens - len(s)) / steps, 2) if steps else 0, decode,
                     statistics.median(r["ttft_ms"] for r in s) / 1000, sum(r["seconds"] for r in s),
                     f"{sum(r['exact'] for r in s)}/{len(s)}"])
    lines.append(table(["backend", "ready", "tokens", "steps", "tokens/step", "decode tok/s", "median TTFT s",
                        "total s", "exact"], rows))
    if len(results) == 2:
        a, b = (res["singles"] for res in results.values())
        same = sum(x["output"] == y["output"] for x, y in zip(a, b))
        lines.append(f"\nsame output on both backends: {same}/{len(a)}")
    lines.append("\ncommitted tokens per verify step (histogram over all cases):\n")
    for name, res in results.items():
        lines.append(f"* {name}: {merged_hist(res['singles'])}")
    lines.append("")
    rows = [[name, lv["n"], lv["tokens"], lv["wall"], lv["tokens_per_second"], lv["p50_seconds"]]
            for name, res in results.items() for lv in res["levels"]]
    lines.append(table(["backend", "concurrent", "tokens", "wall s", "total tok/s", "median request s"], rows))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--limit", type=int, default=4, help="dev cases (an even spread over the set by size)")
    ap.add_argument("--ids", nargs="*", default=None, help="these dev cases instead")
    ap.add_argument("--levels", type=int, nargs="*", default=[1, 4, 8], help="concurrent requests")
    ap.add_argument("--vllm-url", default=None, help="a running `vllm serve` of the same model (default: start one)")
    ap.add_argument("--backends", nargs="+", default=["engine", "vllm"], choices=["engine", "vllm"])
    ap.add_argument("--json", default=None, help="write the per-case records here")
    args = ap.parse_args(argv)
    cases = load_cases(DEV_SET, None if args.ids else args.limit, args.ids)
    warmup = next(c for c in load_cases(DEV_SET) if c not in cases)
    cfgs = {backend: EngineConfig.from_env(model=args.model, backend=backend,
                                           vllm_url=args.vllm_url if backend == "vllm" else None)
            for backend in args.backends}
    results = run_backends(cfgs, cases, args.levels, warmup)
    text = report(args.model, results, cases)
    print(text)
    if args.json:
        save_json(args.json, {"model": args.model, "results": results, "report": text})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
