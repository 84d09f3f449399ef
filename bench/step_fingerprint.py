"""The engine's step loop, fingerprinted: what a refactor of the loop must leave identical.

Runs the apply prompts of the first dev cases through LLMEngine on this machine, six at once (one
in three sampled with a fixed seed) and then one alone, for the `lookup` and `hybrid` drafters,
with `adaptive_drafts` off so that draft sizes do not follow measured timings (with them on, the
step count moves from run to run). Prints, per drafter, the tokens, steps and tokens per step,
and a hash of every output token and per-step histogram: two commits that print the same hashes
decode the same tokens in the same steps.

    python -m bench.step_fingerprint [--model smollm2-135m] [--cases 6]
"""

from __future__ import annotations

import argparse
import hashlib
import json

from bench.common import commit, header, load_dev, machine, table
from engine.apply.model_path import build_job
from engine.apply.pipeline import ApplyRequest, prepare
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.types import SamplingParams


def request(engine: LLMEngine, case: dict, max_tokens: int):
    plan = prepare(ApplyRequest(case["original"], case["update_snippet"], case["instruction"], case["language"],
                                case["path"], mode="model", max_tokens=max_tokens))
    return build_job(plan, engine.tokenizer, engine.cfg.max_model_len).request


def run(engine: LLMEngine, requests: list) -> list:
    seqs = [engine.add_request(r) for r in requests]
    while engine.has_work():
        engine.step()
    return [(s.tokens[s.prompt_len:], s.finish_reason, s.stats.steps,
             sorted(s.stats.snapshot().accepted_per_step_hist.items())) for s in seqs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--cases", type=int, default=6)
    args = ap.parse_args()
    cases = load_dev(spread=False)[: args.cases]
    rows = []
    for drafter, extra in (("lookup", {}), ("hybrid", {"draft_model": args.model})):
        engine = LLMEngine(EngineConfig(model=args.model, drafter=drafter, max_model_len=8192, adaptive_drafts=False,
                                        **extra))
        batch = [request(engine, c, 160) for c in cases]
        for i, r in enumerate(batch):
            if i % 3 == 2:
                r.params = SamplingParams(temperature=0.8, seed=7, max_tokens=120)
        out = run(engine, batch) + run(engine, [request(engine, cases[1 % len(cases)], 200)])
        tokens, steps = sum(len(o[0]) for o in out), sum(o[2] for o in out)
        digest = hashlib.sha256(json.dumps(out).encode()).hexdigest()[:16]
        rows.append([drafter, len(out), tokens, steps, f"{tokens / max(steps, 1):.3f}", digest])
    print(header(f"Step-loop fingerprint, {args.model}"))
    print(f"machine: {machine()}; commit: {commit()}\n")
    print(table(["drafter", "requests", "tokens", "steps", "tokens per step", "sha256 of outputs and steps"], rows))


if __name__ == "__main__":
    main()
