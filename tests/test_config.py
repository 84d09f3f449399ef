"""EngineConfig's resolved values (the field checks are tested with the parts they guard)."""

from pathlib import Path

import pytest
import torch

from engine import config
from engine.config import EngineConfig, cpu_multiplies_bf16  # the real one: tests/conftest.py patches the module's


def test_auto_dtype_is_bf16_where_the_cpu_multiplies_it(monkeypatch):
    monkeypatch.setattr(config, "cpu_multiplies_bf16", lambda: True)
    assert EngineConfig(device="cpu").torch_dtype == torch.bfloat16
    monkeypatch.setattr(config, "cpu_multiplies_bf16", lambda: False)
    assert EngineConfig(device="cpu").torch_dtype == torch.float32
    assert EngineConfig(device="cuda").torch_dtype == torch.bfloat16
    assert EngineConfig(device="cpu", dtype="bf16").torch_dtype == torch.bfloat16  # named: as named


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="Linux: the kernel lists the CPU's flags")
def test_the_detector_agrees_with_the_kernel():
    flags = set(Path("/proc/cpuinfo").read_text().split())
    assert cpu_multiplies_bf16() == ("amx_tile" in flags)


def test_tests_run_fp32():
    """This suite pins fp32 (tests/conftest.py) whatever the CPU."""
    assert EngineConfig(device="cpu").torch_dtype == torch.float32
    assert EngineConfig.from_env(device="cpu").torch_dtype == torch.float32
