"""Drafters against workloads: none / lookup / draft model / hybrid on the target model.

Four workloads, greedy, one request at a time, the same prompts for every drafter, no prefix
caching (every drafter pays the same prefill), every configuration started with cold estimates
(step costs, acceptance):
  (a) apply: dev cases, the apply prompt (rewrite form) with the product's lookup sources (the
      file, the snippet, the deterministic merge as predicted output);
  (b) instruction: dev cases with the snippet withheld (the instruction and the file only; the
      file is the lookup source);
  (c) rag: questions asking to explain functions of a document of real code (answers paraphrase;
      the document is the lookup source);
  (d) chat: coding questions without context.
Reported per workload and drafter: tokens per step (histogram), the draft model's acceptance,
decode tok/s, TTFT, and whether every output equals plain decoding; then the host time of a verify
step by phase (the drafters' work is in `schedule`) and, for the drafters with a model, the steps
where it ran and its wall time against what the hybrid's rule priced it at.

    python -m bench.drafters [--model qwen2.5-coder-1.5b] [--draft-model qwen2.5-coder-0.5b]
        [--limit 2] [--max-tokens 128] [--workloads apply instruction rag chat]
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, replace

from bench.common import header, histogram_text, load_dev, save_json, table
from bench.rag import build_document
from bench.spec_decode import build_cases
from engine.config import EngineConfig
from engine.engine import LLMEngine, StepTimes
from engine.loader.registry import PRESETS
from engine.rag import rag_request
from engine.types import Request, SamplingParams
from prompts.apply import build_instruction_prompt

DRAFTERS = ("none", "lookup", "draft", "hybrid")
WORKLOADS = ("apply", "instruction", "rag", "chat")
CHAT = [
    "Write a Python function that merges overlapping intervals, with a docstring.",
    "Explain the difference between a process and a thread, with a short Go example.",
    "Write a TypeScript debounce function with generics and explain how it works.",
    "How do I read a large CSV file in chunks with pandas? Show code.",
]


def build_prompts(tok, workload: str, limit: int, max_tokens: int) -> list[tuple[str, Request]]:
    """(name, request) pairs of one workload; the request's drafter is set per run."""
    params = SamplingParams(max_tokens=max_tokens)
    out = []
    if workload == "apply":
        for c in build_cases(tok, load_dev(limit)):
            sources = {"prediction": c["prediction"], **c["sources"]}
            out.append((c["id"], Request(c["prompt_ids"], SamplingParams(max_tokens=min(max_tokens, c["max_tokens"])),
                                         sources=sources)))
    elif workload == "instruction":
        for r in load_dev(limit):
            p = build_instruction_prompt(r["original"], r["instruction"], r["language"])
            out.append((r["id"], Request(p.prompt_ids(tok), params, sources={"original": tok.encode(r["original"])})))
    elif workload == "rag":
        doc, names = build_document(tok, 2000)
        for n in names[:: max(1, len(names) // limit)][:limit]:
            q = f"Explain in your own words what `{n}` does and when a caller would use it."
            req = rag_request(tok, [{"id": "code", "text": doc}], q, params)
            out.append((n, req))
    else:
        for q in CHAT[:limit]:
            out.append((q[:40], Request(tok.encode_chat([{"role": "user", "content": q}]), params)))
    return out


def run(engine: LLMEngine, prompts: list[tuple[str, Request]], drafter: str) -> dict:
    tokens = steps = drafted = m_drafted = m_accepted = 0
    decode_s = ttft = 0.0
    hist: dict[int, int] = {}
    outputs = []
    engine.reset_estimates()  # each configuration starts cold: no estimate carried over
    engine.step_times = StepTimes()
    for _, req in prompts:
        r = replace(req, drafter=drafter, verify_tokens=1 if drafter == "none" else None)
        ids = []
        for ev in engine.generate(r):
            ids.extend(ev.token_ids)
        s = ev.stats
        outputs.append(ids)
        tokens += s.generated_tokens
        steps += s.steps
        drafted += s.drafted
        m_drafted += s.model_drafted
        m_accepted += s.model_accepted
        ttft += s.ttft_ms
        decode_s += (s.generated_tokens - 1) / s.tokens_per_second if s.tokens_per_second else 0.0
        for k, v in s.accepted_per_step_hist.items():
            hist[k] = hist.get(k, 0) + v
    return {"tokens": tokens, "steps": steps, "per_step": tokens / max(1, steps), "drafted": drafted,
            "model_drafted": m_drafted, "model_accepted": m_accepted,
            "decode_tok_s": (tokens - len(prompts)) / decode_s if decode_s else 0.0,
            "ttft_ms": ttft / len(prompts), "hist": dict(sorted(hist.items())), "outputs": outputs,
            "decode_s": decode_s, "phases": engine.step_times.cells(),
            "hybrid": asdict(engine.hybrid.stats) if engine.hybrid is not None else None}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft-model", default=None, help="default: the model preset's pair")
    ap.add_argument("--limit", type=int, default=2, help="prompts per workload")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--drafters", nargs="+", default=list(DRAFTERS), choices=DRAFTERS)
    args = ap.parse_args(argv)
    draft = args.draft_model or PRESETS[args.model].draft
    engine = LLMEngine(EngineConfig.from_env(model=args.model, draft_model=draft, max_model_len=8192, max_num_seqs=1,
                                             enable_prefix_caching=False))
    workloads = {w: build_prompts(engine.tokenizer, w, args.limit, args.max_tokens) for w in args.workloads}
    # Graphs for every context the runs reach, captured before any is timed.
    engine.warmup(max(4096, max(len(r.prompt_ids) + r.params.max_tokens for ps in workloads.values() for _, r in ps)))
    list(engine.generate(Request(engine.tokenizer.encode("warm up"), SamplingParams(max_tokens=4), drafter="hybrid")))
    results, rows = {}, []
    for w, prompts in workloads.items():
        for d in args.drafters:
            r = run(engine, prompts, d)
            base = results.get(f"{w}/none") or results.get(f"{w}/{args.drafters[0]}")  # None: r is the reference
            r["same_as_plain"] = sum(a == b for a, b in zip(r["outputs"], base["outputs"])) if base else None
            results[f"{w}/{d}"] = r
            acc = f"{r['model_accepted']}/{r['model_drafted']}" if r["model_drafted"] else ""
            rows.append([w, d, r["tokens"], r["steps"], r["per_step"], acc, r["decode_tok_s"], r["ttft_ms"],
                         "" if base is None else f"{r['same_as_plain']}/{len(prompts)}",
                         histogram_text(r["hist"])])
            print(rows[-1], flush=True)
    cfg = engine.cfg
    print(header(f"Drafters by workload ({args.model}, draft model {draft}, {cfg.torch_dtype}, {cfg.torch_device}, "
                 f"{args.limit} prompts each, max_tokens {args.max_tokens})"))
    reference = "plain" if "none" in args.drafters else args.drafters[0]
    print(table(["workload", "drafter", "tokens", "steps", "tokens/step", "model drafts accepted", "decode tok/s",
                 "TTFT ms", f"same output as {reference}", "histogram (tokens/step:steps)"], rows))
    phases = [[*key.split("/"), f"{r['decode_s'] / r['steps'] * 1e6:.0f}", *r["phases"].values()]
              for key, r in results.items() if r["steps"]]
    print("\nHost time per verify step, us (decode wall per step, then the engine's phases; ahead: steps "
          "launched from a plan made during the step before; schedule includes the drafters, collect the wait on the GPU):\n")
    print(table(["workload", "drafter", "decode wall"] + list(StepTimes().cells()), phases))
    model = [[*key.split("/"), h["steps"], h["model_steps"], h["probes"], h["caught_up"], f"{h['model_seconds']:.2f}",
              f"{h['priced_seconds']:.2f}", f"{h['model_seconds'] / r['decode_s']:.0%}" if r["decode_s"] else "",
              h["ahead"], f"{h['ahead_seconds']:.2f}"]
             for key, r in results.items() if (h := r["hybrid"]) and key.split("/")[1] in ("draft", "hybrid")]
    if model:
        print("\nThe draft model's work (steps planned, steps it ran in, probes among them, committed tokens it "
              "read to catch up; its wall seconds against the rule's price, catch-ups included; its share of the "
              "decode time; then its runs drafting ahead, beside the target's step, and their wall seconds):\n")
        print(table(["workload", "drafter", "steps", "model steps", "probes", "caught up", "model s", "priced s",
                     "share", "ahead", "ahead s"], model))
    for r in results.values():
        del r["outputs"]
    save_json(f"drafters_{cfg.torch_device.type}.json", results)


if __name__ == "__main__":
    main()
