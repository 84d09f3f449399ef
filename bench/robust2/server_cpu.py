"""Main-process CPU per deterministic apply: N applies over HTTP, the server's own CPU time (its
threads, not its merge workers) before and after."""
import asyncio, json, os, subprocess, sys, time
import httpx, psutil
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from bench.load import start_server, wait_healthy, free_port
from bench.common import load_dev

root = sys.argv[1]; n = int(sys.argv[2]); small = sys.argv[3] == "small"
env = dict(kv.split("=", 1) for kv in sys.argv[4:])
cases = sorted(load_dev(), key=lambda c: len(c["original"]))[:12] if small else load_dev(limit=12)
port = free_port(); url = f"http://127.0.0.1:{port}"
proc = start_server("smollm2-135m", port, 8, 4096, root, env)
try:
    wait_healthy(url, proc)
    bodies = [json.dumps({"initial_code": c["original"], "edit_snippet": c["update_snippet"], "path": c["path"],
                          "mode": "deterministic"}).encode() for c in cases]
    async def run():
        async with httpx.AsyncClient(base_url=url, timeout=600) as client:
            for b in bodies:
                r = await client.post("/v1/apply", content=b, headers={"content-type": "application/json"})
                assert r.status_code == 200, r.text
            p = psutil.Process(proc.pid)
            t0 = p.cpu_times(); w0 = time.perf_counter(); th0 = {t.id: t.user_time + t.system_time for t in p.threads()}
            sem = asyncio.Semaphore(8)
            async def one(i):
                async with sem:
                    r = await client.post("/v1/apply", content=bodies[i % len(bodies)], headers={"content-type": "application/json"})
                    assert r.status_code == 200
            await asyncio.gather(*(one(i) for i in range(n)))
            t1 = p.cpu_times(); w1 = time.perf_counter(); th1 = {t.id: t.user_time + t.system_time for t in p.threads()}
            busy = sorted(((th1[k] - th0.get(k, 0), k) for k in th1), reverse=True)[:6]
            print("threads (cpu s, tid; main tid =", proc.pid, "):", [(round(c, 2), k) for c, k in busy])
            cpu = (t1.user - t0.user) + (t1.system - t0.system)
            print(f"{root}: {n} applies in {w1-w0:.1f} s ({n/(w1-w0):.0f}/s); server main process CPU {cpu:.2f} s = {cpu/n*1000:.2f} ms per apply")
    asyncio.run(run())
finally:
    proc.terminate(); proc.wait()
