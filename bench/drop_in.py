"""The drop-in routes' latency beside `/v1/apply` (issue 34): what an assistant waits for.

    python -m bench.drop_in [--model smollm2-135m] [--repeats 30]

Starts `editapply serve`, then sends the same deterministic edits (the dev set's 12 smallest
cases; auto mode, so the merge answers and no model runs) one at a time through each route:
`/v1/apply` (editapply's own), `/v1/code/apply` (Relace's body and answer) and the chat route
with Morph's `<code>`/`<update>` message; and the dev set's search/replace form of the same
commits through `/v1/apply`. Wall time per request from the client, in ms. Benchmarks print;
they never assert.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx

from bench.common import DEV_SET, header, load_dev, table
from bench.load import free_port, start_server, wait_healthy


def requests(cases: list[dict], sr: dict[str, str]) -> dict[str, list[tuple[str, dict]]]:
    return {
        "/v1/apply (lazy snippet)": [("/v1/apply", {"initial_code": c["original"], "edit_snippet": c["update_snippet"],
                                                    "path": c["path"]}) for c in cases],
        "/v1/code/apply (Relace)": [("/v1/code/apply", {"initialCode": c["original"], "editSnippet": c["update_snippet"]})
                                    for c in cases],
        "/v1/chat/completions (Morph form)": [("/v1/chat/completions", {"model": "morph-v3-fast", "messages": [
            {"role": "user", "content": f"<code>{c['original']}</code>\n<update>{c['update_snippet']}</update>"}]})
            for c in cases],
        "/v1/apply (search/replace blocks)": [("/v1/apply", {"initial_code": c["original"], "edit_snippet": sr[c["id"]],
                                                             "path": c["path"]}) for c in cases if c["id"] in sr],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    cases = sorted(load_dev(), key=lambda c: len(c["original"]))[:12]
    sr = {}
    for line in (DEV_SET.parent / "dev_search_replace.jsonl").read_text().splitlines():
        case = json.loads(line)
        sr[case["id"].split("#")[0]] = case["update_snippet"]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(args.model, port, max_num_seqs=4, max_model_len=4096)
    rows = []
    try:
        wait_healthy(url, proc)
        with httpx.Client(base_url=url, timeout=60) as client:
            for name, batch in requests(cases, sr).items():
                times, statuses = [], {}
                for _ in range(args.repeats):
                    for route, body in batch:
                        start = time.perf_counter()
                        r = client.post(route, json=body)
                        times.append((time.perf_counter() - start) * 1000)
                        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                times.sort()
                rows.append([name, len(times), f"{statistics.median(times):.1f}", f"{times[int(0.95 * len(times)) - 1]:.1f}",
                             " ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))])
    finally:
        proc.terminate()
        proc.wait(30)
    print(header("Drop-in routes: latency of a deterministic apply"))
    print(table(["route", "requests", "p50 ms", "p95 ms", "statuses"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
