"""Plain greedy decoding speed: our engine (no drafts) beside transformers' generate(), same prompt.

Also times a second load of each model from the converted cache (the goal: under 5 seconds).

    python -m bench.plain_decode [--models smollm2-135m qwen2.5-coder-0.5b] [--tokens 128]
"""

from __future__ import annotations

import argparse
import time

import torch

from bench.common import header, save_json, table
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.loader.hf_folder import load_model
from engine.loader.registry import resolve
from engine.types import SamplingParams
from engine.types import Request
from engine.tokenizer import Tokenizer

PROMPT = [{"role": "user", "content": "Write a Python function that parses an ISO 8601 date string "
           "without using datetime, with a docstring and error handling."}]


def time_load(model: str, device, dtype) -> float:
    folder = resolve(model)
    t = time.perf_counter()
    load_model(folder, dtype, device)
    Tokenizer(folder)
    return time.perf_counter() - t


def ours(model: str, ids: list[int], n: int) -> dict:
    engine = LLMEngine(EngineConfig(model=model, drafter="none", verify_tokens=1, max_model_len=2048, max_num_seqs=1))
    params = SamplingParams(max_tokens=n, ignore_eos=True)
    list(engine.generate(Request(ids, SamplingParams(max_tokens=4, ignore_eos=True))))  # warm-up
    t = time.perf_counter()
    out = []
    for ev in engine.generate(Request(ids, params)):
        out.extend(ev.token_ids)
        stats = ev.stats
    total = time.perf_counter() - t
    return {"tokens": out, "seconds": total, "ttft_s": stats.ttft_ms / 1000,
            "decode_tok_s": (len(out) - 1) / (total - stats.ttft_ms / 1000)}


def transformers_generate(model: str, ids: list[int], n: int, device, dtype) -> dict:
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(resolve(model), dtype=dtype).to(device).eval()
    x = torch.tensor([ids], device=device)
    mask = torch.ones_like(x)

    def run(k):
        with torch.inference_mode():
            t = time.perf_counter()
            out = hf.generate(x, attention_mask=mask, max_new_tokens=k, min_new_tokens=k, do_sample=False)
            if device.type == "cuda":
                torch.cuda.synchronize()
            return out[0, len(ids):].tolist(), time.perf_counter() - t

    run(4)  # warm-up
    _, ttft = run(1)
    out, total = run(n)
    return {"tokens": out, "seconds": total, "ttft_s": ttft, "decode_tok_s": (len(out) - 1) / (total - ttft)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen2.5-coder-0.5b"])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--no-hf", action="store_true", help="skip transformers")
    args = ap.parse_args(argv)
    cfg = EngineConfig()
    device, dtype = cfg.torch_device, cfg.torch_dtype
    rows, results = [], {}
    for model in args.models:
        time_load(model, device, dtype)  # first load warms the page cache
        load_s = time_load(model, device, dtype)
        tok = Tokenizer(resolve(model))
        ids = tok.encode_chat(PROMPT)
        r = {"ours": ours(model, ids, args.tokens)}
        if not args.no_hf:
            r["transformers"] = transformers_generate(model, ids, args.tokens, device, dtype)
        same = "yes" if args.no_hf or r["ours"]["tokens"] == r["transformers"]["tokens"] else "no"
        for name, res in r.items():
            rows.append([model, name, len(ids), len(res["tokens"]), res["ttft_s"] * 1000, res["decode_tok_s"],
                         load_s if name == "ours" else "", same])
        results[model] = {k: {kk: vv for kk, vv in v.items() if kk != "tokens"} | {"load_s": load_s} for k, v in r.items()}
    print(header(f"Plain greedy decode ({dtype}, {device})"))
    print(table(["model", "engine", "prompt tok", "output tok", "TTFT ms", "decode tok/s", "cached load s",
                 "same tokens"], rows))
    save_json("plain_decode.json", results)


if __name__ == "__main__":
    main()
