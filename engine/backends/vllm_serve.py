"""The `vllm serve` command line: the one `editapply vllm-command` recommends for a deployment, and
the one `--backend vllm` starts itself when no `--vllm-url` is given.

`layout(params, gpus, nodes, gpu_memory_gb)` chooses the parallelism: the smallest tensor-parallel
size (1, 2, 4, 8 within a node) whose share of the bf16 weights leaves half of each GPU for the KV
cache; the other GPUs of the node run data-parallel replicas; a model larger than one node adds
pipeline stages across nodes, and several nodes need Ray (`--distributed-executor-backend ray`
for a model split across nodes, `--data-parallel-backend ray` for replicas spread over them).
`serve_args` is the argument list both paths share: the speculative config (ngram lookup, 15
draft tokens, `prompt_lookup_max` 16: our engine's blocks of 16 before its default became 64;
vLLM with 63 draft tokens is not measured), per-request speculation metrics and
cached prompt tokens in each answer (what our stats are made of), prefix caching on, the context.

`VLLMProcess` runs one `python -m vllm.entrypoints.openai.api_server` on a free loopback port
(the module `vllm serve` runs; the `vllm` script itself is missing from the CPU wheel), logs to a
file, waits for `GET /v1/models`, and stops the whole process group with the service.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from engine.types import EngineUnavailable

SPECULATORS = {
    # vLLM's n-gram lookup (prompt + output, earliest match): our lookup drafter's nearest cousin.
    "ngram": {"method": "ngram", "num_speculative_tokens": 15, "prompt_lookup_max": 16, "prompt_lookup_min": 2},
    # Suffix decoding (needs `pip install arctic-inference` beside vllm): a suffix tree over the
    # prompt and earlier outputs, draft length adaptive.
    "suffix": {"method": "suffix", "num_speculative_tokens": 15},
}
WEIGHT_SHARE = 0.5  # of a GPU's memory for its weight shard; the rest is KV cache and activations
TP_SIZES = (1, 2, 4, 8)
START_TIMEOUT_S = 900.0  # a cold start compiles graphs: minutes on a big model, ~1 min eager on a CPU


@dataclass(frozen=True)
class Layout:
    tp: int  # tensor-parallel size (GPUs per model copy within a node)
    pp: int  # pipeline stages (nodes per model copy)
    dp: int  # data-parallel replicas
    nodes: int

    @property
    def ray(self) -> bool:
        return self.nodes > 1


def layout(params_b: float, gpus: int, nodes: int = 1, gpu_memory_gb: float = 80.0) -> Layout:
    """How `gpus` GPUs per node on `nodes` nodes serve a model of `params_b` billion parameters."""
    if gpus < 1 or nodes < 1:
        raise ValueError("need at least one GPU and one node")
    weights_gb = 2.0 * params_b  # bf16
    fits = [tp for tp in TP_SIZES if tp <= gpus and weights_gb / tp <= WEIGHT_SHARE * gpu_memory_gb]
    if fits:
        tp = fits[0]
        return Layout(tp=tp, pp=1, dp=(gpus // tp) * nodes, nodes=nodes)
    tp = max(t for t in TP_SIZES if t <= gpus)
    pp = math.ceil(weights_gb / (WEIGHT_SHARE * gpu_memory_gb * tp))
    if pp > nodes:
        raise ValueError(f"a {params_b:g}B model needs ~{weights_gb:.0f} GB of bf16 weights: more than "
                         f"{nodes} node(s) of {gpus} x {gpu_memory_gb:g} GB leave room for (half of each GPU for weights)")
    return Layout(tp=tp, pp=pp, dp=max(1, nodes // pp), nodes=nodes)


def serve_args(model: str, served_name: str, max_model_len: int, lay: Layout = Layout(1, 1, 1, 1),
               speculator: str = "ngram") -> list[str]:
    """`vllm serve` arguments after the model (for `--model MODEL` when run as a module)."""
    args = [model, "--served-model-name", served_name, "--max-model-len", str(max_model_len),
            "--enable-prefix-caching", "--speculative-config", json.dumps(SPECULATORS[speculator], separators=(",", ":")),
            "--per-request-spec-decode-metrics", "summary",  # each answer's drafted/accepted counts (our stats)
            "--enable-prompt-tokens-details"]  # and its prompt tokens served from the prefix cache
    if lay.tp > 1:
        args += ["--tensor-parallel-size", str(lay.tp)]
    if lay.pp > 1:
        args += ["--pipeline-parallel-size", str(lay.pp), "--distributed-executor-backend", "ray"]
    if lay.dp > 1:
        args += ["--data-parallel-size", str(lay.dp)]
        if lay.ray and lay.pp == 1:
            args += ["--data-parallel-backend", "ray"]
    return args


def count_params_b(model: str, folder: Path | None) -> float:
    """Billions of parameters: from the folder's config.json when there is one, else from a size
    in the name (`Qwen/Qwen2.5-Coder-7B-Instruct` -> 7)."""
    if folder is not None and (folder / "config.json").is_file():
        c = json.loads((folder / "config.json").read_text())
        h, layers, inter, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
        heads = c["num_attention_heads"]
        head_dim = c.get("head_dim") or h // heads
        kv = c.get("num_key_value_heads", heads)
        attn = 2 * h * heads * head_dim + 2 * h * kv * head_dim
        embed = vocab * h * (1 if c.get("tie_word_embeddings") else 2)
        return (layers * (attn + 3 * h * inter) + embed) / 1e9
    m = re.search(r"(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", model)
    if m is None:
        raise ValueError(f"cannot tell the size of {model!r}: pass --params-b (billions of parameters)")
    return float(m.group(1))


def recommend(model: str, hf_name: str, served_name: str, params_b: float, gpus: int, nodes: int, gpu_memory_gb: float,
              max_model_len: int, speculator: str, port: int) -> str:
    """The deployment recipe `editapply vllm-command` prints: commands and what they do."""
    lay = layout(params_b, gpus, nodes, gpu_memory_gb)
    cmd = ["vllm", "serve", *serve_args(hf_name, served_name, max_model_len, lay, speculator), "--port", str(port)]
    lines = [f"# {served_name}: ~{params_b:.3g}B parameters, ~{2 * params_b:.0f} GB of bf16 weights; "
             f"{nodes} node(s) x {gpus} GPU(s) of {gpu_memory_gb:g} GB",
             f"# layout: tensor parallel {lay.tp} x pipeline {lay.pp} per model copy, {lay.dp} data-parallel "
             f"replica(s), {lay.tp * lay.pp * lay.dp} GPUs in use"]
    if speculator == "suffix":
        lines.append("# suffix speculation needs `pip install arctic-inference` in vLLM's environment")
    if lay.ray:
        lines += ["# several nodes: one Ray cluster first", "ray start --head --port 6379          # on the head node",
                  "ray start --address HEAD_IP:6379     # on every other node", "# then, on the head node:"]
    lines.append(shlex.join(cmd))
    where = "HEAD_IP" if lay.ray else "GPU_HOST"
    lines += ["# then the front ends (--model gives editapply the tokenizer it builds prompts with):",
              f"editapply serve --backend vllm --vllm-url http://{where}:{port} --model {model}"]
    if lay.dp > 1 and not lay.ray:
        lines.append(f"# or {lay.dp} separate `vllm serve` replicas (drop --data-parallel-size, one port each) "
                     "behind a load balancer, and --vllm-url at the balancer")
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_python() -> str:
    """The python that has vllm: ./.venv-vllm (the repo's vLLM environment) when it exists."""
    venv = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
    return str(venv) if venv.is_file() else "python3"


class VLLMProcess:
    """A `vllm serve` this process started and owns (see the module docstring)."""

    def __init__(self, python: str, args: list[str], port: int, log_path: Path, env: dict[str, str]):
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", *args,
               "--host", "127.0.0.1", "--port", str(port)]
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             env={**os.environ, **env}, start_new_session=True)
            except OSError as exc:
                raise EngineUnavailable(f"cannot start vLLM with {python}: {exc}") from None
        atexit.register(self.stop)

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Return once the server answers; EngineUnavailable (with its log's tail) if it exits or
        does not answer within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineUnavailable(f"vLLM exited ({self.proc.returncode}) while starting; "
                                        f"its log ({self.log_path}) ends:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise EngineUnavailable(f"vLLM did not answer within {timeout:.0f} s; its log ({self.log_path}) ends:\n"
                                f"{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop vLLM and its engine processes (its whole process group); idempotent."""
        if self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


def start(python: str, args: list[str], log_dir: Path, env: dict[str, str], cpu: bool) -> VLLMProcess:
    """Start vLLM on a free loopback port with `env` added to ours; wait until it answers."""
    port = free_port()
    env = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", **env}
    if cpu:
        # vLLM's CPU build: its KV cache size (GiB), and Intel OpenMP, which its speculative
        # decoding asks for, preloaded from its environment when it is there.
        env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "4")
        iomp = Path(python).absolute().parent.parent / "lib" / "libiomp5.so"
        if iomp.is_file() and "libiomp" not in os.environ.get("LD_PRELOAD", ""):
            env["LD_PRELOAD"] = ":".join(x for x in (str(iomp), os.environ.get("LD_PRELOAD", "")) if x)
    process = VLLMProcess(python, args, port, log_dir / f"vllm-{port}.log", env)
    print(f"editapply: starting vLLM ({python}); log {process.log_path}", file=sys.stderr)
    process.wait_ready()
    return process
