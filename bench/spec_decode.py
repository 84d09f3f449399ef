"""Speculative decoding on apply prompts from the dev set: our drafters beside the peers.

Every configuration decodes greedily the same prompts (original file + update snippet, rendered
with the apply template) with the same model on the same machine, one request at a time:
  ours:  plain (K=1) | lookup K=64 + predicted merge (the engine's default) | lookup K=16 |
         lookup K=16 + predicted merge | ngram-earliest K=16 | pld K=16, or any other K ("lookup
         K=32 +prediction": each K its own engine, whose graphs are that K's)
  peers: transformers generate() plain and prompt_lookup_num_tokens=15; vLLM (CPU) ngram k=15
Reported: tokens/s (decode, after the first token), committed tokens per verify step (mean and
histogram), acceptance, and whether every greedy output is identical to plain decoding.

    python -m bench.spec_decode [--limit 4] [--model qwen2.5-coder-0.5b] [--no-hf] [--no-vllm]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from bench.common import BENCH, Mode, header, histogram_text, load_dev, save_json, table
from engine.config import EngineConfig
from engine.engine import LLMEngine, StepTimes
from engine.loader.registry import resolve
from engine.types import SamplingParams
from engine.types import Request
from prompts.apply import build_apply_prompt

# bench.common.Mode names: the engine's default blocks (64), then K=16's, the peers' block.
OURS = ["plain", "lookup K=64 +prediction", "lookup K=16", "lookup K=16 +prediction", "ngram-earliest K=16", "pld K=16"]
VLLM_PYTHON = BENCH.parent / ".venv-vllm" / "bin" / "python"


def build_cases(tok, rows, margin: int = 64) -> list[dict]:
    from engine.apply import merge

    cases = []
    for r in rows:
        # The plain apply prompt (original + snippet), as every peer sees it.
        prompt = build_apply_prompt(r["original"], r["update_snippet"], r["instruction"], r["language"], form="rewrite")
        merged = merge(r["original"], r["update_snippet"], language=r["language"]).text
        expected_answer = prompt.predicted_answer(r["expected"])
        cases.append({
            "id": r["id"],
            "prompt_ids": prompt.prompt_ids(tok),
            "sources": {"original": tok.encode(r["original"]), "snippet": tok.encode(r["update_snippet"])},
            "prediction": tok.encode(prompt.predicted_answer(merged)),
            "max_tokens": len(tok.encode(expected_answer)) + margin,
        })
    return cases


def run_ours(engine: LLMEngine, cases: list[dict], drafter: str, k: int, use_prediction: bool) -> dict:
    engine.step_times = StepTimes()
    outputs, hist, gen, steps, drafted, accepted, decode_s, total_s = {}, {}, 0, 0, 0, 0, 0.0, 0.0
    for c in cases:
        sources = dict(c["sources"])
        if use_prediction:
            sources = {"prediction": c["prediction"], **sources}
        req = Request(c["prompt_ids"], SamplingParams(max_tokens=c["max_tokens"]), sources=sources,
                      drafter=drafter, verify_tokens=k)
        toks = []
        for ev in engine.generate(req):
            toks.extend(ev.token_ids)
            stats = ev.stats
        outputs[c["id"]] = toks
        for kk, v in stats.accepted_per_step_hist.items():
            hist[kk] = hist.get(kk, 0) + v
        gen += stats.generated_tokens
        steps += stats.steps
        drafted += stats.drafted
        accepted += stats.accepted
        total_s += stats.seconds
        decode_s += stats.seconds - stats.ttft_ms / 1000
    return {"outputs": outputs, "tokens": gen, "steps": steps, "hist": hist, "drafted": drafted,
            "accepted": accepted, "decode_s": decode_s, "total_s": total_s,
            "decode_tok_s": (gen - len(cases)) / decode_s, "phases": engine.step_times.cells(),
            "digests": {i: hashlib.sha1(str(t).encode()).hexdigest()[:12] for i, t in outputs.items()}}


def run_transformers(folder, cases: list[dict], device, dtype, lookup: int | None) -> dict:
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    calls = [0]
    hf.register_forward_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))

    def generate(ids, n):
        x = torch.tensor([ids], device=device)
        kw = {"prompt_lookup_num_tokens": lookup} if lookup else {}
        with torch.inference_mode():
            out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False, **kw)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return out[0, len(ids):].tolist()

    generate(cases[0]["prompt_ids"][:64], 4)  # warm-up
    outputs, gen, steps, decode_s, total_s = {}, 0, 0, 0.0, 0.0
    for c in cases:
        t = time.perf_counter()
        generate(c["prompt_ids"], 1)
        ttft = time.perf_counter() - t
        calls[0] = 0
        t = time.perf_counter()
        toks = generate(c["prompt_ids"], c["max_tokens"])
        total = time.perf_counter() - t
        # eos ends HF's output without being returned as ours does; count it the same way
        outputs[c["id"]] = toks
        gen += len(toks)
        steps += calls[0] - 1  # the first call is the prefill
        total_s += total
        decode_s += total - ttft
    return {"outputs": outputs, "tokens": gen, "steps": steps, "hist": {}, "decode_s": decode_s,
            "total_s": total_s, "decode_tok_s": (gen - len(cases)) / decode_s}


def run_vllm(folder, cases: list[dict], spec: bool) -> dict | None:
    if not VLLM_PYTHON.exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "prompts.jsonl", Path(tmp) / "out.jsonl"
        inp.write_text("\n".join(json.dumps({"id": c["id"], "prompt_ids": c["prompt_ids"],
                                             "max_tokens": c["max_tokens"]}) for c in cases))
        cmd = [str(VLLM_PYTHON), str(BENCH / "peers" / "vllm_ngram.py"), "--model", str(folder),
               "--prompts", str(inp), "--out", str(out), "--enforce-eager"] + ([] if spec else ["--no-spec"])
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            print(f"vllm peer failed:\n{res.stderr[-3000:]}")
            return None
        recs = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    recs = [r for r in recs if "id" in r]
    hist: dict[int, int] = {}
    for r in recs:
        for k, v in r.get("committed_hist", {}).items():
            hist[int(k)] = hist.get(int(k), 0) + v
    gen = sum(len(r["output_ids"]) for r in recs)
    steps = sum(r.get("steps", 0) for r in recs)
    decode_s = sum(r.get("decode_seconds", r["seconds"]) for r in recs)
    return {"outputs": {r["id"]: r["output_ids"] for r in recs}, "tokens": gen, "steps": steps, "hist": hist,
            "decode_s": decode_s, "total_s": sum(r["seconds"] for r in recs),
            "decode_tok_s": (gen - len(recs)) / decode_s if decode_s else 0.0,
            "accepted": sum(r.get("num_accepted_tokens", 0) for r in recs),
            "drafted": sum(r.get("num_draft_tokens", 0) for r in recs)}


def same_prefix_rate(a: dict, b: dict) -> str:
    """How many outputs are identical (ignoring a trailing eos that one side keeps)."""
    same = sum(1 for k in a if k in b and a[k][: len(b[k])] == b[k][: len(a[k])])
    return f"{same}/{len(a)}"


def plot(results: dict, path_prefix: Path) -> list[Path]:
    """The charts' files; none where matplotlib is not installed (the tables and JSON stand alone)."""
    try:
        import matplotlib
    except ImportError:
        print("charts skipped: matplotlib is not installed")
        return []

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    hists = {name: r["hist"] for name, r in results.items() if r.get("hist") and name != "plain"}
    if hists:
        fig, axes = plt.subplots(1, len(hists), figsize=(4 * len(hists), 3), sharey=True)
        for ax, (name, hist) in zip(axes if len(hists) > 1 else [axes], hists.items()):
            total = sum(hist.values())
            ks = range(1, 17)
            ax.bar(ks, [hist.get(k, 0) / total for k in ks], color="tab:blue")
            mean = sum(k * v for k, v in hist.items()) / total
            ax.set_title(f"{name}\nmean {mean:.2f} tokens/step", fontsize=9)
            ax.set_xlabel("tokens committed per step")
        (axes[0] if len(hists) > 1 else axes).set_ylabel("fraction of steps")
        fig.tight_layout()
        p = Path(f"{path_prefix}_hist.png")
        fig.savefig(p, dpi=110)
        paths.append(p)
    fig, ax = plt.subplots(figsize=(8, 3.2))
    names = list(results)
    ax.barh(names, [results[n]["decode_tok_s"] for n in names],
            color=["tab:green" if n.startswith("lookup") else "tab:gray" for n in names])
    ax.set_xlabel("decode tokens/s (greedy, batch 1)")
    ax.invert_yaxis()
    fig.tight_layout()
    p = Path(f"{path_prefix}_speed.png")
    fig.savefig(p, dpi=110)
    paths.append(p)
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--limit", type=int, default=4, help="dev cases (0 = all 60)")
    ap.add_argument("--smallest", action="store_true", help="take the smallest cases instead of a spread")
    ap.add_argument("--configs", nargs="+", default=list(OURS), help="our configurations to run")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--plot", default=None, help="path prefix for the PNG charts (default: bench/spec_decode_<device>)")
    ap.add_argument("--replot", nargs="+", metavar="JSON", default=None,
                    help="only draw the charts from saved results (later files override configs of the same name)")
    args = ap.parse_args(argv)
    if args.replot:
        merged = {}
        for f in args.replot:
            for name, r in json.loads(Path(f).read_text()).items():
                merged[name] = {**r, "hist": {int(k): v for k, v in r.get("hist", {}).items()}}
        for p in plot(merged, Path(args.plot or "spec_decode")):
            print(f"chart: {p}")
        return

    modes = {name: Mode.parse(name) for name in args.configs}
    cfg = EngineConfig.from_env(model=args.model, max_num_seqs=1)
    # One engine per verify block K, built in turn (each takes its share of the GPU's memory);
    # plain runs on the default K's.
    by_k = {}
    for name, mode in modes.items():
        by_k.setdefault(mode.engine_k(cfg.verify_tokens), []).append(name)
    results, cases = {}, None
    for k, names in by_k.items():
        engine = LLMEngine(cfg.model_copy(update={"verify_tokens": k}))
        if cases is None:
            rows = load_dev(args.limit or None, spread=not args.smallest)
            cases = build_cases(engine.tokenizer, rows)
        list(engine.generate(Request(cases[0]["prompt_ids"][:64], SamplingParams(max_tokens=4))))  # warm-up
        engine.warmup(max(len(c["prompt_ids"]) + c["max_tokens"] for c in cases))  # CUDA graphs, outside the timing
        for name in names:
            mode = modes[name]
            results[name] = run_ours(engine, cases, mode.drafter, mode.k, mode.prediction)
            print(f"{name}: {results[name]['decode_tok_s']:.2f} tok/s", flush=True)
        del engine
        gc.collect()
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    results = {name: results[name] for name in args.configs}  # the table in the order asked
    folder = resolve(args.model)
    if not args.no_hf:
        for name, lookup in (("transformers plain", None), ("transformers PLD 15", 15)):
            results[name] = run_transformers(folder, cases, cfg.torch_device, cfg.torch_dtype, lookup)
            print(f"{name}: {results[name]['decode_tok_s']:.2f} tok/s", flush=True)
    if not args.no_vllm and cfg.torch_device.type == "cpu":
        for name, spec in (("vLLM ngram k=15", True),):
            r = run_vllm(folder, cases, spec)
            if r:
                results[name] = r

    ref_name = "plain" if "plain" in results else next(iter(results))
    ref = results[ref_name]["outputs"]
    table_rows = []
    for name, r in results.items():
        mean = r["tokens"] / r["steps"] if r["steps"] else float("nan")
        acc = f"{r['accepted'] / r['drafted']:.1%}" if r.get("drafted") else ""
        table_rows.append([name, r["tokens"], r["steps"], mean, acc, r["decode_tok_s"], r["total_s"],
                           same_prefix_rate(r["outputs"], ref), histogram_text(r["hist"])])
    print(header(f"Speculative decoding on apply prompts ({args.model}, {cfg.torch_dtype}, {cfg.torch_device}, "
                 f"{len(cases)} dev cases, greedy, batch 1)"))
    print(table(["config", "tokens", "steps", "tokens/step", "draft acceptance", "decode tok/s", "total s",
                 f"same output as {ref_name}", "histogram (tokens/step:steps)"], table_rows))
    phases = [[name, f"{r['decode_s'] / r['steps'] * 1e6:.0f}"] + list(r["phases"].values())
              for name, r in results.items() if r.get("phases") and r["steps"]]
    if phases:
        print("\nHost time per verify step, us (decode wall per step, then the engine's phases; "
              "ahead: steps launched from a plan made while the step before ran; collect includes wait, the time "
              "blocked on the GPU):\n")
        print(table(["config", "decode wall"] + list(StepTimes().cells()), phases))
    save_json(f"spec_decode_{cfg.torch_device.type}.json",
              {n: {k: v for k, v in r.items() if k != "outputs"} for n, r in results.items()})
    for p in plot(results, Path(args.plot or BENCH / f"spec_decode_{cfg.torch_device.type}")):
        print(f"chart: {p}")


if __name__ == "__main__":
    main()
