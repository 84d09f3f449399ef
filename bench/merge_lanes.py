"""A small merge beside a long one, and a long merge whose client leaves (issue 31, item 1)

    python -m bench.merge_lanes [--lines 50000] [--small 40]

The server's merge pool (`engine.server.workers.MergePool`, real worker processes, one light
worker as on the 2-core CI machine) in this process, without HTTP. Rows:

* `alone`: two-line deterministic applies one after another, `--small` of them;
* `beside a long merge, two lanes`: the same while a `--lines`-line whole-file apply runs;
* `beside a long merge, one lane`: the same with the heavy lane off (every merge in the light
  worker), which is how the pool worked before the lanes;
* `after a cancelled long merge`: a long apply cancelled 0.2 s in (its client left), then a
  2,500-line apply: how long it waits for the heavy lane (the rest of the abandoned merge; one
  that runs past `workers.ABANDON_S` is killed and its worker replaced).

Latency is from submit to answer. Benchmarks print; they never assert.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bench.common import header, table
from engine.apply.pipeline import ApplyRequest
from engine.server import ServerSettings
from engine.server import workers
from engine.server.workers import MergePool, plan_apply

SMALL = ApplyRequest("x = 1\ny = 1\n", "x = 2\ny = 1\n", path="a.py", mode="deterministic")


def long_request(lines: int) -> ApplyRequest:
    """The issue's repro shape: one function repeated, written back whole with one line changed."""
    unit = "def f(x):\n    y = x + 1  # padding padding padding\n    return y\n\n"
    rows = (unit * (lines // 4)).splitlines(keepends=True)
    text = "".join(rows)
    rows[len(rows) // 2 + 1] = "    y = x + 2\n"
    return ApplyRequest(text, "".join(rows), path="long.py", mode="deterministic")


async def timed(pool: MergePool, req: ApplyRequest) -> float:
    start = time.perf_counter()
    await pool.run(plan_apply, req)
    return time.perf_counter() - start


async def smalls(pool: MergePool, count: int, while_running: asyncio.Future | None = None) -> list[float]:
    """`count` small applies in turn (while `while_running` is not done, when given)."""
    out = []
    for _ in range(count):
        if while_running is not None and while_running.done():
            break
        out.append(await timed(pool, SMALL))
    return out


async def measure(lines: int, count: int) -> list[list]:
    rows = []
    pool = MergePool(ServerSettings(merge_workers=1))
    two_lanes = workers.HEAVY_LINES
    try:
        await timed(pool, SMALL)  # the workers' warm-up
        await timed(pool, long_request(2_500))
        rows.append(summary("alone", await smalls(pool, count)))
        for name, heavy_lines in (("beside a long merge, two lanes", two_lanes),
                                  ("beside a long merge, one lane", 10**9)):
            workers.HEAVY_LINES = heavy_lines
            long = asyncio.ensure_future(timed(pool, long_request(lines)))
            await asyncio.sleep(0.1)
            times = await smalls(pool, count, long)
            long_s = await long
            rows.append(summary(name, times, f"{long_s:.2f} s"))
        workers.HEAVY_LINES = two_lanes
        long = asyncio.ensure_future(timed(pool, long_request(lines)))
        await asyncio.sleep(0.2)
        long.cancel()
        waited = await timed(pool, long_request(2_500))
        rows.append(["after a cancelled long merge", 1, f"{waited * 1000:.0f}", "", "cancelled"])
    finally:
        workers.HEAVY_LINES = two_lanes
        pool.close()
    return rows


def summary(name: str, times: list[float], long: str = "") -> list:
    if not times:
        return [name, 0, "", "", long]
    ms = [t * 1000 for t in times]
    return [name, len(ms), f"{statistics.median(ms):.0f}", f"{max(ms):.0f}", long]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--small", type=int, default=40)
    args = parser.parse_args(argv)
    rows = asyncio.run(measure(args.lines, args.small))
    print(header(f"Merge lanes: a two-line apply beside a {args.lines:,}-line one"))
    print(table(["when", "small applies", "p50 ms", "max ms", "long merge"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
