"""Load an HF-layout folder (config.json + *.safetensors + tokenizer.json) into our model code.

HF tensor names map onto our modules one to one, except the fused projections: q/k/v_proj are
concatenated into `qkv_proj` and gate/up_proj into `gate_up_proj`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from engine.models.config import ModelConfig, UnsupportedModelError
from engine.models.layers import RotaryEmbedding
from engine.models.transformer import CausalLM

FUSED = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
         "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}


class ModelFolderError(FileNotFoundError):
    """A model folder lacks a file the engine needs."""


def check_folder(folder: str | Path) -> Path:
    """Raise a clear error unless `folder` is a loadable HF model folder; return it as a Path."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"{folder}: not a directory")
    missing = [n for n in ("config.json", "tokenizer.json") if not (folder / n).is_file()]
    if not list(folder.glob("*.safetensors")):
        missing.append("*.safetensors")
    if missing:
        raise ModelFolderError(f"{folder}: missing {', '.join(missing)} (need an HF model folder)")
    ModelConfig.from_folder(folder)  # raises UnsupportedModelError for other architectures
    return folder


def _our_name(hf_name: str) -> tuple[str, int | None]:
    """HF tensor name -> (our parameter name, shard index within a fused parameter or None)."""
    name = hf_name.removeprefix("model.")
    parts = name.split(".")
    for i, p in enumerate(parts):
        if p in FUSED:
            fused, shard = FUSED[p]
            return ".".join(parts[:i] + [fused] + parts[i + 1 :]), shard
    return name, None


def load_model(folder: str | Path, dtype: torch.dtype = torch.float32, device="cpu",
               max_positions: int | None = None) -> CausalLM:
    folder = Path(folder)
    cfg = ModelConfig.from_folder(folder)
    with torch.device("meta"):
        model = CausalLM(cfg, max_positions=1)
    params = dict(model.named_parameters())
    shards: dict[str, dict[int, torch.Tensor]] = {}
    loaded: set[str] = set()
    files = sorted(folder.glob("*.safetensors"))
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for hf_name in f.keys():
                name, shard = _our_name(hf_name)
                if name == "lm_head.weight" and cfg.tie_word_embeddings:
                    continue
                if name.endswith("rotary_emb.inv_freq"):
                    continue
                if name not in params:
                    raise UnsupportedModelError(f"{file.name}: unexpected tensor {hf_name!r}")
                tensor = f.get_tensor(hf_name)
                if shard is None:
                    _set_param(model, name, tensor, dtype, device)
                    loaded.add(name)
                else:
                    shards.setdefault(name, {})[shard] = tensor
    for name, parts in shards.items():
        expected = 3 if "qkv_proj" in name else 2
        if len(parts) != expected:
            raise UnsupportedModelError(f"incomplete fused tensor {name}: got shards {sorted(parts)}")
        _set_param(model, name, torch.cat([parts[i] for i in range(expected)]), dtype, device)
        loaded.add(name)
    missing = set(params) - loaded
    if missing:
        raise UnsupportedModelError(f"{folder}: checkpoint lacks {sorted(missing)[:5]}")
    model.rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling,
                                   max_positions or cfg.max_position_embeddings).to(device)
    return model.eval().requires_grad_(False)


def _set_param(model: nn.Module, name: str, tensor: torch.Tensor, dtype, device) -> None:
    module_name, _, attr = name.rpartition(".")
    module = model.get_submodule(module_name)
    old = getattr(module, attr)
    if tuple(old.shape) != tuple(tensor.shape):
        raise UnsupportedModelError(f"{name}: shape {tuple(tensor.shape)} in checkpoint, {tuple(old.shape)} expected")
    setattr(module, attr, nn.Parameter(tensor.to(device=device, dtype=dtype), requires_grad=False))
