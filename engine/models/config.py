"""ModelConfig: the architecture facts the model code needs, read from an HF `config.json`.

One dataclass for the four supported families (Llama, Mistral, Qwen2, Qwen3); the differences
between them are flags (`qkv_bias`, `qk_norm`, `sliding_window`) rather than subclasses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
ROPE_TYPES = ("default", "linear", "llama3", "yarn")


class UnsupportedModelError(ValueError):
    """The model folder describes an architecture or option this engine does not implement."""


@dataclass
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    rope_scaling: dict = field(default_factory=lambda: {"rope_type": "default"})
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self):
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"unsupported architecture {self.architecture!r}; "
                f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        if self.num_heads % self.num_kv_heads:
            raise UnsupportedModelError(
                f"num_attention_heads={self.num_heads} is not a multiple of "
                f"num_key_value_heads={self.num_kv_heads}"
            )
        rope_type = self.rope_scaling.get("rope_type", "default")
        if rope_type not in ROPE_TYPES:
            raise UnsupportedModelError(
                f"unsupported rope scaling {rope_type!r}; supported: {', '.join(ROPE_TYPES)}"
            )

    @classmethod
    def from_hf(cls, hf: dict) -> "ModelConfig":
        """Map an HF config dict (transformers 4.x or 5.x spelling) to a ModelConfig."""
        arch = hf.get("model_type")
        if arch not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"unsupported model_type {arch!r} (architectures={hf.get('architectures')}); "
                f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        num_heads = hf["num_attention_heads"]
        # transformers 5 folds theta and scaling into `rope_parameters`; 4.x has `rope_theta` and
        # `rope_scaling` at top level (with `type` as an old spelling of `rope_type`).
        rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
        rope_theta = rope.pop("rope_theta", None) or hf.get("rope_theta", 10000.0)
        rope["rope_type"] = rope.get("rope_type", rope.pop("type", "default"))
        if rope["rope_type"] in ("llama3", "yarn"):
            rope.setdefault("original_max_position_embeddings", hf.get("max_position_embeddings"))
        # Qwen2 always has q/k/v biases and never an o_proj bias; the others follow attention_bias.
        qkv_bias = arch == "qwen2" or bool(hf.get("attention_bias", False))
        o_bias = arch != "qwen2" and bool(hf.get("attention_bias", False))
        if hf.get("mlp_bias"):
            raise UnsupportedModelError("mlp_bias=true is not supported")
        sliding_window = hf.get("sliding_window")
        # Qwen2/Qwen3 carry a sliding_window value but only use it when use_sliding_window is set.
        if arch in ("qwen2", "qwen3") and not hf.get("use_sliding_window", False):
            sliding_window = None
        eos = hf.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ())
        return cls(
            architecture=arch,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // num_heads,
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope_theta),
            max_position_embeddings=hf.get("max_position_embeddings", 4096),
            rope_scaling=rope,
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            qk_norm=arch == "qwen3",
            sliding_window=sliding_window,
            bos_token_id=hf.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )

    @classmethod
    def from_folder(cls, folder: str | Path) -> "ModelConfig":
        path = Path(folder) / "config.json"
        if not path.is_file():
            raise FileNotFoundError(f"{folder}: no config.json (not an HF model folder)")
        return cls.from_hf(json.loads(path.read_text()))
