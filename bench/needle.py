"""Needles in a long document, per KV format: facts planted at several depths of real code, asked for.

The document is real source files from the dev set (bench/rag.py `build_document`), cut to fit
each length with room for the question and the answer; one fact per depth (10%, 50%, 90% of
the document by default) is planted on a line of its own, as a code comment:

    # The deploy key for service amber-falcon is 418302.

(names and digits random, seeded). Each fact is asked for by a RAG request (engine/rag.py),
greedy, with a short answer; it is found when the answer contains the planted digits. A fresh
engine per KV format and length: the first question prefills the whole document (its time to
first token is the prefill cost), the later ones take the document from the prefix cache. Decode
speed at that context: a plain decode (no drafts) of --decode-tokens tokens after the document.

    python -m bench.needle [--model qwen2.5-coder-0.5b] [--lengths 8192 16384 32768] [--formats auto fp8 int8 int4]
    python -m bench.needle --lengths 2048 --formats auto int4   # a quick check on a CPU
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from dataclasses import replace

import torch

from bench.common import header, save_json, table
from bench.rag import ask, build_document
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.rag import rag_request
from engine.service import config_for, tokenizer_for
from engine.types import Request, SamplingParams

KV_FORMATS = ("auto", "fp8", "int8", "int4")
FACT = "# The deploy key for service {name} is {key}."
QUESTION = "What is the deploy key for service {name}? Answer with the number only."
ADJECTIVES = ("amber", "brisk", "cobalt", "dusty", "eager", "frosty", "gentle", "hollow", "ivory", "jolly")
NOUNS = ("falcon", "harbor", "lantern", "meadow", "nebula", "orchard", "pebble", "quarry", "river", "summit")
# Prompt tokens besides the document (chat template, question) and the planted lines, with slack.
ROOM, FACT_TOKENS = 128, 24


def make_facts(n: int, seed: int) -> list[tuple[str, str]]:
    """n (service name, 6-digit key) pairs, distinct names."""
    rng = random.Random(seed)
    names = rng.sample([f"{a}-{b}" for a in ADJECTIVES for b in NOUNS], n)
    return [(name, str(rng.randrange(100000, 1000000))) for name in names]


def cut(tok, text: str, n_tokens: int) -> str:
    """The longest prefix of `text` that ends a line and has at most `n_tokens` tokens."""
    lo, hi = 0, len(text)  # binary search over the prefix's characters
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(tok.encode(text[:mid])) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[: text.rfind("\n", 0, lo) + 1]


def plant(text: str, facts: list[tuple[str, str]], depths: list[float]) -> str:
    """`text` with each fact on a line of its own before the first line starting past its depth
    (a fraction of the characters)."""
    pending = sorted(zip(depths, facts))
    out, pos = [], 0
    for line in text.splitlines(keepends=True):
        while pending and pos >= pending[0][0] * len(text):
            name, key = pending.pop(0)[1]
            out.append(FACT.format(name=name, key=key) + "\n")
        out.append(line)
        pos += len(line)
    out += [FACT.format(name=name, key=key) + "\n" for _, (name, key) in pending]
    return "".join(out)


def run(model: str, kv_dtype: str, doc: str, facts, depths, max_tokens: int, decode_tokens: int) -> dict:
    """One engine, one document: every fact asked for, then a plain decode after the document."""
    engine = LLMEngine(EngineConfig.from_env(model=model, kv_dtype=kv_dtype, max_num_seqs=1))
    tok = engine.tokenizer
    list(engine.generate(Request(tok.encode("warm up"), SamplingParams(max_tokens=2))))
    engine.warmup(len(tok.encode(doc)) + ROOM + decode_tokens)  # CUDA graphs, outside the timing
    answers, ttfts, misses = [], [], []
    for depth, (name, key) in zip(depths, facts):
        stats, answer = ask(engine, doc, QUESTION.format(name=name), max_tokens)
        ttfts.append(stats.ttft_ms)
        answers.append({"depth": depth, "name": name, "key": key, "answer": answer, "found": key in answer})
        if key not in answer:
            misses.append(f"{depth:.0%}")
        if len(answers) == 1:
            prompt_tokens, first = stats.prompt_tokens, stats
    req = rag_request(tok, [{"id": "code", "text": doc}], "Describe the document.",
                      SamplingParams(max_tokens=decode_tokens, ignore_eos=True))
    for ev in engine.generate(replace(req, drafter="none", verify_tokens=1)):
        decode = ev.stats
    label = str(engine.cfg.torch_dtype).removeprefix("torch.") if kv_dtype == "auto" else kv_dtype
    device = engine.cfg.torch_device.type
    del engine
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    later = sorted(ttfts[1:])
    return {"kv": label, "prompt_tokens": prompt_tokens, "cached_first": first.cached_prompt_tokens,
            "found": sum(a["found"] for a in answers), "asked": len(answers), "misses": misses,
            "prefill_s": first.ttft_ms / 1e3, "prefill_tok_s": prompt_tokens / (first.ttft_ms / 1e3),
            "later_ttft_ms": later[len(later) // 2] if later else None,
            "decode_tok_s": decode.tokens_per_second, "decode_context": decode.prompt_tokens,
            "answers": answers}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--lengths", type=int, nargs="+", default=[8192, 16384, 32768], help="prompt + answer tokens")
    ap.add_argument("--formats", nargs="+", default=list(KV_FORMATS), choices=KV_FORMATS)
    ap.add_argument("--depths", type=float, nargs="+", default=[0.1, 0.5, 0.9], help="where facts go (fractions)")
    ap.add_argument("--max-tokens", type=int, default=32, help="answer length")
    ap.add_argument("--decode-tokens", type=int, default=64, help="the plain decode measured after the document")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    cfg = config_for(EngineConfig.from_env(model=args.model))
    tok = tokenizer_for(cfg)
    limit = cfg.max_model_len
    print(header(f"Needles in a long document ({args.model}, {cfg.torch_dtype}, {cfg.torch_device}; "
                 f"context {limit} tokens; facts at {', '.join(f'{d:.0%}' for d in args.depths)})"))
    lengths = []
    for n in args.lengths:
        if n > limit:
            print(f"length {n}: over the model's context of {limit} tokens (max_model_len); skipped")
        else:
            lengths.append(n)
    text, _ = build_document(tok, max(lengths, default=0))
    facts = make_facts(len(args.depths), args.seed)
    rows, results = [], []
    for n in lengths:
        doc_tokens = n - ROOM - max(args.max_tokens, args.decode_tokens) - FACT_TOKENS * len(facts)
        doc = plant(cut(tok, text, doc_tokens), facts, args.depths)
        for fmt in args.formats:
            r = run(args.model, fmt, doc, facts, args.depths, args.max_tokens, args.decode_tokens)
            results.append({"length": n, **r})
            rows.append([r["kv"], n, r["prompt_tokens"], f"{r['found']}/{r['asked']}", " ".join(r["misses"]) or "-",
                         round(r["prefill_s"], 2), round(r["prefill_tok_s"]), r["later_ttft_ms"], r["decode_tok_s"]])
            print(rows[-1], flush=True)
    print()
    print(table(["KV format", "length", "prompt tok", "found", "missed depths", "prefill s (1st TTFT)",
                 "prefill tok/s", "later TTFT ms (median)", f"decode tok/s ({args.decode_tokens}, no drafts)"], rows))
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    save_json(f"needle_{cfg.torch_device.type}.json", {"model": args.model, "depths": args.depths, "results": results})


if __name__ == "__main__":
    main()
