"""EngineConfig: every engine switch in one dataclass, checked once; environment variables land here.

Each switch is one environment variable apart (`EDITAPPLY_<FIELD>`, listed in ENV below and in the
README). Components copy the fields they use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace

import torch

from engine.choices import BACKENDS
from engine.loader.registry import DEFAULT_MODEL
from engine.speculative.drafters import DRAFTER_KINDS
from kernels.paged_attention import IMPLS as ATTENTION_IMPLS

KV_DTYPES = ("auto", "bf16", "fp16", "fp32", "fp8", "int8", "int4")
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


@dataclass
class EngineConfig:
    model: str = DEFAULT_MODEL  # a preset name or an HF folder
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (fp32 on CPU, bf16 on CUDA) | float32 | bfloat16 | float16
    # Prompt + output tokens of one sequence; 0 = the model's own context (max_position_embeddings:
    # 32768 for the Qwen2.5-Coder presets, 8192 for SmolLM2); more than the model's is refused.
    max_model_len: int = 0
    block_size: int = 16  # tokens per KV block
    kv_dtype: str = "auto"  # KV storage: auto (the model dtype) | bf16 | fp16 | fp32 | fp8 | int8 | int4
    enable_prefix_caching: bool = True  # share cached prompt blocks between requests
    kv_cache_tokens: int = 0  # KV capacity in tokens; 0 = max_num_seqs full sequences within 1 GiB (CPU; one at least) or half the free GPU memory
    max_num_seqs: int = 8  # sequences in flight at once
    max_batch_tokens: int = 4096  # token budget of one prefill step (prompt chunks)
    # Hard cap on the tokens one verify step feeds (0 = none). Each sequence feeds up to K tokens,
    # so K * max_num_seqs tokens a step at full load; adaptive_drafts trims drafts to what pays.
    verify_budget: int = 0
    adaptive_drafts: bool = True  # size drafts from the measured step cost and acceptance rates
    verify_tokens: int = 16  # K: positions verified per step ([last token] + up to K-1 drafts)
    drafter: str = "lookup"  # lookup | hybrid | draft | ngram-earliest | pld | none
    # The draft model of the `hybrid` and `draft` drafters (engine/speculative/hybrid.py): a preset or
    # folder with the target's tokenizer, or "heads" (the target's own, engine/speculative/heads.py); empty =
    # the heads where they were trained, on a GPU or a CPU set to bf16, else the preset's pair (the
    # 1.5B's is the 0.5B; engine.engine.default_draft_model).
    draft_model: str = ""
    # D: most tokens the draft model proposes per step (0 = engine/speculative/hybrid.py's default, chosen
    # by measurement); the step-cost model may run fewer.
    draft_tokens: int = 0
    min_match: int = 2  # shortest suffix match the drafters act on
    max_match: int = 16  # longer suffix matches count as equal (then the nearest occurrence wins)
    greedy_fast_path: bool = True  # argmax verification for temperature-0 requests
    # Sampled verification: "coupled" (noise keyed by seed and position: a seed gives the same text
    # with or without speculation) or "rejection" (classic rejection sampling of point-mass drafts).
    # Both give exactly the target's distribution.
    sampled_verify: str = "coupled"
    enforce_eager: bool = False  # no CUDA graphs
    # Verify blocks of at most this many positions replay a CUDA graph of that size instead of K
    # (engine/cuda_graphs.py): short drafts (the draft heads' few tokens, lookup's short ones) then
    # cost about a decode step, not a whole K-block. 0 = graphs of 1 and K positions only.
    short_block: int = 4
    # Plan the next verify step while this one runs, betting that every draft is accepted, and
    # launch it at once when the bet holds (engine/scheduler.py, Scheduler.plan_ahead).
    plan_ahead: bool = True
    # With one sequence, the draft model drafts the next step on its own CUDA stream while the
    # target verifies this one (engine/speculative/hybrid.py, drafting ahead; on the CPU one after the
    # other). Off: on the H200 the two models' steps slowed each other more than they overlapped.
    draft_ahead: bool = False
    # Paged attention (kernels/paged_attention): auto (the Triton kernel on CUDA, the reference
    # elsewhere) | triton | ref (gather + SDPA, for comparison)
    attention: str = "auto"
    # int8 weight-only embeddings and lm_head, per-row scales (kernels/int8_linear; the Triton
    # kernel on CUDA, the chunked reference elsewhere). Off: see README's config table for why.
    int8_head: bool = False
    seed: int = 0
    # Which engine generates (engine/backends): "engine" (ours, in this process) or "vllm" (a
    # `vllm serve`, for deployments beyond one GPU; the fields above then only name the model).
    backend: str = "engine"
    vllm_url: str = ""  # backend vllm: a running `vllm serve` (http://host:port); empty = start one here
    vllm_api_key: str = ""  # its --api-key, when it has one
    vllm_python: str = ""  # the python with vllm installed, to start one (empty: ./.venv-vllm, else python3)
    vllm_args: str = ""  # more `vllm serve` arguments when editapply starts it (shell words)

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.vllm_url and not self.vllm_url.startswith(("http://", "https://")):
            raise ValueError(f"vllm_url must be an http:// or https:// URL, got {self.vllm_url!r}")
        if self.drafter not in DRAFTER_KINDS:
            raise ValueError(f"drafter must be one of {DRAFTER_KINDS}, got {self.drafter!r}")
        if self.short_block < 0:
            raise ValueError(f"short_block must be >= 0 (0 = off), got {self.short_block}")
        if not 0 <= self.draft_tokens < 64:
            raise ValueError(f"draft_tokens must be in [0, 63] (0 = the default), got {self.draft_tokens}")
        if not 1 <= self.verify_tokens <= 64:
            raise ValueError(f"verify_tokens must be in [1, 64], got {self.verify_tokens}")
        if self.sampled_verify not in ("coupled", "rejection"):
            raise ValueError(f"sampled_verify must be coupled or rejection, got {self.sampled_verify!r}")
        if self.attention not in ATTENTION_IMPLS:
            raise ValueError(f"attention must be one of {ATTENTION_IMPLS}, got {self.attention!r}")
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, got {self.kv_dtype!r}")
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise ValueError(f"dtype must be auto or one of {sorted(DTYPES)}, got {self.dtype!r}")
        if not 1 <= self.min_match <= self.max_match:
            raise ValueError(f"need 1 <= min_match <= max_match, got {self.min_match}, {self.max_match}")
        if self.max_model_len < 0:
            raise ValueError(f"max_model_len must be positive (or 0 = the model's own context), got {self.max_model_len}")
        for name in ("block_size", "max_num_seqs", "max_batch_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_batch_tokens < self.verify_tokens:
            raise ValueError("max_batch_tokens must be at least verify_tokens")

    def for_model(self, model_context: int) -> "EngineConfig":
        """This config with `max_model_len` resolved against the model's own context (its config's
        max_position_embeddings): 0 takes the model's, a smaller value stays, a larger one is
        refused (the model was never trained on positions past it)."""
        if self.max_model_len > model_context:
            raise ValueError(f"max_model_len={self.max_model_len} is over the model's context of {model_context} tokens "
                             f"(max_position_embeddings in its config.json); set EDITAPPLY_MAX_MODEL_LEN to "
                             f"{model_context} or less, or 0 for the model's own")
        return replace(self, max_model_len=self.max_model_len or model_context)

    @property
    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    @property
    def torch_dtype(self) -> torch.dtype:
        if self.dtype == "auto":
            return torch.float32 if self.torch_device.type == "cpu" else torch.bfloat16
        return DTYPES[self.dtype]

    @classmethod
    def from_env(cls, environ: dict | None = None, **overrides) -> "EngineConfig":
        """Defaults, then EDITAPPLY_* variables, then explicit overrides (e.g. CLI flags)."""
        env = os.environ if environ is None else environ
        values = {}
        for f in fields(cls):
            raw = env.get(ENV[f.name])
            if raw is None or raw == "":
                continue
            values[f.name] = _parse(f.type, raw, ENV[f.name])
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


ENV = {f.name: "EDITAPPLY_" + f.name.upper() for f in fields(EngineConfig)}
ENV["verify_tokens"] = "EDITAPPLY_VERIFY_TOKENS"


def _parse(type_name, raw: str, var: str):
    t = str(type_name)
    try:
        if t == "bool":
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if t == "int":
            return int(raw)
        return raw
    except ValueError:
        raise ValueError(f"{var}={raw!r}: expected {t}") from None
