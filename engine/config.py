"""EngineConfig: every engine switch in one pydantic-settings model, checked once.

Each switch is one environment variable apart: field `max_num_seqs` is `EDITAPPLY_MAX_NUM_SEQS`,
declared below with its type, bounds and description (engine/env_settings.py: construction,
`from_env`, the errors; the README lists the variables). Components copy the fields they use.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from engine.choices import BACKENDS
from engine.env_settings import EnvSettings, variable
from engine.loader.registry import DEFAULT_MODEL
from engine.speculative.drafters import DRAFTER_KINDS
from kernels.paged_attention import IMPLS as ATTENTION_IMPLS

MAX_VERIFY_TOKENS = 64  # the longest verify block an engine or a request may ask for
KV_DTYPES = ("auto", "bf16", "fp16", "fp32", "fp8", "int8", "int4")
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


class EngineConfig(EnvSettings):
    model_config = SettingsConfigDict(frozen=True)

    model: str = Field(DEFAULT_MODEL, description="a preset name or an HF folder")
    device: str = Field("auto", description="auto | cpu | cuda | cuda:N")
    dtype: Literal[("auto", *DTYPES)] = Field(
        "auto", description="auto (fp32 on CPU, bf16 on CUDA) | float32 | bfloat16 | float16 (or fp32, bf16, fp16)")
    max_model_len: int = Field(0, ge=0, description=(
        "prompt + output tokens of one sequence; 0 = the model's own context (max_position_embeddings: 32768 for "
        "the Qwen2.5-Coder presets, 8192 for SmolLM2); more than the model's is refused"))
    block_size: int = Field(16, ge=1, description="tokens per KV block")
    kv_dtype: Literal[KV_DTYPES] = Field(
        "auto", description="KV storage: auto (the model dtype) | bf16 | fp16 | fp32 | fp8 | int8 | int4")
    enable_prefix_caching: bool = Field(True, description="share cached prompt blocks between requests")
    kv_cache_tokens: int = Field(0, ge=0, description=(
        "KV capacity in tokens; 0 = max_num_seqs full sequences within 1 GiB (CPU; one at least) or half the "
        "free GPU memory"))
    max_num_seqs: int = Field(8, ge=1, description="sequences in flight at once")
    max_batch_tokens: int = Field(4096, ge=1, description="token budget of one prefill step (prompt chunks)")
    verify_budget: int = Field(0, ge=0, description=(
        "hard cap on the tokens one verify step feeds (0 = none). Each sequence feeds up to K tokens, so "
        "K * max_num_seqs tokens a step at full load; adaptive_drafts trims drafts to what pays"))
    adaptive_drafts: bool = Field(True, description="size drafts from the measured step cost and acceptance rates")
    verify_tokens: int = Field(64, ge=1, le=MAX_VERIFY_TOKENS, description=(
        "K: positions verified per step ([last token] + up to K-1 drafts); a step of many sequences verifies "
        "at most 32 each (engine/scheduler.py, FULL_BLOCK_ROWS)"))
    drafter: Literal[DRAFTER_KINDS] = Field("lookup", description=(
        "lookup | hybrid | draft | ngram-earliest | pld | none"))
    draft_model: str = Field("", description=(
        "the draft model of the `hybrid` and `draft` drafters (engine/speculative/hybrid.py): a preset or folder "
        "with the target's tokenizer, or \"heads\" (the target's own, engine/speculative/heads.py); empty = the "
        "heads where they were trained, on a GPU or a CPU set to bf16, else the preset's pair (the 1.5B's is the "
        "0.5B; engine.speculative.choose.default_draft_model)"))
    draft_tokens: int = Field(0, ge=0, le=63, description=(
        "D: most tokens the draft model proposes per step (0 = engine/speculative/hybrid.py's default, chosen by "
        "measurement); the step-cost model may run fewer"))
    min_match: int = Field(2, ge=1, description="shortest suffix match the drafters act on")
    max_match: int = Field(16, ge=1, description=(
        "longer suffix matches count as equal (then the nearest occurrence wins); at least min_match"))
    greedy_fast_path: bool = Field(True, description="argmax verification for temperature-0 requests")
    sampled_verify: Literal["coupled", "rejection"] = Field("coupled", description=(
        "sampled verification: coupled (noise keyed by seed and position: a seed gives the same text with or "
        "without speculation) or rejection (classic rejection sampling of point-mass drafts). Both give exactly "
        "the target's distribution"))
    enforce_eager: bool = Field(False, description="no CUDA graphs")
    short_block: int = Field(4, ge=0, description=(
        "verify blocks of at most this many positions replay a CUDA graph of that size instead of K "
        "(engine/cuda_graphs.py): short drafts (the draft heads' few tokens, lookup's short ones) then cost about "
        "a decode step, not a whole K-block. 0 = graphs of 1 and K positions only"))
    plan_ahead: bool = Field(True, description=(
        "plan the next verify step while this one runs, betting that each draft is accepted, and launch it at "
        "once, the sequences whose bet failed drafted again (engine/scheduler.py, Scheduler.plan_ahead)"))
    draft_ahead: bool = Field(False, description=(
        "with one sequence, the draft model drafts the next step on its own CUDA stream while the target "
        "verifies this one (engine/speculative/hybrid.py, drafting ahead; on the CPU one after the other). Off: "
        "the two models' steps slow each other more than they overlap (bench/HISTORY.md, drafting ahead)"))
    attention: Literal[ATTENTION_IMPLS] = Field("auto", description=(
        "paged attention (kernels/paged_attention): auto (the Triton kernel on CUDA, the reference elsewhere) | "
        "triton | ref (gather + SDPA, for comparison)"))
    batch_invariant: Literal["auto", "on", "off"] = Field("auto", description=(
        "every row of a step computed independently of the others, so a verify block commits the tokens "
        "plain decoding writes in bf16 too (models/transformer.py set_batch_invariant): auto (on for "
        "bf16/fp16 on the CPU; off on CUDA, where it costs speed) | on | off"))
    packed_weights: bool = Field(True, description=(
        "CPU: the linear layers' weights packed once in oneDNN's layout (models/layers.py pack_weight), "
        "1.4-3.6x faster GEMMs than a plain weight; off for comparison"))
    int8_head: bool = Field(False, description=(
        "int8 weight-only embeddings and lm_head, per-row scales (kernels/int8_linear; the Triton kernel on "
        "CUDA, the chunked reference elsewhere). Off: see README's config table for why"))
    pdl: bool = Field(False, description=(
        "CUDA sm_90+: our Triton kernels launched with programmatic dependent launch, each scheduled while the "
        "kernel before it finishes and waiting for it on the GPU (kernels/pdl.py); off elsewhere"))
    seed: int = Field(0, description="default sampling seed")
    backend: Literal[BACKENDS] = Field("engine", description=(
        "which engine generates (engine/backends): engine (ours, in this process) or vllm (a `vllm serve`, for "
        "deployments beyond one GPU; the fields above then only name the model)"))
    vllm_url: str = Field("", description=(
        "backend vllm: a running `vllm serve` (http://host:port); empty = start one here"))
    vllm_api_key: str = Field("", description="its --api-key, when it has one")
    vllm_python: str = Field("", description=(
        "the python with vllm installed, to start one (empty: ./.venv-vllm, else python3)"))
    vllm_args: str = Field("", description="more `vllm serve` arguments when editapply starts it (shell words)")

    @field_validator("vllm_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if url and not url.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return url

    @model_validator(mode="after")
    def _across_fields(self) -> EngineConfig:
        if self.min_match > self.max_match:
            raise ValueError(f"{variable('min_match')}={self.min_match} must be at most "
                             f"{variable('max_match')}={self.max_match}")
        if self.max_batch_tokens < self.verify_tokens:
            raise ValueError(f"{variable('max_batch_tokens')}={self.max_batch_tokens} must be at least "
                             f"{variable('verify_tokens')}={self.verify_tokens}")
        return self

    def for_model(self, model_context: int) -> "EngineConfig":
        """This config with `max_model_len` resolved against the model's own context (its config's
        max_position_embeddings): 0 takes the model's, a smaller value stays, a larger one is
        refused (the model was never trained on positions past it)."""
        if self.max_model_len > model_context:
            raise ValueError(f"max_model_len={self.max_model_len} is over the model's context of {model_context} tokens "
                             f"(max_position_embeddings in its config.json); set EDITAPPLY_MAX_MODEL_LEN to "
                             f"{model_context} or less, or 0 for the model's own")
        return self.model_copy(update={"max_model_len": self.max_model_len or model_context})

    @property
    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    @property
    def rows_invariant(self) -> bool:
        """Whether the model runs batch-invariant (`batch_invariant` resolved)."""
        if self.batch_invariant == "auto":
            return self.torch_device.type == "cpu" and self.torch_dtype != torch.float32
        return self.batch_invariant == "on"

    @property
    def torch_dtype(self) -> torch.dtype:
        if self.dtype == "auto":
            return torch.float32 if self.torch_device.type == "cpu" else torch.bfloat16
        return DTYPES[self.dtype]
