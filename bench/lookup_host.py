"""Host time of lookup drafting for a batch in steady copying (`engine/speculative/lookup.py`).

    python -m bench.lookup_host [--sequences 64] [--steps 150]

N drafters, each with a 3,000-token prediction and file as sources, their generated tokens'
index built (as after a first miss), propose 15 tokens a step while the output copies the
prediction: the microseconds one engine step spends in `propose` for the whole batch (the list
the engine passes, context built per call, is included, as the scheduler pays it too).
"""

from __future__ import annotations

import argparse
import random
import time

from bench.common import commit, header, machine, table
from engine.speculative.lookup import LookupDrafter


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sequences", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--steps", type=int, default=150)
    args = ap.parse_args(argv)
    rows = []
    for n in args.sequences:
        rng = random.Random(0)
        batch = []
        for _ in range(n):
            prediction = [rng.randrange(5000) for _ in range(3000)]
            prompt = [1] + prediction[:500]
            d = LookupDrafter({"prediction": prediction, "file": list(prediction)}, prompt_len=len(prompt))
            d.propose(prompt, 15)
            d._generated.indexes  # built, as a first miss builds it
            batch.append((d, prompt, prediction))
        started = time.perf_counter()
        for step in range(1, args.steps + 1):
            for d, prompt, prediction in batch:
                d.propose(prompt + prediction[: 15 * step], 15)
        us = (time.perf_counter() - started) / args.steps * 1e6
        rows.append([n, f"{us:,.0f}", f"{us / n:,.1f}"])
    print(header("Lookup drafting, host time per engine step in steady copying"))
    print(f"machine: {machine()}; commit: {commit()}\n")
    print(table(["sequences", "us per step (all)", "us per sequence"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
