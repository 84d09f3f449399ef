"""The RAG workload: one long document, many questions; and what each KV storage format costs.

1. A document of ~8k tokens (real code from the dev set, concatenated) and 10 quoting questions,
   asked one after another: time to first token of the first question (the whole document is
   prefilled) against the later ones (the document's blocks come from the prefix cache), and
   committed tokens per verify step on the answers (drafted from the document).
2. KV bytes per token and the longest context that fits a KV budget, per storage format.
3. Quality cost per format: KL divergence of next-token distributions and top-1 agreement
   against the unquantized cache, on real code.

    python -m bench.rag [--model qwen2.5-coder-0.5b] [--doc-tokens 8000] [--questions 10]
    python -m bench.rag --kl-only   # 2 and 3 only
"""

from __future__ import annotations

import argparse
import gc
import re
import time

import torch

from bench.common import header, load_dev, save_json, table, teacher_forced_logits
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.kv_cache import kv_bytes_per_token
from engine.rag import rag_request
from prompts.rag import rag_messages
from engine.types import GenerationStats, SamplingParams
from engine.types import Request
from engine.speculative.drafters import make_drafter

KV_FORMATS = ("auto", "fp8", "int8", "int4")


def build_document(tok, n_tokens: int) -> tuple[str, list[str]]:
    """Real files from the dev set joined until ~n_tokens; names of functions defined in them."""
    parts, total = [], 0
    for row in load_dev():
        if row["language"] not in ("python", "go"):
            continue
        text = f"# file: {row['path']}\n{row['original']}"
        parts.append(text)
        total += len(tok.encode(text))
        if total >= n_tokens:
            break
    doc = "\n".join(parts)
    names = re.findall(r"^(?:def|func) (?:\([^)]*\) )?([A-Za-z_]\w{3,})\(", doc, flags=re.M)
    return doc, list(dict.fromkeys(names))


def ask(engine, doc: str, question: str, max_tokens: int) -> tuple[GenerationStats, str]:
    """The answer's stats and text."""
    req = rag_request(engine.tokenizer, [{"id": "code", "text": doc}], question, SamplingParams(max_tokens=max_tokens))
    ids = []
    for ev in engine.generate(req):
        stats = ev.stats
        ids.extend(ev.token_ids)
    return stats, engine.tokenizer.decode(ids)


def host_overhead(engine, doc: str, questions: list[str]) -> list[float]:
    """Milliseconds of host-side work per question before the first forward: the request (chat
    template, tokenizing), the drafter's indexes and its first proposal. Part of every TTFT; on a
    GPU, where prefilling the question's tail takes a few ms, most of the later questions' TTFT."""
    out = []
    for q in questions:
        t = time.perf_counter()
        req = rag_request(engine.tokenizer, [{"id": "code", "text": doc}], q, SamplingParams(max_tokens=8))
        drafter = make_drafter("lookup", req.sources, len(req.prompt_ids), engine.draft_config)
        drafter.propose(list(req.prompt_ids), 15)
        out.append(1e3 * (time.perf_counter() - t))
    return out


def workload(model: str, doc_tokens: int, questions: int, max_tokens: int) -> dict:
    engine = LLMEngine(EngineConfig.from_env(model=model, max_num_seqs=1))  # the model's whole context
    doc, names = build_document(engine.tokenizer, doc_tokens)
    names = names[:: max(1, len(names) // questions)][:questions]
    if len(names) < 2:
        raise SystemExit(f"the {doc_tokens}-token document defines {len(names)} function(s); need 2+ questions")
    qs = [f"Quote the complete definition of `{n}` exactly as it appears in the document." for n in names]
    list(engine.generate(Request(engine.tokenizer.encode("warm up"), SamplingParams(max_tokens=2))))
    engine.warmup(len(engine.tokenizer.encode(doc)) + 512)
    gc.collect()
    gc.freeze()  # as EngineService does for a server's lifetime
    rows, answers = [], []
    for i, q in enumerate(qs):
        s, answer = ask(engine, doc, q, max_tokens)
        rows.append({"question": i + 1, "prompt_tokens": s.prompt_tokens, "cached": s.cached_prompt_tokens,
                     "ttft_ms": s.ttft_ms, "tokens": s.generated_tokens, "steps": s.steps,
                     "per_step": s.accepted_per_step, "tok_s": s.tokens_per_second})
        print(rows[-1], flush=True)
        answers.append({"question": q, "answer": answer})
    host = host_overhead(engine, doc, qs)
    whole = sum(rag_request(engine.tokenizer, [{"id": "code", "text": doc}], q).prompt_ids == engine.tokenizer.encode_chat(
        [{"role": "user", "content": "".join(rag_messages([{"id": "code", "text": doc}], q)[0]["content"])}]) for q in qs)
    gc.unfreeze()
    first, later = rows[0]["ttft_ms"], sorted(r["ttft_ms"] for r in rows[1:])
    return {"rows": rows, "ttft_first_ms": first, "ttft_later_median_ms": later[len(later) // 2],
            "hit_blocks": engine.kv.blocks.hits, "answers": answers, "host_ms": host, "engine": engine,
            "same_ids": f"{whole} of {len(qs)}"}


def kl_per_format(engine: LLMEngine, model: str, text_tokens: list[int]) -> list[list]:
    """KL(p_ref || p_fmt) and top-1 agreement over a real code sequence, per KV format."""
    from engine.runner import ModelRunner

    def logits_with(kv_dtype: str) -> torch.Tensor:
        runner = ModelRunner(EngineConfig.from_env(model=model, kv_dtype=kv_dtype, max_model_len=len(text_tokens) + 64,
                                                   max_num_seqs=1, enable_prefix_caching=False, enforce_eager=True))
        # Chunks of 256: later chunks attend over earlier chunks' stored (quantized) K/V.
        return teacher_forced_logits(runner, text_tokens, 256)

    ref = logits_with("auto").log_softmax(-1)
    rows = []
    for fmt in KV_FORMATS[1:]:
        lp = logits_with(fmt).log_softmax(-1)
        kl = (ref.exp() * (ref - lp)).sum(-1).mean().item()
        top1 = (ref.argmax(-1) == lp.argmax(-1)).float().mean().item()
        rows.append([fmt, f"{kl:.5f}", f"{top1:.3f}"])
    return rows


def kv_formats_only(args) -> None:
    from engine.runner import ModelRunner

    cfg = EngineConfig.from_env(model=args.model, max_model_len=args.kl_tokens + 64, max_num_seqs=1)
    runner = ModelRunner(cfg)
    mc, tok = runner.model_config, runner.tokenizer
    del runner
    print(header(f"KV storage formats ({args.model}, {cfg.torch_dtype}, {cfg.torch_device})"))
    budget = args.kv_budget_gib or (40.0 if cfg.torch_device.type == "cuda" else 1.0)
    rows = []
    for fmt in KV_FORMATS:
        b = kv_bytes_per_token(fmt, mc.num_layers, mc.num_kv_heads, mc.head_dim, cfg.torch_dtype, cfg.block_size)
        rows.append([fmt if fmt != "auto" else str(cfg.torch_dtype).replace("torch.", ""), b, int(budget * 2**30 // b)])
    print(table(["KV format", "bytes/token", f"max tokens in {budget:g} GiB"], rows))
    doc, _ = build_document(tok, args.kl_tokens)
    kl_rows = kl_per_format(None, args.model, tok.encode(doc)[: args.kl_tokens])
    print()
    print(table(["KV format", f"KL vs {cfg.torch_dtype} (nats/token)", "top-1 agreement"], kl_rows))
    save_json(f"rag_kv_{cfg.torch_device.type}.json", {"kv": rows, "kl": kl_rows})


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--doc-tokens", type=int, default=8000)
    ap.add_argument("--questions", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--kl-tokens", type=int, default=1024)
    ap.add_argument("--kv-budget-gib", type=float, default=None, help="KV memory for the max-context column")
    ap.add_argument("--kl-only", action="store_true", help="skip the workload: bytes/token, KL and top-1 only")
    args = ap.parse_args(argv)
    if args.kl_only:
        return kv_formats_only(args)

    t = time.perf_counter()
    w = workload(args.model, args.doc_tokens, args.questions, args.max_tokens)
    engine = w.pop("engine")
    cfg, mc = engine.cfg, engine.runner.model_config
    print(header(f"RAG: one ~{args.doc_tokens}-token document, {args.questions} questions ({args.model}, "
                 f"{cfg.torch_dtype}, {cfg.torch_device})"))
    print(table(["question", "prompt tok", "cached tok", "TTFT ms", "answer tok", "steps", "tokens/step", "tok/s"],
                [list(r.values()) for r in w["rows"]]))
    ratio = w["ttft_later_median_ms"] / w["ttft_first_ms"]
    print(f"\nTTFT first {w['ttft_first_ms']:.0f} ms, later (median) {w['ttft_later_median_ms']:.0f} ms "
          f"= {ratio:.1%} of the first (goal <= 10%); prefix-cache hit blocks {w['hit_blocks']}")
    host = sorted(w["host_ms"])
    print(f"host-side work per question (request, drafter indexes, first proposal): median "
          f"{host[len(host) // 2]:.1f} ms, max {host[-1]:.1f} ms; prompts tokenized in pieces that equal the whole "
          f"prompt tokenized: {w['same_ids']}\n")

    budget = args.kv_budget_gib or (40.0 if cfg.torch_device.type == "cuda" else 1.0)
    rows = []
    for fmt in KV_FORMATS:
        b = kv_bytes_per_token(fmt, mc.num_layers, mc.num_kv_heads, mc.head_dim, cfg.torch_dtype, cfg.block_size)
        rows.append([fmt if fmt != "auto" else str(cfg.torch_dtype).replace("torch.", ""), b,
                     int(budget * 2**30 // b)])
    print(table(["KV format", "bytes/token", f"max tokens in {budget:g} GiB"], rows))
    doc, _ = build_document(engine.tokenizer, args.kl_tokens)
    text = engine.tokenizer.encode(doc)[: args.kl_tokens]
    del engine
    kl_rows = kl_per_format(None, args.model, text)
    print()
    print(table(["KV format", f"KL vs {cfg.torch_dtype} (nats/token)", "top-1 agreement"], kl_rows))
    print(f"\n(total {time.perf_counter() - t:.0f} s)")
    save_json(f"rag_{cfg.torch_device.type}.json", {**w, "kv": rows, "kl": kl_rows, "ttft_ratio": ratio})


if __name__ == "__main__":
    main()
