"""The vLLM backend behind every front end: the same apply request gives the same answer through
vLLM as through our engine -- in process (the Engine protocol), through `editapply serve --backend
vllm` (plain and streamed), through `editapply apply --backend vllm`, and through the language
server -- and a client that goes away stops the request inside vLLM.

Real parts: vLLM's CPU build serving the CI model (conftest.py), our server and CLI as
subprocesses, the language server driven by pytest-lsp's client. The CI model is weak: the tests
compare the backends' answers with each other, not with the commit's file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from engine.apply.pipeline import ApplyRequest
from engine.apply.run import apply_edit
from engine.types import Request, SamplingParams
from tests.conftest import swap_tokens
from tests.vllm.conftest import CI_MODEL, dev_case, model_request, start_serve, stop_serve, vllm_metric, vllm_running


@pytest.fixture(scope="module")
def reference(ours):
    """Our engine's model-path answer for the dev case (what every vLLM path must reproduce)."""
    return apply_edit(ours, model_request(dev_case()))


@pytest.fixture(scope="module")
def serve(vllm):
    proc, url = start_serve("--backend", "vllm", "--vllm-url", vllm.url, "--model", CI_MODEL)
    yield url
    err = stop_serve(proc)
    assert f"serving {CI_MODEL} on {url} (no authentication; vLLM at {vllm.url}, context 4096 tokens)" in err


def test_the_vllm_service_generates_what_our_engine_generates(vllm, ours):
    """Greedy, same prompt ids: the same tokens from both engines, and vLLM's figures (from its
    per-request speculation metrics) are consistent: every token after the first committed by a
    step (vLLM's last step may count up to a block of drafts that max_tokens cut), accepted <=
    drafted, and drafting happened on a copy-heavy answer."""
    case = dev_case()
    prompt = ours.tokenizer.encode_chat([{"role": "user", "content": "Repeat this file exactly:\n" + case["original"]}])
    answers = {}
    for name, service in (("vllm", vllm), ("ours", ours)):
        events = list(service.generate(Request(prompt, SamplingParams(max_tokens=200))))
        answers[name] = [t for e in events for t in e.token_ids], events[-1]
    (ids, last), (our_ids, _) = answers["vllm"], answers["ours"]
    assert ids == our_ids and last.finished and last.finish_reason in ("stop", "length")
    s = last.stats
    assert s.generated_tokens == len(ids) and s.prompt_tokens == len(prompt)
    committed = sum(k * n for k, n in s.accepted_per_step_hist.items())
    assert len(ids) - 1 <= committed <= len(ids) - 1 + 16
    assert s.steps == sum(s.accepted_per_step_hist.values()) and s.steps < len(ids) - 1
    assert 0 < s.accepted <= s.drafted and s.ttft_ms > 0 and s.tokens_per_second > 0


def test_the_apply_pipeline_gives_the_same_result_on_both_backends(vllm, reference):
    result = apply_edit(vllm, model_request(dev_case()))
    assert result.stats.path == "model" and result.usage.completion_tokens > 0
    assert result.merged_code == reference.merged_code and result.diff == reference.diff
    assert [p.name for p in result.validation.problems] == [p.name for p in reference.validation.problems]
    assert result.usage.completion_tokens == reference.usage.completion_tokens


def test_readings_rank_the_same_on_both_backends(vllm, ours):
    """An ambiguous snippet (keep `pass` or end the class at its docstring): vLLM's prompt
    log-probabilities give each reading the score our engine's score requests give (both fp32 on
    the CPU), so the same reading is taken or the same refusal made."""
    original = "class MyError(Exception):\n    \"\"\"Raised when it fails.\"\"\"\n    pass\n\n\nclass Other:\n    x = 1\n"
    req = ApplyRequest(original, "class MyError(Exception):\n    \"\"\"Raised when it fails.\"\"\"\n", path="e.py")
    results = {name: apply_edit(service, req) for name, service in (("vllm", vllm), ("ours", ours))}
    (theirs, mine) = results["vllm"], results["ours"]
    assert len(mine.readings) == 2 and [r.label for r in theirs.readings] == [r.label for r in mine.readings]
    assert [r.logprob for r in theirs.readings] == pytest.approx([r.logprob for r in mine.readings], abs=0.05)
    assert theirs.merged_code == mine.merged_code and theirs.stats.path == mine.stats.path


def test_serve_backend_vllm_applies_plain_and_streamed(serve, reference):
    """`POST /v1/apply` on `editapply serve --backend vllm`: the pipeline's result, plainly and as
    server-sent events (text deltas that add up to the model's answer, then the result)."""
    case = dev_case()
    body = {"initial_code": case["original"], "edit_snippet": case["update_snippet"], "path": case["path"],
            "mode": "model", "prompt_form": "draft"}
    with httpx.Client(base_url=serve, timeout=300) as c:
        r = c.post("/v1/apply", json=body)
        assert r.status_code == 200, r.text
        result = r.json()
        assert result["merged_code"] == reference.merged_code and result["stats"]["path"] == "model"
        assert result["usage"]["completion_tokens"] == reference.usage.completion_tokens
        assert result["stats"]["steps"] > 0 and result["stats"]["accepted"] > 0
        with c.stream("POST", "/v1/apply", json={**body, "stream": True}) as r:
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        deltas = [e["text"] for e in events if e.get("type") == "delta"]
        final = [e for e in events if e.get("type") == "result"]
        assert len(deltas) > 1 and len(final) == 1 and final[0]["merged_code"] == reference.merged_code
        # Deterministic applies, health and metrics need no generation and work the same.
        det = c.post("/v1/apply", json={**body, "mode": "deterministic"}).json()
        assert det["merged_code"] == case["expected"] and det["stats"]["path"] == "deterministic"
        health = c.get("/health").json()
        assert health["status"] == "ok" and health["running"] == 0 and health["kv_blocks_total"] is None
        assert "editapply_running 0.0" in c.get("/metrics").text


def test_apply_cli_backend_vllm(vllm, reference, tmp_path):
    """`editapply apply FILE SNIPPET --mode model --backend vllm --vllm-url URL --write`."""
    case = dev_case()
    target, snippet = tmp_path / "ext_init.py", tmp_path / "snippet.py"
    target.write_text(case["original"], encoding="utf-8")
    snippet.write_text(case["update_snippet"], encoding="utf-8")
    cmd = [sys.executable, "-m", "engine.cli", "apply", str(target), str(snippet), "--mode", "model",
           "--prompt-form", "draft", "--model", CI_MODEL, "--backend", "vllm", "--vllm-url", vllm.url, "--json"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)  # the context: vLLM's (4096)
    result = json.loads(run.stdout)
    assert result["merged_code"] == reference.merged_code and result["stats"]["path"] == "model"
    assert run.returncode == (0 if reference.ok else 1), run.stderr
    assert target.read_text(encoding="utf-8") == case["original"]  # a preview writes nothing


def test_a_client_that_leaves_stops_the_request_in_vllm(serve, vllm):
    """A streamed chat answer whose client hangs up after a few deltas: our server cancels, the
    stream to vLLM closes, and vLLM aborts the request: its gauge of running requests and our
    /health drop to 0, its count of generated tokens stops far short of the 1,500 asked for, and
    it counts no request finished by `stop` or `length` (vLLM does not count aborts there).
    vLLM writes its metrics after each engine step, so they are polled, never read once (the
    gauge once read 0 mid-stream in CI)."""
    case = dev_case("tj/commander.js@a9967826ca:eslint.config.js")
    body = {"messages": [{"role": "user", "content": "Repeat this file, line by line, twice:\n" + case["original"]}],
            "max_tokens": 1500, "stream": True}

    def finished():
        return [vllm_metric(vllm.url, "vllm:request_success_total", finished_reason=r) for r in ("stop", "length")]

    def generated():
        return vllm_metric(vllm.url, "vllm:generation_tokens_total")

    finished_before, generated_before = finished(), generated()
    with httpx.Client(base_url=serve, timeout=300) as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("data: {")
            if seen == 3:
                break
    deadline = time.monotonic() + 30
    while (generated() == generated_before or vllm_running(vllm.url) != 0
           or httpx.get(serve + "/health").json()["running"] != 0):
        assert time.monotonic() < deadline, "vLLM still runs the request its client left"
        time.sleep(0.1)
    stopped_at = generated()
    time.sleep(2)
    assert generated() == stopped_at < generated_before + 1500 and finished() == finished_before


def tokenizer_only(src, dst, swap: tuple[str, str] | None = None):
    """A folder with `src`'s tokenizer files and no weights; `swap` exchanges two tokens' ids
    (a tokenizer of another model, as far as the ids go)."""
    dst.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"):
        (dst / name).write_bytes((src / name).read_bytes())
    if swap:
        swap_tokens(dst, *swap)
    return dst


def test_the_model_needs_only_its_tokenizer_here_and_the_right_one(vllm, ci_model_dir, tmp_path):
    """With backend vllm, `--model` may be a folder holding only the tokenizer; a tokenizer that
    is not the served model's is refused at connect time (prompts would be built for another
    vocabulary)."""
    from engine.backends.vllm import VLLMService
    from engine.service import open_service
    from engine.tokenizer import Tokenizer
    from tests.vllm.conftest import vllm_config

    folder = tokenizer_only(ci_model_dir, tmp_path / "tok")
    service = open_service(vllm_config(model=str(folder), vllm_url=vllm.url))
    assert service.cfg.max_model_len == 4096 and service.served_model == CI_MODEL
    wrong = Tokenizer(tokenizer_only(ci_model_dir, tmp_path / "other", swap=("Ġreturn", "Ġx")))
    with pytest.raises(ValueError, match="whose tokenizer is not"):
        VLLMService.connect(vllm.url, wrong, "other")
