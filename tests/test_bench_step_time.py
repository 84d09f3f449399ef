"""bench.step_time on the CPU: each engine (a variant at one verify block) is timed in a process of
its own (a step timed after another engine ran in the process reads slow, bench/HISTORY.md
"Profiled, then timed")."""

import json
import os

from bench import step_time


def _steps(out):
    return json.loads((out / "step_time.json").read_text())["steps"]


def test_each_engine_is_timed_in_its_own_process(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path))
    step_time.main(["--shape", "qwen2-tiny", "--contexts", "32", "--reps", "2", "--k", "4", "8",
                    "--packed-weights", "off", "on", "--no-hf"])
    steps = _steps(tmp_path)
    assert sorted((s["engine"], s["k"]) for s in steps) == [
        ("ours, auto", 1), ("ours, auto", 4), ("ours, auto", 8),
        ("ours, auto, plain weights", 1), ("ours, auto, plain weights", 4), ("ours, auto, plain weights", 8)]
    assert all(s["ms"] > 0 for s in steps)
    pids = {(s["engine"], s["k"]): s["pid"] for s in steps}
    # K=1 is timed by the first block's engine; each of the four engines had its own process
    assert pids[("ours, auto", 1)] == pids[("ours, auto", 4)]
    assert len(set(pids.values())) == 4 and os.getpid() not in pids.values()


def test_one_process_on_request(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path))
    step_time.main(["--shape", "qwen2-tiny", "--contexts", "32", "--reps", "2", "--k", "4",
                    "--packed-weights", "off", "on", "--no-hf", "--one-process"])
    assert {s["pid"] for s in _steps(tmp_path)} == {os.getpid()}


def test_the_floor_counts_the_weights_a_step_reads(tmp_path):
    """A tied table is read whole (it is the lm_head); an untied input embedding is not (a step
    gathers its tokens' rows), so an untied checkpoint's floor leaves that table out."""
    import torch
    import transformers

    spec = dict(step_time.SHAPES["qwen2-tiny"])
    for tied in (True, False):
        folder = tmp_path / f"tied{tied}"
        cfg = transformers.AutoConfig.for_model(**(spec | {"tie_word_embeddings": tied}))
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        model.save_pretrained(folder)
        table = spec["vocab_size"] * spec["hidden_size"] * 2
        every = sum(p.numel() * 2 for p in model.parameters())  # a tied table once
        assert step_time.step_weight_bytes(folder) == (every if tied else every - table)
    assert step_time.SHAPES["qwen2.5-coder-0.5b"]["tie_word_embeddings"]  # as the real model
