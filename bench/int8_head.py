"""int8 weight-only embeddings and lm_head (EDITAPPLY_INT8_HEAD): quality cost and lm_head time.

Quality: teacher-forced over dev apply cases (prompt + expected answer), the next-token
distributions with the float head against the int8 head, on the answer tokens: KL(p_float ||
p_int8) in nats/token and top-1 agreement. Everything else (weights, KV format, attention) is the
same in both runs.

Time (`--micro`, CUDA): the lm_head alone for M rows (1, 16, 128) in the model's dtype: the float
matmul the engine runs without the switch, the Triton int8 kernel (a few block sizes), and the
chunked reference, each captured in a CUDA graph (as the engine runs them) and timed with
`triton.testing.do_bench` (bench/common.py `bench_us`).

    python -m bench.int8_head [--model qwen2.5-coder-0.5b] [--limit 3]
    python -m bench.int8_head --micro [--shape qwen2.5-coder-1.5b]
"""

from __future__ import annotations

import argparse

import torch

from bench.common import header, load_dev, save_json, table, teacher_forced_logits


def answer_logits(model: str, int8_head: bool, cases: list[dict]) -> list[torch.Tensor]:
    """Per case, logits [answer tokens, vocab] fp32 predicting each answer token (teacher-forced)."""
    from engine.config import EngineConfig
    from engine.runner import ModelRunner

    longest = max(len(c["ids"]) for c in cases)
    runner = ModelRunner(EngineConfig.from_env(model=model, int8_head=int8_head, max_model_len=longest + 64,
                                               max_num_seqs=1, enable_prefix_caching=False, enforce_eager=True))
    out = []
    for c in cases:
        ids, n_prompt = c["ids"], c["n_prompt"]
        # Row i predicts token i + 1: the answer's tokens are predicted by rows n_prompt-1 .. len-2.
        out.append(teacher_forced_logits(runner, ids, 512)[n_prompt - 1 : len(ids) - 1])
    del runner
    return out


def quality(args) -> None:
    from bench.spec_decode import build_apply_prompt
    from engine.loader.registry import resolve
    from engine.tokenizer import Tokenizer

    tok = Tokenizer(resolve(args.model))
    cases = []
    for r in load_dev(args.limit, spread=False):
        prompt = build_apply_prompt(r["original"], r["update_snippet"], r["instruction"], r["language"], form="rewrite")
        p_ids, a_ids = prompt.prompt_ids(tok), tok.encode(prompt.predicted_answer(r["expected"]))
        cases.append({"id": r["id"], "ids": p_ids + a_ids, "n_prompt": len(p_ids)})
    ref = answer_logits(args.model, False, cases)
    q = answer_logits(args.model, True, cases)
    rows, kl_all, top1_all = [], [], []
    for c, a, b in zip(cases, ref, q):
        lp, lq = a.log_softmax(-1), b.log_softmax(-1)
        kl = (lp.exp() * (lp - lq)).sum(-1)  # [answer tokens]
        top1 = (a.argmax(-1) == b.argmax(-1)).float()
        kl_all.append(kl)
        top1_all.append(top1)
        rows.append([c["id"], len(c["ids"]), len(kl), f"{kl.mean():.2e}", f"{kl.max():.2e}", f"{top1.mean():.4f}"])
    kl, top1 = torch.cat(kl_all), torch.cat(top1_all)
    rows.append(["all", "", len(kl), f"{kl.mean():.2e}", f"{kl.max():.2e}", f"{top1.mean():.4f}"])
    dtype = "fp32" if not torch.cuda.is_available() else "auto dtype"
    print(header(f"int8 head and embeddings vs float ({args.model}, {dtype}, {len(cases)} dev cases, answer tokens)"))
    print(table(["case", "tokens", "answer tokens", "KL nats/token", "max KL", "top-1 agreement"], rows))
    save_json("int8_head_quality.json", {"model": args.model, "rows": rows})


def micro(args) -> None:
    from bench.common import bench_us
    from bench.step_time import SHAPES
    from kernels.int8_linear import linear_int8, quantize_rows
    from kernels.int8_linear.weight_only import linear_int8_triton

    spec = SHAPES[args.shape]
    N, K = spec["vocab_size"], spec["hidden_size"]
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.02
    q, s = quantize_rows(w)
    rows = []
    for M in (1, 16, 128):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        # x and M bound as defaults: each lambda runs in this iteration anyway.
        fns = {"bf16 matmul + float() (switch off)": lambda x=x: (x @ w.t()).float(),
               "int8 Triton (switch on)": lambda x=x: linear_int8(x, q, s, "triton"),
               "int8 Triton, block_n=128": lambda x=x: linear_int8_triton(x, q, s, block_n=128),
               "int8 Triton, block_n=32, block_k=256": lambda x=x: linear_int8_triton(x, q, s, block_n=32, block_k=256),
               "int8 Triton, block_m=64": lambda x=x, M=M: linear_int8_triton(x, q, s, block_m=max(16, min(64, M))),
               "int8 ref (chunked dequant)": lambda x=x: linear_int8(x, q, s, "ref")}
        base = None
        for name, fn in fns.items():
            us = bench_us(fn)
            base = base or us
            rows.append([M, name, f"{us:.1f}", f"{base / us:.2f}"])
        exact = x.float() @ w.float().t()
        err = (linear_int8(x, q, s, "triton") - exact).abs().max().item()
        rows.append([M, f"int8 Triton: max abs error vs fp32 (logits' std {exact.std():.2f})", f"{err:.4f}", ""])
    print(header(f"lm_head alone, {args.shape} shape ({N} x {K}), bf16 activations"))
    print(table(["M rows", "variant", "µs", "speed-up vs bf16"], rows))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--limit", type=int, default=3, help="dev cases, the smallest first")
    ap.add_argument("--micro", action="store_true", help="CUDA: time the lm_head alone")
    ap.add_argument("--shape", default="qwen2.5-coder-0.5b")
    args = ap.parse_args(argv)
    micro(args) if args.micro else quality(args)


if __name__ == "__main__":
    main()
