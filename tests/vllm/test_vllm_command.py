"""`editapply vllm-command`: the parallel layout it chooses for a model and a GPU count, and the
command line it prints, parsed by vLLM's own `vllm serve` argument parser (vLLM's CPU build in
`.venv-vllm`): every flag it prints exists and means what the recipe says."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from engine.backends.vllm_serve import Layout, count_params_b, layout
from tests.vllm.conftest import VLLM_PYTHON

PARSE = """
import json, shlex, sys
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
for command in json.loads(sys.argv[1]):
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(shlex.split(command)[2:])
    validate_parsed_serve_args(args)
    e = AsyncEngineArgs.from_cli_args(args)
    print(json.dumps({"model": args.model_tag, "served": e.served_model_name, "tp": e.tensor_parallel_size,
                      "pp": e.pipeline_parallel_size, "dp": e.data_parallel_size,
                      "executor": e.distributed_executor_backend, "dp_backend": e.data_parallel_backend,
                      "spec": e.speculative_config, "prefix": e.enable_prefix_caching, "len": e.max_model_len,
                      "spec_metrics": e.per_request_spec_decode_metrics,
                      "prompt_details": args.enable_prompt_tokens_details, "port": args.port}))
"""


@pytest.mark.parametrize("params_b, gpus, nodes, expected", [
    (1.5, 1, 1, Layout(1, 1, 1, 1)),
    (7, 8, 1, Layout(1, 1, 8, 1)),  # 14 GB of weights fit one 80 GB GPU: 8 replicas
    (32, 4, 1, Layout(2, 1, 2, 1)),  # 64 GB: two GPUs per copy
    (70, 8, 1, Layout(4, 1, 2, 1)),
    (7, 8, 2, Layout(1, 1, 16, 2)),  # replicas across two nodes (Ray)
    (405, 8, 4, Layout(8, 3, 1, 4)),  # larger than a node: pipeline stages across nodes
])
def test_layout(params_b, gpus, nodes, expected):
    assert layout(params_b, gpus, nodes) == expected


def test_a_model_too_large_for_the_machines_is_refused():
    with pytest.raises(ValueError, match="needs ~810 GB"):
        layout(405, 8, 1)


def test_size_from_config_and_name(ci_model_dir):
    assert 0.13 < count_params_b("smollm2-135m", ci_model_dir) < 0.14  # SmolLM2-135M
    assert count_params_b("Qwen/Qwen2.5-Coder-32B-Instruct", None) == 32
    with pytest.raises(ValueError, match="--params-b"):
        count_params_b("org/mystery-model", None)


def recommended(*args: str) -> tuple[str, str]:
    run = subprocess.run([sys.executable, "-m", "engine.cli", "vllm-command", *args], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    [serve] = [line for line in run.stdout.splitlines() if line.startswith("vllm serve ")]
    return run.stdout, serve


def parsed_by_vllm(commands: list[str]) -> list[dict]:
    """Each command line as vLLM's `vllm serve` parser and its EngineArgs read it (one process)."""
    run = subprocess.run([str(VLLM_PYTHON), "-c", PARSE, json.dumps(commands)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return [json.loads(line) for line in run.stdout.strip().splitlines()[-len(commands):]]


def test_the_printed_commands_are_valid_for_vllm(vllm_installed):
    one_out, one = recommended("--model", "qwen2.5-coder-1.5b", "--gpus", "1", "--port", "8001")
    _, tp_dp = recommended("--model", "Qwen/Qwen2.5-Coder-32B-Instruct", "--gpus", "4")
    ray_out, ray_dp = recommended("--model", "Qwen/Qwen2.5-Coder-7B-Instruct", "--gpus", "8", "--nodes", "2",
                                  "--speculator", "suffix", "--max-model-len", "16384")
    _, ray_pp = recommended("--model", "meta/Llama-3.1-405B-Instruct", "--gpus", "8", "--nodes", "4")
    got = parsed_by_vllm([one, tp_dp, ray_dp, ray_pp])

    assert got[0]["model"] == "Qwen/Qwen2.5-Coder-1.5B-Instruct" and got[0]["served"] == ["qwen2.5-coder-1.5b"]
    assert (got[0]["tp"], got[0]["pp"], got[0]["dp"]) == (1, 1, 1) and got[0]["prefix"] is True
    assert got[0]["spec"] == {"method": "ngram", "num_speculative_tokens": 15, "prompt_lookup_max": 16,
                              "prompt_lookup_min": 2}
    assert got[0]["spec_metrics"] == "summary" and got[0]["prompt_details"] and got[0]["len"] == 32768
    assert got[0]["port"] == 8001
    assert "editapply serve --backend vllm --vllm-url http://GPU_HOST:8001 --model qwen2.5-coder-1.5b" in one_out

    assert (got[1]["tp"], got[1]["dp"], got[1]["executor"]) == (2, 2, None)

    assert (got[2]["tp"], got[2]["dp"], got[2]["dp_backend"], got[2]["len"]) == (1, 16, "ray", 16384)
    assert got[2]["spec"]["method"] == "suffix" and "ray start --head" in ray_out and "arctic-inference" in ray_out

    assert (got[3]["tp"], got[3]["pp"], got[3]["executor"]) == (8, 3, "ray")
    assert shlex.split(ray_pp)[2] == "meta/Llama-3.1-405B-Instruct"
