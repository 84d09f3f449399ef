"""One real vLLM server (the CPU build, in its own virtualenv `.venv-vllm`, which `make test`
installs) for the scale-out tests, started the way `editapply serve --backend vllm` starts it
without `--vllm-url`: `open_service` with backend vllm, the CI model's converted folder, fp32,
eager, ngram speculation. Beside it our own engine on the same model and context, for answers
to compare with.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from engine.apply.pipeline import ApplyRequest
from engine.config import EngineConfig
from engine.service import open_service

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
DEV_SET = ROOT / "bench" / "data" / "dev.jsonl"
CI_MODEL = "smollm2-135m"
CONTEXT = 4096  # both backends: the apply pipeline sizes its answer from the context
# A small dev case whose model-path answer (the CI model, draft form) is short: seconds on 2 cores.
CASE_ID = "pallets/flask@e8020e2c5c:flask/ext/__init__.py"


def vllm_config(**overrides) -> EngineConfig:
    return EngineConfig(**{"model": CI_MODEL, "backend": "vllm", "dtype": "fp32", "max_model_len": CONTEXT, **overrides})


@pytest.fixture(scope="session")
def vllm_installed(ci_model_dir):
    if not VLLM_PYTHON.is_file():
        pytest.fail(f"{VLLM_PYTHON} is missing; run `make install-vllm` (make test does)")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per vLLM: the CI model needs little


@pytest.fixture(scope="session")
def vllm(vllm_installed):
    """The vLLM backend: a service over a `vllm serve` started here (stopped at the end)."""
    service = open_service(vllm_config())
    yield service
    service.shutdown()


@pytest.fixture(scope="session")
def ours(ci_model_dir):
    service = open_service(EngineConfig(model=CI_MODEL, dtype="fp32", max_model_len=CONTEXT, max_num_seqs=2))
    yield service
    service.shutdown()


def dev_case(case_id: str = CASE_ID) -> dict:
    return next(c for line in DEV_SET.read_text(encoding="utf-8").splitlines() if line.strip()
                for c in [json.loads(line)] if c["id"] == case_id)


def model_request(case: dict) -> ApplyRequest:
    return ApplyRequest(case["original"], case["update_snippet"], case["instruction"], case["language"], case["path"],
                        mode="model", prompt_form="draft")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """`editapply serve ARGS` on a free loopback port, once it answers /health."""
    port = free_port()
    cmd = [sys.executable, "-m", "engine.cli", "serve", "--port", str(port), "--log-level", "warning", *args]
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            pytest.fail(f"editapply serve exited: {proc.communicate()[1]}")
        try:
            httpx.get(url + "/health", timeout=2)
            return proc, url
        except httpx.TransportError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("editapply serve did not come up")
            time.sleep(0.25)


def stop_serve(proc: subprocess.Popen) -> str:
    """SIGINT, then its stderr (the server must exit cleanly)."""
    proc.send_signal(2)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def vllm_metric(url: str, name: str, **labels: str) -> float:
    """One sample of vLLM's own Prometheus metrics: `name` with the given labels (0 when vLLM has
    not written the sample yet)."""
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        head, _, value = line.rpartition(" ")
        if head.split("{", 1)[0] == name and all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return 0.0


def vllm_running(url: str) -> float:
    """Requests vLLM is running now (its gauge is written after each engine step, so it lags)."""
    return vllm_metric(url, "vllm:num_requests_running")
