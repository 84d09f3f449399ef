"""The vLLM server dies in the middle of a request: the request gets a clear 503 (code
`engine_unavailable`), our server stays up -- health, deterministic applies -- and every later
request that needs the model gets the same 503 at once, not a hang; the CLI says so and exits 1.

Real parts: a second vLLM server of its own (the CPU build, CI model), killed with SIGKILL (its
whole process group, as when a machine or container goes away), and `editapply serve` as a
subprocess in front of it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from engine.service import open_service
from tests.vllm.conftest import CI_MODEL, dev_case, start_serve, stop_serve, vllm_config, vllm_running


def test_the_backend_going_away_is_a_503_and_the_server_stays_up(vllm_installed, tmp_path):
    doomed = open_service(vllm_config())  # its own vLLM: this test kills it
    proc, url = start_serve("--backend", "vllm", "--vllm-url", doomed.url, "--model", CI_MODEL)
    try:
        long = dev_case("tj/commander.js@a9967826ca:eslint.config.js")
        chat = {"messages": [{"role": "user", "content": "Repeat this file, line by line, twice:\n" + long["original"]}],
                "max_tokens": 1500}
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(httpx.post, url + "/v1/chat/completions", json=chat, timeout=300)
            deadline = time.monotonic() + 60
            while vllm_running(doomed.url) < 1:
                assert time.monotonic() < deadline and not pending.done(), "the request never reached vLLM"
                time.sleep(0.05)
            os.killpg(doomed.process.proc.pid, signal.SIGKILL)
            r = pending.result(timeout=60)
        assert r.status_code == 503 and r.headers["retry-after"], r.text
        error = r.json()["error"]
        assert error["code"] == "engine_unavailable" and "went away" in error["message"], error

        case = dev_case()
        body = {"initial_code": case["original"], "edit_snippet": case["update_snippet"], "path": case["path"]}
        with httpx.Client(base_url=url, timeout=60) as c:
            assert c.get("/health").json()["status"] == "ok"
            det = c.post("/v1/apply", json={**body, "mode": "deterministic"})
            assert det.status_code == 200 and det.json()["merged_code"] == case["expected"]
            started = time.monotonic()
            later = c.post("/v1/apply", json={**body, "mode": "model"})
            assert later.status_code == 503 and later.json()["error"]["code"] == "engine_unavailable", later.text
            assert time.monotonic() - started < 30  # refused, not hung
            with c.stream("POST", "/v1/apply", json={**body, "mode": "model", "stream": True}) as s:
                events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: {")]
            assert events[-1]["error"]["code"] == "engine_unavailable", events[-1]

        target, snippet = tmp_path / "ext_init.py", tmp_path / "snippet.py"
        target.write_text(case["original"], encoding="utf-8")
        snippet.write_text(case["update_snippet"], encoding="utf-8")
        run = subprocess.run([sys.executable, "-m", "engine.cli", "apply", str(target), str(snippet), "--mode", "model",
                              "--model", CI_MODEL, "--backend", "vllm", "--vllm-url", doomed.url, "--write"],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 1 and f"no vLLM server answers at {doomed.url}" in run.stderr, run.stderr
        assert target.read_text(encoding="utf-8") == case["original"]
    finally:
        stop_serve(proc)
        doomed.shutdown()
