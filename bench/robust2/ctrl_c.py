"""Ctrl-C while the model writes (issue 31, item 9; bench/HISTORY.md, "Robustness, second round").

    python bench/robust2/ctrl_c.py TREE RUNS SEED     (LO, HI: the interrupt's delay range, seconds)

`editapply apply --mode model --write` with the CI model on the dev case of about 5,000 bytes,
SIGINT after a random delay; prints each run's exit code, whether the file is intact, and stderr's
last line (all of it for an exit code other than 130)."""
import json, os, random, shutil, signal, subprocess, sys, tempfile, time
from pathlib import Path

tree, runs = sys.argv[1], int(sys.argv[2])
rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
sys.path.insert(0, tree)
from engine.loader import registry  # noqa: E402

model = str(registry.model_dir("smollm2-135m"))
cases = [json.loads(line) for line in open(Path(tree) / "bench/data/dev.jsonl")]
case = min(cases, key=lambda c: abs(len(c["original"]) - 5000))
work = Path(tempfile.mkdtemp())
(work / "orig.py").write_text(case["original"])
(work / "s.snip").write_text(case["update_snippet"])
codes = []
for i in range(runs):
    shutil.copy(work / "orig.py", work / "f.py")
    env = {**os.environ, "PYTHONPATH": tree, "EDITAPPLY_MAX_MODEL_LEN": "8192"}
    p = subprocess.Popen([sys.executable, "-m", "engine.cli", "apply", str(work / "f.py"), str(work / "s.snip"), "--mode",
                          "model", "--model", model, "--write"], cwd=tree, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    time.sleep(rng.uniform(float(os.environ.get("LO", 4)), float(os.environ.get("HI", 40))))
    p.send_signal(signal.SIGINT)
    _, err = p.communicate()
    intact = (work / "f.py").read_text() == case["original"]
    codes.append(p.returncode)
    text = err.decode() if p.returncode != 130 else err.decode()[-120:]
    print(i, p.returncode, intact, text.replace("\n", " | "), flush=True)
print(codes)
shutil.rmtree(work)
