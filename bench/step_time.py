"""Time of one decode step (K=1) and one verify step (K=16, or the blocks of `--k`) at several context lengths.

Random weights in a real model's shape (Qwen2.5-Coder-0.5B by default) suffice for timing: the
work per step does not depend on the weights' values. Compares our engine with CUDA graphs,
without (eager), and transformers' eager forward with its KV cache, against the floor of reading
the weights a step reads once (`step_weight_bytes` over the card's memory bandwidth: `floor_bandwidth`). With CUDA graphs also the K=16 step "planned
ahead": launched as soon as the step before is read back, its inputs staged meanwhile, as the
engine runs most verify steps of copied text (Scheduler.plan_ahead). Also checks that graph replay and eager give the
same greedy tokens, drafts and all.

Each engine (a variant -- graphs or eager, attention, int8 head, PDL, packed weights -- at one
verify block of --k) is timed, then profiled, in a fresh process of its own, on the same random
weights: a step timed after another engine ran in the process reads slow (bench/HISTORY.md,
"Profiled, then timed"). `--one-process` for all in one.

`--beside SHAPE`: a draft model of SHAPE (random weights too) writing n tokens on its own stream
while the target's K=16 step runs, as the hybrid drafter drafts ahead (engine/speculative/hybrid.py):
the target's step alone, the draft's n tokens alone, and both launched together.

    python -m bench.step_time [--shape qwen2.5-coder-0.5b] [--contexts 1024 4096 8192]
        [--beside qwen2.5-coder-0.5b] [--packed-weights off on (the CPU)]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import torch

from bench.common import header, save_json, table

SHAPES = {
    "qwen2.5-coder-0.5b": dict(model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
                               num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                               max_position_embeddings=32768, rope_theta=1e6, tie_word_embeddings=True),
    "qwen2.5-coder-1.5b": dict(model_type="qwen2", vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                               num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                               max_position_embeddings=32768, rope_theta=1e6, tie_word_embeddings=True),
    # Tests only: the same layout at a size a CPU test runs in seconds.
    "qwen2-tiny": dict(model_type="qwen2", vocab_size=512, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=2048, rope_theta=1e6, tie_word_embeddings=True),
    "qwen2.5-coder-7b": dict(model_type="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                             num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                             max_position_embeddings=32768, rope_theta=1e6, tie_word_embeddings=False),
}
# Memory bandwidth a step's weight reads are held to, by card: 4.3 of the H200's 4.8 TB/s (the
# figure bench/RESULTS.md's H200 ratios use) and the H100 SXM's 3.35; the H200's on any other card.
HBM_BYTES_PER_S = {"H200": 4.3e12, "H100": 3.35e12}


def floor_bandwidth() -> tuple[float, str]:
    """(bytes/s, card) of the weight-read floor on this machine's GPU (the H200's off CUDA)."""
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    card = next((c for c in HBM_BYTES_PER_S if c in name), "H200")
    return HBM_BYTES_PER_S[card], card


DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4}


def step_weight_bytes(folder: Path) -> int:
    """Bytes of the weights one step reads: every tensor of the checkpoint but an untied input
    embedding table, of which a step gathers only its tokens' rows (a tied table is read whole, as
    the lm_head). bench/HISTORY.md, "The floor counts what a step reads"."""
    from safetensors import safe_open

    sizes = {}
    for path in folder.glob("*.safetensors"):
        with safe_open(path, "pt") as f:
            for name in f.keys():
                part = f.get_slice(name)
                sizes[name] = math.prod(part.get_shape()) * DTYPE_BYTES[part.get_dtype()]
    untied = any(name.endswith("lm_head.weight") for name in sizes)
    return sum(n for name, n in sizes.items() if not (untied and name.endswith("embed_tokens.weight")))


def random_model_folder(shape: str, folder: Path, dtype) -> Path:
    import transformers
    from tokenizers import Tokenizer, models

    spec = dict(SHAPES[shape])
    cfg = transformers.AutoConfig.for_model(**spec)
    torch.manual_seed(0)  # the same weights on every run: the checks' near-ties are then the code's, not the draw's
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.save_pretrained(folder)
    vocab = {f"t{i}": i for i in range(spec["vocab_size"])}
    Tokenizer(models.WordLevel(vocab, unk_token="t0")).save(str(folder / "tokenizer.json"))
    return folder


def time_fn(fn, reps: int) -> float:
    """Median wall time (ms) of fn(), synchronizing the device around each call."""
    times = []
    for _ in range(3):
        fn()
    for _ in range(reps):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def prefilled(engine, context: int, k: int, prompt: list[int] | None = None):
    """A request of `prompt` (default: `context` random tokens), prefilled, with room for a
    K-token verify block: (its sequence, its prompt)."""
    from engine.types import Request, SamplingParams

    if prompt is None:
        g = torch.Generator().manual_seed(context)
        prompt = torch.randint(0, engine.runner.model_config.vocab_size, (context,), generator=g).tolist()
    seq = engine.add_request(Request(prompt, SamplingParams(max_tokens=4), drafter="none"))
    while seq.needs_prefill:
        engine.step()
    engine.scheduler.ensure_room(seq, len(seq) + k)
    return seq, prompt


def engine_step_ms(engine, context: int, k: int, reps: int) -> float:
    seq, prompt = prefilled(engine, context, k)
    feed = [seq.tokens[-1]] + prompt[:k - 1]
    # A greedy verify step as the engine runs it: forward, greedy tokens, one copy to the host.
    ms = time_fn(lambda: engine.runner.verify([(seq, feed)]), reps)
    engine.cancel(seq)
    return ms


def pipelined_step_ms(engine, context: int, k: int, reps: int) -> float:
    """A greedy verify step as the engine runs it when its plan made ahead holds (engine.step,
    Scheduler.plan_ahead): the next step's inputs are staged while this one runs, and it is
    launched as soon as this one's tokens are read back. Mean ms per step over `reps` such steps
    (the same block at the same positions each time)."""
    seq, prompt = prefilled(engine, context, k)
    runner, batch, starts = engine.runner, [(seq, [seq.tokens[-1]] + prompt[: k - 1])], [seq.num_cached]
    flight = runner.launch(batch, starts=starts)

    def steps(n: int) -> None:
        nonlocal flight
        for _ in range(n):
            staged = runner.stage(batch, starts)
            runner.collect(flight)
            flight = runner.launch(batch, starts=starts, staged=staged)

    steps(3)
    t = time.perf_counter()
    steps(reps)
    runner.collect(flight)
    ms = (time.perf_counter() - t) * 1000 / (reps + 1)
    engine.cancel(seq)
    return ms


def beside_ms(engine, context: int, n: int, reps: int) -> tuple[float, float, float]:
    """Median ms of: the target's greedy K=16 verify step, the draft model writing n tokens (the
    engine's DraftModel on its stream, in sync with the context: one token fed, n decoded), and
    both together (the step launched, the draft written while it runs, then its tokens read)."""
    from types import SimpleNamespace

    k, model = 16, engine.hybrid.model
    seq, prompt = prefilled(engine, context, k)
    runner, batch = engine.runner, [(seq, [seq.tokens[-1]] + prompt[: k - 1])]
    other = SimpleNamespace(id="beside", tokens=prompt)
    leads = iter(range(10**9))  # a new last token each call: the draft rolls back one and feeds it

    def draft():
        return model.propose([(other, [next(leads) % 1000], n)], ahead=True)

    def both():
        flight = runner.launch(batch)
        draft()
        runner.collect(flight)

    target = time_fn(lambda: runner.verify(batch), reps)
    alone, together = time_fn(draft, reps), time_fn(both, reps)
    engine.cancel(seq)
    model.release("beside")
    return target, alone, together


def kernels_per_step(engine, context: int, k: int) -> dict[str, int]:
    """CUDA kernels one eager greedy verify step launches (a CUDA graph replays the same ones),
    counted with the profiler and grouped by a short name."""
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    seq, prompt = prefilled(engine, context, k, list(range(1, context + 1)))
    feed = [seq.tokens[-1]] + prompt[:k - 1]
    engine.runner.verify([(seq, feed)])
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        engine.runner.verify([(seq, feed)])
        torch.cuda.synchronize()
    engine.cancel(seq)
    names = Counter(_kernel_kind(e.name) for e in prof.events() if e.device_type.name == "CUDA")
    return dict(names.most_common())


def gpu_time_per_step(engine, context: int, k: int, reps: int = 20) -> tuple[dict[str, float], dict[str, float]]:
    """Microseconds of GPU time per verify step by kernel family, as the engine runs the step
    (CUDA graph replays when the engine has graphs; the profiler traces kernels inside graphs),
    with `busy` (their sum) and `wall` (a step's median time) to show the gaps between kernels;
    and those gaps, µs per step, by the pair of kernel families around each. The pair from the
    staged inputs' copy to the graph's first kernel holds the host's launch of the replay, which
    the profiler slows; the others are the GPU's time between two kernels of the graph."""
    from collections import defaultdict

    from torch.profiler import ProfilerActivity, profile

    seq, prompt = prefilled(engine, context, k, list(range(1, context + 1)))
    feed = [seq.tokens[-1]] + prompt[:k - 1]
    wall = time_fn(lambda: engine.runner.verify([(seq, feed)]), reps)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            engine.runner.verify([(seq, feed)])
        torch.cuda.synchronize()
    engine.cancel(seq)
    us: dict[str, float] = defaultdict(float)
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    for e in kernels:
        us[_kernel_kind(e.name)] += e.device_time_total / reps
    out = dict(sorted(us.items(), key=lambda kv: -kv[1]))
    out["busy"], out["wall"] = sum(us.values()), wall * 1000
    gaps: dict[str, float] = defaultdict(float)
    per_step = len(kernels) // reps  # each replay runs the same kernels; the host's time between replays is left out
    for r in range(reps):
        step = kernels[r * per_step:(r + 1) * per_step]
        for a, b in zip(step, step[1:]):
            gaps[f"{_kernel_kind(a.name)} > {_kernel_kind(b.name)}"] += (b.time_range.start - a.time_range.end) / reps
    return out, dict(sorted(gaps.items(), key=lambda kv: -abs(kv[1])))


def _kernel_kind(name: str) -> str:
    """A kernel's family: gemm, triton kernel name, or the first words of an ATen kernel."""
    low = name.lower()
    if "gemm" in low or "cutlass" in low or "sm90_xmma" in low or "cublas" in low:
        return "gemm"
    if low.startswith("memcpy") or low.startswith("memset"):
        return name.split()[0]
    if "<" in name:
        name = name.split("<")[0]
    return name.split("(")[0].split("::")[-1][:60]


def hf_step_ms(hf, context: int, k: int, reps: int) -> float:
    from transformers import DynamicCache

    dev = next(hf.parameters()).device
    g = torch.Generator().manual_seed(context)
    ids = torch.randint(0, hf.config.vocab_size, (1, context), generator=g).to(dev)
    with torch.inference_mode():
        cache = DynamicCache()
        hf(ids, past_key_values=cache, use_cache=True)
        block = ids[:, :k]

        def step():
            hf(block, past_key_values=cache, use_cache=True)
            # roll back, as a verify step does (newer transformers take a negative count)
            try:
                cache.crop(context)
            except ValueError:
                cache.crop(-k)

        return time_fn(step, reps)


def check_graphs_match_eager(folder: Path, device: str, attention: str = "auto") -> dict:
    """Greedy outputs with CUDA graphs == eager, for plain decode and lookup verify blocks."""
    from engine.config import EngineConfig
    from engine.engine import LLMEngine
    from engine.types import SamplingParams
    from engine.types import Request

    results = {}
    prompt = torch.randint(0, 1000, (300,), generator=torch.Generator().manual_seed(7)).tolist()
    outs = {}
    for eager in (True, False):
        eng = LLMEngine(EngineConfig(model=str(folder), device=device, enforce_eager=eager, max_model_len=2048,
                                     attention=attention))
        plain = [t for ev in eng.generate(Request(prompt, SamplingParams(max_tokens=40, ignore_eos=True), drafter="none"))
                 for t in ev.token_ids]
        # A source that repeats the plain output with one token changed: drafts accepted, then rejected.
        source = prompt[-8:] + plain[:20] + [plain[20] ^ 1] + plain[21:]
        spec = [t for ev in eng.generate(Request(prompt, SamplingParams(max_tokens=40, ignore_eos=True),
                                                 sources={"prediction": source}, drafter="lookup"))
                for t in ev.token_ids]
        # A batch of three (graphs pad it to four rows), different lengths, drafts and none.
        seqs = [eng.add_request(Request(prompt[: 200 + 37 * i], SamplingParams(max_tokens=30, ignore_eos=True),
                                        sources={"prediction": source}, drafter=d))
                for i, d in enumerate(("lookup", "none", "lookup"))]
        while eng.has_work():
            eng.step()
        outs[eager] = (plain, spec, [s.output_ids for s in seqs])
        del eng
    results["graphs_equal_eager_plain"] = outs[True][0] == outs[False][0]
    results["graphs_equal_eager_spec"] = outs[True][1] == outs[False][1]
    results["spec_equal_plain"] = outs[False][0] == outs[False][1]
    results["graphs_equal_eager_batch3"] = outs[True][2] == outs[False][2]
    return results


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shape", default="qwen2.5-coder-0.5b", choices=sorted(SHAPES))
    ap.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096, 8192])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--k", type=int, nargs="+", default=[16], help="verify blocks to time (beside K=1); each K "
                    "its own engine (EngineConfig.verify_tokens), whose graphs are that K's")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--no-eager", action="store_true", help="CUDA: only the CUDA-graph runs")
    ap.add_argument("--attention", nargs="+", default=["auto"], choices=["auto", "triton", "ref"],
                    help="paged attention implementations to time (EngineConfig.attention)")
    ap.add_argument("--no-checks", action="store_true", help="skip the graph-versus-eager checks")
    ap.add_argument("--kernels", action="store_true", help="CUDA: also count kernels per eager verify step")
    ap.add_argument("--profile", action="store_true",
                    help="CUDA: GPU time per kernel family of a step (each block of --k, first context), graphs and eager")
    ap.add_argument("--beside", choices=sorted(SHAPES), help="CUDA: a draft model of this shape drafting beside "
                    "the target's step (module docstring); only those timings")
    ap.add_argument("--int8-head", nargs="+", default=["off"], choices=["off", "on"],
                    help="int8 embeddings and lm_head off and/or on (EngineConfig.int8_head)")
    ap.add_argument("--pdl", nargs="+", default=["off"], choices=["off", "on"],
                    help="CUDA: programmatic dependent launch of the Triton kernels off and/or on (EngineConfig.pdl)")
    ap.add_argument("--packed-weights", nargs="+", default=["on"], choices=["off", "on"],
                    help="CPU: the weights packed for oneDNN on and/or off (EngineConfig.packed_weights)")
    ap.add_argument("--one-process", action="store_true", help="time every engine in this process (each has "
                    "its own by default: a step timed after another engine ran in the process reads slow)")
    ap.add_argument("--run", type=int, help=argparse.SUPPRESS)  # a child's: its run, weights and result file
    ap.add_argument("--weights", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--part", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run is not None:
        return measure_child(args)
    with tempfile.TemporaryDirectory(prefix="step_time-") as tmp:  # the random weights: GBs, gone after the run
        run(args, argv, Path(tmp))


class Variant(NamedTuple):
    """One engine configuration to time: its row label and the EngineConfig fields it sets."""
    name: str
    eager: bool
    impl: str
    int8_head: bool
    packed: bool
    pdl: bool


def variants_of(args, cuda: bool) -> list[Variant]:
    bases = [(f"ours, CUDA graphs, {impl}", False, impl) for impl in args.attention]
    if not args.no_eager:
        bases += [(f"ours, eager, {impl}", True, impl) for impl in args.attention]
    if not cuda:
        bases = [(f"ours, {impl}", True, impl) for impl in args.attention]
    return [Variant(name + (", int8 head" if i8 == "on" else "") + (", plain weights" if pw == "off" and not cuda else "")
                    + (", PDL" if pdl == "on" else ""), eager, impl, i8 == "on", pw == "on", pdl == "on")
            for name, eager, impl in bases for i8 in args.int8_head
            for pw in (args.packed_weights if not cuda else ["on"]) for pdl in (args.pdl if cuda else ["off"])]


def measure(args, folder: Path, variant: Variant, verify: int) -> dict:
    """One variant's timings with verify blocks of `verify` (and K=1 where it is the first of
    --k), then its kernel counts and profile at `verify` if asked: {"pid", "steps": [{engine,
    context, k, ms}], "kernels", "profile", "gaps"}."""
    from engine.config import EngineConfig
    from engine.engine import LLMEngine

    cuda = torch.cuda.is_available()
    name, eager, first = variant.name, variant.eager, verify == args.k[0]
    eng = LLMEngine(EngineConfig(
        model=str(folder), device="cuda" if cuda else "cpu", enforce_eager=eager,
        max_model_len=max(args.contexts) + 64, max_num_seqs=1, attention=variant.impl,
        int8_head=variant.int8_head, packed_weights=variant.packed, pdl=variant.pdl, verify_tokens=verify))
    out: dict = {"pid": os.getpid(), "steps": []}
    for ctx in args.contexts:
        for k in (1, verify) if first else (verify,):
            ms = engine_step_ms(eng, ctx, k, args.reps)
            out["steps"].append({"engine": name, "context": ctx, "k": k, "ms": ms})
            print(f"  {name}, context {ctx}, K={k}: {ms:.3f} ms", flush=True)  # the table comes at the end
        if cuda and not eager:
            ms = pipelined_step_ms(eng, ctx, verify, args.reps)
            out["steps"].append({"engine": name + ", planned ahead", "context": ctx, "k": verify, "ms": ms})
            print(f"  {name}, planned ahead, context {ctx}, K={verify}: {ms:.3f} ms", flush=True)
    # The profiler after the timings: a step timed after another engine was profiled in the process
    # read long, every gap between its kernels longer (bench/HISTORY.md, "Profiled, then timed").
    if cuda and args.kernels and eager:
        out["kernels"] = kernels_per_step(eng, args.contexts[0], verify)
    if cuda and args.profile:
        out["profile"], out["gaps"] = gpu_time_per_step(eng, args.contexts[0], verify)
    return out


def runs_of(args, cuda: bool) -> list[tuple[Variant, int]]:
    """What is timed, one engine each: every variant at every verify block of --k."""
    return [(variant, verify) for variant in variants_of(args, cuda) for verify in args.k]


def measure_child(args) -> None:
    """A child process's part: one run of the parent's (`--run` indexes runs_of), on the
    parent's weights, into the file `--part`."""
    variant, verify = runs_of(args, torch.cuda.is_available())[args.run]
    args.part.write_text(json.dumps(measure(args, args.weights, variant, verify)))


def measure_apart(argv: list[str], folder: Path, tmp: Path, count: int) -> list[dict]:
    """Each run measured in a fresh process, one after another: a step timed after another engine
    ran (and was profiled) in the same process reads slow (bench/HISTORY.md, "Profiled, then
    timed"), so engines timed together in one process do not compare."""
    parts = []
    for i in range(count):
        part = tmp / f"run{i}.json"
        subprocess.run([sys.executable, "-m", "bench.step_time", *argv, "--run", str(i),
                        "--weights", str(folder), "--part", str(part)], check=True, cwd=Path(__file__).parents[1])
        parts.append(json.loads(part.read_text()))
    return parts


def measure_here(args, folder: Path, runs: list[tuple[Variant, int]]) -> list[dict]:
    """Every run in this process (--one-process), each engine's memory given back before the next."""
    parts = []
    for variant, verify in runs:
        parts.append(measure(args, folder, variant, verify))
        gc.collect()
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return parts


def run(args, argv: list[str], tmp: Path) -> None:
    cuda = torch.cuda.is_available()
    dtype = torch.bfloat16 if cuda else torch.float32
    device = "cuda" if cuda else "cpu"
    folder = random_model_folder(args.shape, tmp / "target", dtype)
    weight_bytes = step_weight_bytes(folder)
    bandwidth, card = floor_bandwidth()
    floor_ms = weight_bytes / bandwidth * 1000
    if args.beside:
        return beside(args, folder, tmp / "draft", device, dtype)
    checks = {impl: check_graphs_match_eager(folder, device, impl) for impl in args.attention} if cuda and not args.no_checks else {}
    print(f"checks: {json.dumps(checks)}", flush=True)
    runs = runs_of(args, cuda)
    apart = len(runs) > 1 and not args.one_process
    parts = measure_apart(argv, folder, tmp, len(runs)) if apart else measure_here(args, folder, runs)
    results = {"weight_bytes": weight_bytes, "floor_ms": floor_ms, "floor_card": card, "checks": checks, "one_process": not apart,
               "steps": [step | {"pid": part["pid"]} for part in parts for step in part["steps"]]}
    rows = [[st["engine"], st["context"], st["k"], st["ms"], st["ms"] / floor_ms, st["k"] / st["ms"] * 1000]
            for st in results["steps"]]
    kernel_rows, profile_rows, gap_rows = [], [], []
    for (variant, verify), part in zip(runs, parts):
        label = f"{variant.name}, K={verify}"
        if "kernels" in part:
            counts = part["kernels"]
            kernel_rows.append([label, sum(counts.values()),
                                ", ".join(f"{n} {c}" for n, c in list(counts.items())[:8])])
            results.setdefault("kernels", {})[label] = counts
        if "profile" in part:
            prof, gaps = part["profile"], part["gaps"]
            profile_rows.append([label, f"{prof['wall']:.0f}", f"{prof['busy']:.0f}",
                                 ", ".join(f"{n} {t:.0f}" for n, t in list(prof.items())[:8])])
            gap_rows.append([label, f"{sum(gaps.values()):.0f}",
                             ", ".join(f"{n} {t:.0f}" for n, t in list(gaps.items())[:8])])
            results.setdefault("profile", {})[label] = prof
            results.setdefault("gaps", {})[label] = gaps
    if not args.no_hf:
        import transformers

        hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
        for ctx in args.contexts:
            for k in (1, 16):
                ms = hf_step_ms(hf, ctx, k, args.reps)
                rows.append(["transformers eager", ctx, k, ms, ms / floor_ms, k / ms * 1000])
                results["steps"].append({"engine": "transformers", "context": ctx, "k": k, "ms": ms})
    print(header(f"Step time, {args.shape} shape, random weights, {dtype}"))
    print(f"weights a step reads {weight_bytes / 1e9:.2f} GB -> floor {floor_ms:.3f} ms per step at {bandwidth / 1e12:.2f} TB/s (the {card}'s); checks: {json.dumps(checks)}; "
          + ("each engine in its own process\n" if apart else "one process\n"))
    print(table(["engine", "context", "K", "ms/step", "x floor", "tokens/s if all K accepted"], rows))
    if kernel_rows:
        print(f"\nKernels per eager verify step (context {args.contexts[0]}; a graph replays the same):\n")
        print(table(["engine", "kernels", "most launched"], kernel_rows))
    if profile_rows:
        print(f"\nGPU time per verify step, us (context {args.contexts[0]}; busy = kernels' sum, wall = step"
              + (")" if apart or len(profile_rows) == 1 else "; after the first row, wall and gaps are taken where the "
                 "profiler has run: compare busy)") + ":\n")
        print(table(["engine", "wall", "busy", "by kernel family"], profile_rows))
        print("\nTime between kernels per verify step, us, by the kernels before and after (largest first):\n")
        print(table(["engine", "total", "by pair"], gap_rows))
    save_json("step_time.json", results)


def beside(args, folder: Path, draft_folder: Path, device: str, dtype) -> None:
    from engine.config import EngineConfig
    from engine.engine import LLMEngine

    draft = random_model_folder(args.beside, draft_folder, dtype)
    eng = LLMEngine(EngineConfig(model=str(folder), draft_model=str(draft), device=device, max_num_seqs=1,
                                 max_model_len=max(args.contexts) + 64))
    rows, results = [], []
    for ctx in args.contexts:
        for n in (1, 2, 3, 5):
            target, alone, together = beside_ms(eng, ctx, n, args.reps)
            hidden = (target + alone - together) / alone
            rows.append([ctx, n, target, alone, target + alone, together, f"{hidden:.0%}"])
            results.append({"context": ctx, "n": n, "target_ms": target, "draft_ms": alone, "together_ms": together})
    print(header(f"A {args.beside} draft beside a {args.shape} K=16 step, random weights, {dtype}"))
    print(table(["context", "draft tokens", "target step ms", "draft ms", "one after the other ms",
                 "together ms", "draft hidden"], rows))
    save_json("step_time_beside.json", results)


if __name__ == "__main__":
    main()
