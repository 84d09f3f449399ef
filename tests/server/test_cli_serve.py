"""`editapply serve` as a user runs it: a subprocess on loopback, the API key from EDITAPPLY_API_KEY."""

import os
import signal
import subprocess
import sys
import time

import httpx

from tests.server.conftest import free_port


def test_serve_subcommand(ci_model_dir):
    port = free_port()
    env = {**os.environ, "EDITAPPLY_API_KEY": "k3y", "EDITAPPLY_MAX_MODEL_LEN": "1024", "EDITAPPLY_MAX_NUM_SEQS": "1"}
    cmd = [sys.executable, "-m", "engine.cli", "serve", "--model", str(ci_model_dir), "--port", str(port),
           "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                health = httpx.get(url + "/health", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.25)
        assert health.status_code == 200 and health.json()["model"] == "smollm2-135m"
        assert httpx.get(url + "/v1/models").status_code == 401
        auth = {"Authorization": "Bearer k3y"}
        assert httpx.get(url + "/v1/models", headers=auth).json()["data"][0]["max_model_len"] == 1024
        r = httpx.post(url + "/v1/chat/completions", headers=auth, timeout=60,
                       json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 2
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"serving smollm2-135m on http://127.0.0.1:{port} (bearer token required" in err
