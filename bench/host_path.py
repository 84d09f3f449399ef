"""Host time per engine step of the batch's own host work, by phase, on this machine's CPU.

    python -m bench.host_path [--sequences 1 8 32 64] [--steps 150] [--k 64]

Each of N sequences copies a prediction of 3,000 tokens (longer where the steps copy more), verifying blocks of B:
the engine's K (`--k`, its default 64), or in a crowded step the scheduler's shorter block
(`engine/scheduler.py` `crowded_cap`: 32 from 5 sequences of 64 on):
* lookup: its drafter (`engine/speculative/lookup.py`), the prediction and the file as sources
  and the generated tokens' index built (as after a first miss), proposes B - 1 tokens a step
  while the output copies the prediction; the list the engine passes, built per call, is
  included, as the scheduler pays it too.
* staging: the CUDA graphs' inputs of a verify step, B tokens a sequence, laid out in the host
  buffer (`engine/cuda_graphs.py` `_Inputs.stage`; the copy to the device is not timed), with the
  bytes a replay then copies over.
* commit: each sequence's B - 1 accepted tokens and its bonus token appended under its stop
  conditions (`engine/scheduler.py` `StopChecker.commit`).

And the cost of one lookup miss: a sequence that copied N tokens of its prediction without a
search (its cursor held) writes a token the prediction lacks, and `propose` searches every source,
the generated tokens' index first catching up over those N tokens; and a request's first miss,
which builds every source's index.
"""

from __future__ import annotations

import argparse
import random
import time
from types import SimpleNamespace

from bench.common import commit, header, machine, table
from engine.block_manager import BlockTable
from engine.cuda_graphs import WIDTH_STEP, _Inputs
from engine.scheduler import StopChecker, crowded_cap
from engine.sequence import Sequence
from engine.speculative.lookup import LookupDrafter
from engine.types import Request, SamplingParams

TOKENS, BLOCK = 3000, 16  # BLOCK: the KV cache's block size


def verify_block(n: int, k: int) -> int:
    """The positions each of n sequences of verify block k verifies in a step (the scheduler's rule)."""
    return min(k, crowded_cap([k] * n) or k)


def lookup_us(n: int, steps: int, k: int) -> float:
    rng = random.Random(0)
    batch = []
    for _ in range(n):
        prediction = [rng.randrange(5000) for _ in range(max(TOKENS, (k - 1) * (steps + 1)))]  # never copied out
        prompt = [1] + prediction[:500]
        d = LookupDrafter({"prediction": prediction, "file": list(prediction)}, prompt_len=len(prompt))
        d.propose(prompt, k - 1)
        d.index_generated()  # built, as a first miss builds it
        batch.append((d, prompt, prediction))
    started = time.perf_counter()
    for step in range(1, steps + 1):
        for d, prompt, prediction in batch:
            d.propose(prompt + prediction[: (k - 1) * step], k - 1)
    return (time.perf_counter() - started) / steps * 1e6


def miss_us(copied: int, k: int, trials: int = 20) -> float:
    """µs of the `propose` at a miss after `copied` tokens copied in steps of k - 1, the mean of
    `trials` sequences: with `copied` 0, a request's first miss (every source indexed by it),
    else a miss after its cursor held (the sources indexed at a first miss before the copy)."""
    rng = random.Random(1)
    total = 0.0
    for _ in range(trials):
        prediction = [rng.randrange(5000) for _ in range(TOKENS + copied)]
        prompt = [1] + prediction[:500]
        d = LookupDrafter({"prediction": prediction, "file": list(prediction)}, prompt_len=len(prompt))
        d.propose(prompt, k - 1)  # the first call: the prompt becomes a source, the prediction drafts
        context = prompt
        if copied:
            context = prompt + [5001]  # not in the prediction: a first miss, every index built
            d.propose(context, k - 1)
            for end in range(k, copied + 1, k - 1):  # re-anchored, then copying: the cursor holds
                d.propose(context + prediction[:end], k - 1)
            context += prediction[:copied]
        context += [5002]
        started = time.perf_counter()
        d.propose(context, k - 1)
        total += time.perf_counter() - started
    return total / trials * 1e6


def staging_us(n: int, steps: int, k: int) -> tuple[float, int]:
    rng = random.Random(0)
    blocks = -(-(TOKENS + k) // BLOCK)
    seqs = [SimpleNamespace(block_table=BlockTable(rng.sample(range(1, 1 << 16), blocks))) for _ in range(n)]
    rows = 1 << (n - 1).bit_length()
    width = -(-(TOKENS + k) // WIDTH_STEP) * WIDTH_STEP
    inputs = _Inputs(rows, k, width, "cpu", scratch_slot=0, block_size=BLOCK)
    graph = SimpleNamespace(B=rows, Tq=k, width=width)
    batch = [(seq, [rng.randrange(5000) for _ in range(k)]) for seq in seqs]
    starts = [TOKENS - rng.randrange(BLOCK) for _ in seqs]
    started = time.perf_counter()
    for _ in range(steps):
        inputs.stage(graph, batch, starts)
    return (time.perf_counter() - started) / steps * 1e6, 8 * inputs.size(rows, k, width)


def commit_us(n: int, steps: int, k: int) -> float:
    rng = random.Random(0)
    params = SamplingParams(max_tokens=k * (steps + 1))
    seqs = [Sequence(Request([1] * TOKENS, params), None, k, None) for _ in range(n)]
    new = [[rng.randrange(3, 5000) for _ in range(k)] for _ in range(n)]
    stop = StopChecker(1 << 20, frozenset({0, 1, 2}))
    started = time.perf_counter()
    for _ in range(steps):
        for seq, tokens in zip(seqs, new):
            stop.commit(seq, tokens)
    return (time.perf_counter() - started) / steps * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sequences", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--copied", type=int, nargs="+", default=[0, 100, 1000, 3000],
                    help="tokens copied before the miss whose search is timed")
    ap.add_argument("--k", type=int, default=64, help="the engine's verify block (EngineConfig.verify_tokens)")
    args = ap.parse_args(argv)
    rows = []
    for n in args.sequences:
        b = verify_block(n, args.k)
        lookup = lookup_us(n, args.steps, b)
        staging, staged = staging_us(n, args.steps, b)
        committing = commit_us(n, args.steps, b)
        rows.append([n, b, f"{lookup:,.0f}", f"{staging:,.0f}", f"{staged / 1024:,.0f}", f"{committing:,.0f}"])
    print(header(f"Host time per engine step, sequences {TOKENS:,} tokens into copying, K={args.k}"))
    print(f"machine: {machine()}; commit: {commit()}\n")
    print(table(["sequences", "block", "lookup us", "staging us", "staged KiB", "commit us"], rows))
    print(f"\nOne miss after N tokens copied without a search (one sequence, blocks of {args.k}; 0: a request's "
          "first miss):\n")
    print(table(["tokens copied", "miss us"], [[f"{n:,}", f"{miss_us(n, args.k):,.0f}"] for n in args.copied]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
