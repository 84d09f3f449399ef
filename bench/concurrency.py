"""Total throughput at 1, 8, 32, 64 concurrent apply requests, with and without speculation.

All requests are submitted at once and the engine runs them with continuous batching; the figure
is total generated tokens over wall time (prefill included). Speculation feeds up to K tokens per
sequence per step, so at high concurrency a step costs more; the verify budget caps a step's
tokens and cuts drafts to a share under load. The table shows where long verify blocks stop paying.
With the hybrid drafter it also shows the draft model's part: the steps it ran in, the committed
tokens it read to catch up (each request's prompt, then quotes) and its seconds. On CUDA each
level runs every mode once untimed first (Triton compiles per batch shape). `--rounds R` holds a
level's load for R requests per slot (n * R requests, n at a time). A second table gives each
run's engine steps, wall per step and host time per verify step by phase; `--profile N` adds a
run of each mode at each level under cProfile (after the timed ones, not in their figures) and
prints the N functions with the most own time, per engine step.

    python -m bench.concurrency [--model qwen2.5-coder-0.5b] [--levels 1 8 32 64] [--max-tokens 0]
        [--rounds 1] [--modes plain "lookup K=64 +prediction" "lookup K=16 +prediction"] [--profile 0]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from dataclasses import asdict

from bench.common import Mode, header, load_dev, save_json, table
from bench.spec_decode import build_cases
from engine.config import EngineConfig
from engine.engine import LLMEngine, StepTimes
from engine.loader.registry import PRESETS
from engine.types import SamplingParams
from engine.types import Request

# bench.common.Mode names; hybrid: lookup + the draft model (engine/speculative/hybrid.py). Any
# other K as well ("lookup K=32 +prediction"): each K runs on its own engine, whose graphs are its.
# Two engines in one process slowed every host phase at 64 requests (bench/HISTORY.md, "Verify
# blocks of 64"): compare one K with another from separate runs.
MODES = ["plain", "lookup K=64 +prediction", "lookup K=16 +prediction", "hybrid K=16 +prediction"]


def run_level(engine: LLMEngine, cases: list[dict], n: int, drafter: str, k: int, max_tokens: int,
              rounds: int = 1) -> dict:
    """n * rounds requests, n running at a time (the scheduler's max_num_seqs is n): the level's
    load held for `rounds` requests per slot, so that a timed run is not one batch of a few ms."""
    seqs = []
    engine.step_times = StepTimes()
    t = time.perf_counter()
    for i in range(n * rounds):
        c = cases[i % len(cases)]
        sources = {"prediction": c["prediction"], **c["sources"]}
        mt = min(c["max_tokens"], max_tokens) if max_tokens else c["max_tokens"]
        seqs.append(engine.add_request(Request(c["prompt_ids"], SamplingParams(max_tokens=mt), sources=sources,
                                               drafter=drafter, verify_tokens=k)))
    steps = 0
    while engine.has_work():
        engine.step()
        steps += 1
    wall = time.perf_counter() - t
    gen = sum(s.stats.generated for s in seqs)
    vsteps = sum(s.stats.steps for s in seqs)
    return {"requests": n, "tokens": gen, "seconds": wall, "tok_s": gen / wall,
            "per_step": gen / vsteps if vsteps else 0.0, "engine_steps": steps,
            "preemptions": engine.scheduler.preemptions, "phases": engine.step_times.cells(),
            "us_per_step": wall / steps * 1e6 if steps else 0.0,
            "hybrid": asdict(engine.hybrid.stats) if engine.hybrid is not None and drafter == "hybrid" else None}


def profile_level(engine: LLMEngine, cases: list[dict], n: int, drafter: str, k: int, max_tokens: int,
                  rounds: int, top: int) -> list[list]:
    """One more run of the level under cProfile: its `top` functions by own time, as rows
    (function, calls per engine step, own us per engine step, cumulative us per engine step)."""
    profiler = cProfile.Profile()
    profiler.enable()
    r = run_level(engine, cases, n, drafter, k, max_tokens, rounds)
    profiler.disable()
    steps = max(1, r["engine_steps"])
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (calls, primitive calls, own s, cumulative s, callers)
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    return [[f"{path.rsplit('/', 2)[-1] if path != '~' else ''}:{line}({name})", f"{calls / steps:.1f}",
             f"{own / steps * 1e6:.0f}", f"{cum / steps * 1e6:.0f}"]
            for (path, line, name), (_, calls, own, cum, _) in rows]


def model_cells(r: dict) -> list:
    """The draft model's part of a hybrid run: steps it ran in (probes among them), committed
    tokens it read to catch up (prompts, quotes), its seconds."""
    h = r["hybrid"]
    return [f"{h['model_steps']} ({h['probes']})", h["caught_up"], h["model_seconds"]] if h else ["", "", ""]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--max-tokens", type=int, default=0, help="cap each request's output (0 = the whole file)")
    ap.add_argument("--cases", type=int, default=0, help="dev cases to cycle through (0 = all)")
    ap.add_argument("--rounds", type=int, default=1, help="requests per slot at each level (n * rounds in all)")
    ap.add_argument("--modes", nargs="+", default=MODES[:2], type=lambda name: Mode.parse(name) and name,
                    help="a mode named twice runs twice, alternating (run-to-run noise shows)")
    ap.add_argument("--draft-model", default=None, help="for the hybrid mode (default: the model preset's pair)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after the timed runs, one more of each mode under cProfile: its N costliest functions")
    args = ap.parse_args(argv)
    modes = {name: Mode.parse(name) for name in args.modes}
    draft = ""
    if any(mode.drafter == "hybrid" for mode in modes.values()):
        draft = args.draft_model or PRESETS[args.model].draft
    results, rows, profiles = {}, [], {}
    top = max(args.levels)
    # No prefix caching: both modes pay every prefill (the plain run must not warm the spec run).
    cfg = EngineConfig.from_env(model=args.model, max_num_seqs=top, enable_prefix_caching=False, draft_model=draft)
    engines, engine_of = {}, {}  # verify block K -> its engine; plain runs on the default K's
    for name, mode in modes.items():
        k = mode.engine_k(cfg.verify_tokens)
        if k not in engines:
            engines[k] = LLMEngine(cfg.model_copy(update={"verify_tokens": k}))
        engine_of[name] = engines[k]
    cases = build_cases(engine_of[args.modes[0]].tokenizer, load_dev(args.cases or None))
    cases.sort(key=lambda c: len(c["prompt_ids"]))
    cap = lambda c: min(c["max_tokens"], args.max_tokens) if args.max_tokens else c["max_tokens"]
    for e in engines.values():
        e.warmup(max(len(c["prompt_ids"]) + cap(c) for c in cases), list(range(1, top + 1)))
    for n in args.levels:
        for e in engines.values():
            e.scheduler.max_num_seqs = n
        if cfg.torch_device.type == "cuda":  # Triton compiles per batch shape: not in any mode's time
            for name in dict.fromkeys(args.modes):
                run_level(engine_of[name], cases, n, modes[name].drafter, modes[name].k, 16)
        for name in args.modes:
            mode, engine = modes[name], engine_of[name]
            engine.scheduler.preemptions = 0
            engine.reset_estimates()  # each mode learns its own step cost and acceptance
            r = run_level(engine, cases, n, mode.drafter, mode.k, args.max_tokens, args.rounds)
            key = f"{n}/{name}"
            results[key if key not in results else f"{key} #{sum(k.startswith(key) for k in results) + 1}"] = r
            rows.append([n, name, r["tokens"], r["seconds"], r["tok_s"], r["per_step"], r["preemptions"], *model_cells(r)])
            print(rows[-1], flush=True)
        for name in dict.fromkeys(args.modes) if args.profile else ():
            engine_of[name].reset_estimates()
            profiles[f"{n}/{name}"] = profile_level(engine_of[name], cases, n, modes[name].drafter, modes[name].k,
                                                    args.max_tokens, args.rounds, args.profile)
        plain = results.get(f"{n}/plain", {}).get("tok_s")
        for name in [m for m in dict.fromkeys(args.modes) if m != "plain"] if plain else ():
            rows.append([n, f"speedup of {name}", "", "", results[f"{n}/{name}"]["tok_s"] / plain, "", "", "", "", ""])
    print(header(f"Concurrent apply requests ({args.model}, {cfg.torch_dtype}, {cfg.torch_device}, "
                 f"KV {' / '.join(str(e.kv.num_blocks * e.kv.block_size) for e in engines.values())} tokens, "
                 f"adaptive drafts {cfg.adaptive_drafts}, verify cap {cfg.verify_budget or 'none'})"))
    print(table(["concurrent", "mode", "tokens", "seconds", "total tok/s", "tokens/step", "preemptions",
                 "model steps (probes)", "caught up", "model s"], rows))
    print("\nWall per engine step (prefill steps included) and the host time of its verify steps by phase, us "
          "(engine.StepTimes; collect includes the wait on the GPU):\n")
    print(table(["concurrent", "mode", "engine steps", "wall per step", *StepTimes().cells()],
                [[*key.split("/", 1), r["engine_steps"], f"{r['us_per_step']:.0f}", *r["phases"].values()]
                 for key, r in results.items()]))
    for key, prows in profiles.items():
        print(f"\nProfiled run, {key} requests/mode (cProfile: Python calls slowed; per engine step):\n")
        print(table(["function", "calls", "own us", "cumulative us"], prows))
    save_json(f"concurrency_{cfg.torch_device.type}.json", results)


if __name__ == "__main__":
    main()
