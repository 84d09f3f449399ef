import sys, threading, time, statistics, torch
torch.set_num_threads(1)
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.loader import registry
from engine.sampling import SamplingParams
from engine.sequence import Request
eng = LLMEngine(EngineConfig(model=str(registry.model_dir("smollm2-135m")), max_model_len=4096))
ids = eng.tokenizer.encode_chat([{"role": "user", "content": "Write a haiku about the sea."}])
def gen():
    t = time.perf_counter(); n = 0
    for ev in eng.generate(Request(ids, SamplingParams(max_tokens=32, temperature=0))):
        pass
    return ev.stats.generated_tokens / (time.perf_counter() - t)
stop = threading.Event()
def busy(rate):  # `rate` bursts a second of ~2 ms of Python work each (an event loop handling requests)
    period = 1.0 / rate
    while not stop.is_set():
        t = time.perf_counter()
        x = 0
        while time.perf_counter() - t < 0.002:
            x += sum(range(50))
        time.sleep(max(0.0, period - (time.perf_counter() - t)))
gen()
rows = []
for rnd in range(3):
    for interval in (0.005, 0.0005):
        sys.setswitchinterval(interval)
        alone = statistics.median([gen() for _ in range(2)])
        stop.clear(); th = threading.Thread(target=busy, args=(250,), daemon=True); th.start()
        beside = statistics.median([gen() for _ in range(2)])
        stop.set(); th.join()
        rows.append((rnd, interval, alone, beside))
        print(f"round {rnd} switch {interval*1000:.1f} ms: alone {alone:.1f} tok/s, beside 250 x 2 ms/s of Python {beside:.1f} tok/s ({alone/beside:.2f}x slower)", flush=True)
