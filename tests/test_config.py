"""EngineConfig from the environment (engine/config.py, engine/env_settings.py): each field one
EDITAPPLY_* variable, its bounds checked, a bad value named in one line."""

from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.env_settings import variable
from engine.server.settings import ServerSettings

ROOT = Path(__file__).resolve().parents[1]


def test_variables_land_in_their_fields():
    env = {"EDITAPPLY_MAX_NUM_SEQS": "3", "EDITAPPLY_ENFORCE_EAGER": "on", "EDITAPPLY_PLAN_AHEAD": "0",
           "EDITAPPLY_DRAFTER": "pld", "EDITAPPLY_VERIFY_TOKENS": "8", "EDITAPPLY_KV_DTYPE": "int8",
           "EDITAPPLY_DTYPE": "bf16", "EDITAPPLY_VLLM_URL": "http://host:8000",
           "EDITAPPLY_HOME": "/elsewhere", "EDITAPPLY_API_KEY": "k", "EDITAPPLY_MAX_INPUT_BYTES": "10"}  # not its
    cfg = EngineConfig.from_env(env)
    assert (cfg.max_num_seqs, cfg.enforce_eager, cfg.plan_ahead, cfg.drafter) == (3, True, False, "pld")
    assert (cfg.verify_tokens, cfg.kv_dtype, cfg.dtype, cfg.vllm_url) == (8, "int8", "bf16", "http://host:8000")
    assert EngineConfig.from_env({}) == EngineConfig()


def test_empty_means_unset():
    assert EngineConfig.from_env({"EDITAPPLY_MAX_NUM_SEQS": "", "EDITAPPLY_DRAFTER": ""}) == EngineConfig()


def test_overrides_win_and_none_is_not_given():
    env = {"EDITAPPLY_MODEL": "from-env", "EDITAPPLY_DRAFTER": "pld"}
    cfg = EngineConfig.from_env(env, model=None, drafter="none", max_num_seqs=2)
    assert (cfg.model, cfg.drafter, cfg.max_num_seqs) == ("from-env", "none", 2)


def test_an_explicit_environ_wins_over_os_environ(monkeypatch):
    monkeypatch.setenv("EDITAPPLY_MAX_NUM_SEQS", "5")
    monkeypatch.setenv("EDITAPPLY_SEED", "7")
    assert EngineConfig.from_env().max_num_seqs == 5
    cfg = EngineConfig.from_env({"EDITAPPLY_MAX_NUM_SEQS": "2"})
    assert (cfg.max_num_seqs, cfg.seed) == (2, 0)
    assert EngineConfig().max_num_seqs == 8  # construction never reads the environment


@pytest.mark.parametrize("env, message", [
    ({"EDITAPPLY_MIN_MATCH": "0"}, "EDITAPPLY_MIN_MATCH='0': input should be greater than or equal to 1"),
    ({"EDITAPPLY_MAX_NUM_SEQS": "many"}, "EDITAPPLY_MAX_NUM_SEQS='many': input should be a valid integer"),
    ({"EDITAPPLY_ENFORCE_EAGER": "maybe"}, "EDITAPPLY_ENFORCE_EAGER='maybe': input should be a valid boolean"),
    ({"EDITAPPLY_VERIFY_TOKENS": "65"}, "EDITAPPLY_VERIFY_TOKENS='65': input should be less than or equal to 64"),
    ({"EDITAPPLY_DRAFT_TOKENS": "64"}, "EDITAPPLY_DRAFT_TOKENS='64': input should be less than or equal to 63"),
    ({"EDITAPPLY_MAX_MODEL_LEN": "-1"}, "EDITAPPLY_MAX_MODEL_LEN='-1': input should be greater than or equal to 0"),
    ({"EDITAPPLY_SHORT_BLOCK": "-1"}, "EDITAPPLY_SHORT_BLOCK='-1'"),
    ({"EDITAPPLY_BLOCK_SIZE": "0"}, "EDITAPPLY_BLOCK_SIZE='0'"),
    ({"EDITAPPLY_DRAFTER": "magic"}, "EDITAPPLY_DRAFTER='magic': input should be 'lookup', 'hybrid', "),
    ({"EDITAPPLY_KV_DTYPE": "int2"}, "EDITAPPLY_KV_DTYPE='int2': input should be 'auto', "),
    ({"EDITAPPLY_ATTENTION": "cuda"}, "EDITAPPLY_ATTENTION='cuda': input should be 'auto', 'triton' or 'ref'"),
    ({"EDITAPPLY_DTYPE": "fp64"}, "EDITAPPLY_DTYPE='fp64': input should be 'auto', "),
    ({"EDITAPPLY_SAMPLED_VERIFY": "exact"}, "EDITAPPLY_SAMPLED_VERIFY='exact': input should be 'coupled' or 'rejection'"),
    ({"EDITAPPLY_BACKEND": "tgi"}, "EDITAPPLY_BACKEND='tgi': input should be 'engine' or 'vllm'"),
    ({"EDITAPPLY_VLLM_URL": "host:8000"}, "EDITAPPLY_VLLM_URL='host:8000': must be an http:// or https:// URL"),
    ({"EDITAPPLY_MIN_MATCH": "20"}, "EDITAPPLY_MIN_MATCH=20 must be at most EDITAPPLY_MAX_MATCH=16"),
    ({"EDITAPPLY_MAX_BATCH_TOKENS": "8"}, "EDITAPPLY_MAX_BATCH_TOKENS=8 must be at least EDITAPPLY_VERIFY_TOKENS=64"),
])
def test_a_bad_variable_is_named_in_one_line(env, message):
    with pytest.raises(ValueError) as info:
        EngineConfig.from_env(env)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_every_problem_is_named():
    with pytest.raises(ValueError) as info:
        EngineConfig.from_env({"EDITAPPLY_MAX_NUM_SEQS": "0", "EDITAPPLY_SEED": "x"})
    assert "EDITAPPLY_MAX_NUM_SEQS='0'" in str(info.value) and "EDITAPPLY_SEED='x'" in str(info.value)


def test_a_bad_argument_is_named_as_the_field():
    """An override (a CLI flag) or a constructor argument is no variable: the field is named."""
    with pytest.raises(ValueError, match=r"^drafter='magic': input should be 'lookup'"):
        EngineConfig.from_env({"EDITAPPLY_DRAFTER": "pld"}, drafter="magic")
    with pytest.raises(ValueError, match=r"^max_model_len=-1: input should be greater than or equal to 0$"):
        EngineConfig(max_model_len=-1)
    with pytest.raises(ValueError, match=r"^max_num_sequences=2: extra inputs are not permitted$"):
        EngineConfig(max_num_sequences=2)


def test_frozen_and_copied():
    cfg = EngineConfig(max_model_len=0)
    with pytest.raises(ValueError):
        cfg.max_model_len = 5
    assert cfg.for_model(8192).max_model_len == 8192 and cfg.max_model_len == 0


@pytest.mark.parametrize("model, readme", [(EngineConfig, "engine/README.md"), (ServerSettings, "engine/server/README.md")])
def test_the_readme_lists_every_variable(model, readme):
    """Each process kind's README has the full table of its variables."""
    text = (ROOT / readme).read_text(encoding="utf-8")
    for name in model.model_fields:
        assert f"`{variable(name)}`" in text, f"{readme} does not list {variable(name)} ({model.__name__}.{name})"


def test_the_cli_exits_2_naming_the_variable(tmp_path):
    """Run as a process, as a user runs it: in-process, `main` leaves with `os._exit` when an
    engine thread of another test is alive (cli.leave_if_engine_busy), taking pytest with it."""
    from tests.test_cli import editapply

    (tmp_path / "f.py").write_text("x = 1\n")
    (tmp_path / "s.py").write_text("x = 2\n")
    run = editapply(str(tmp_path / "f.py"), str(tmp_path / "s.py"), "--mode", "model", env={"EDITAPPLY_MIN_MATCH": "0"})
    assert run.returncode == 2
    assert "EDITAPPLY_MIN_MATCH='0': input should be greater than or equal to 1" in run.stderr.decode()


def test_bf16_on_the_cpu_runs_batch_invariant():
    """bf16 or fp16 on the CPU runs batch-invariant unless switched off; fp32 (the CPU's default)
    is exact without it, and CUDA has no such kernels."""
    import torch

    assert EngineConfig(device="cpu").torch_dtype == torch.float32 and not EngineConfig(device="cpu").rows_invariant
    assert EngineConfig(device="cpu", dtype="bf16").rows_invariant and EngineConfig(device="cpu", dtype="fp16").rows_invariant
    assert not EngineConfig(device="cpu", dtype="bf16", batch_invariant="off").rows_invariant
    assert EngineConfig(device="cpu", batch_invariant="on").rows_invariant
    assert not EngineConfig(device="cuda", dtype="bf16").rows_invariant
