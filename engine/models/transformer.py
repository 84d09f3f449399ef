"""The decoder-only transformer behind every supported family (Llama, Mistral, Qwen2, Qwen3).

Written for an engine that owns its KV cache: `forward` takes a flat batch of token ids with their
absolute positions and an `AttentionMetadata` that says where each token's K/V goes (its cache
slot) and which slots each sequence attends to. It returns hidden states; `compute_logits` turns
only the rows the caller asks for (the last prompt token, or every row of a verify block) into
logits. Projections are fused (q|k|v and gate|up), and each residual add rides in the next norm
(kernels/fused_ops), so a step launches fewer kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from engine.models.config import ModelConfig
from engine.models.layers import (
    Int8Table,
    Linear,
    RMSNorm,
    RotaryEmbedding,
    SiluAndMul,
    can_pack,
    pack_weight,
    rows_matmul,
)
from kernels.fused_ops import rotary, rotary_to_cache
from kernels.paged_attention import paged_attention


@dataclass
class AttentionMetadata:
    """What attention needs to know about one step's batch, shared by every layer.

    Tokens of a step are laid out sequence after sequence: `query_lens[b]` tokens of sequence b.
    When every sequence contributes the same number of tokens (decode, or verify blocks of one
    length), `uniform` is true; that form is shape-static and is what CUDA graphs capture. The
    reference attention runs it as one batched call and other batches one sequence at a time; the
    Triton kernel runs every batch as one call (non-uniform ones through `query_starts`).
    """

    slot_mapping: torch.Tensor  # [T] cache slot each new token's K/V is written to
    slot_tables: torch.Tensor  # [B, S] cache slot of each context position, padded past the context
    q_positions: torch.Tensor  # [B, Tq_max] absolute position of each query (padded rows repeat)
    query_lens: list[int]  # tokens of each sequence in this step
    context_lens: list[int]  # tokens of each sequence in the cache after this step's writes
    query_starts: torch.Tensor | None = None  # [B+1] int32 first row of each sequence (non-uniform steps)

    @property
    def uniform(self) -> bool:
        return len(set(self.query_lens)) == 1


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        self.scale = cfg.head_dim**-0.5
        self.sliding_window = cfg.sliding_window
        self.qkv_proj = Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=cfg.qkv_bias)
        self.o_proj = Linear(self.q_size, cfg.hidden_size, bias=cfg.o_bias)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.impl = "ref"  # or "triton", for attention and RoPE; CausalLM.set_kernel_impl
        self.batch_invariant = False  # CausalLM.set_batch_invariant

    def forward(self, x, cos, sin, meta: AttentionMetadata, kv) -> torch.Tensor:
        T = x.shape[0]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(T, self.num_heads, self.head_dim)  # [T, H, D]
        k = k.view(T, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        v = v.view(T, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if kv.format == "plain":  # rope and the cache write in one launch on triton
            q = rotary_to_cache(q, k, v, cos, sin, kv.k, kv.v, meta.slot_mapping, self.impl)
        else:  # quantized caches quantize on write
            q, k = rotary(q, k, cos, sin, self.impl)
            kv.write(meta.slot_mapping, k, v)
        out = paged_attention(
            q, kv, meta.slot_tables, meta.q_positions, meta.query_lens, meta.context_lens, self.scale,
            self.sliding_window, query_starts=meta.query_starts, impl=self.impl, invariant=self.batch_invariant,
        )  # [T, H, D]
        return self.o_proj(out.reshape(T, self.q_size))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_up_proj = Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.act = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, residual, cos, sin, meta, kv) -> tuple[torch.Tensor, torch.Tensor]:
        """vLLM's residual passing: x is the previous layer's MLP output (the embeddings for the first
        layer, whose residual is None) and residual the stream it adds to. Each add happens inside the
        next norm (fused add + RMSNorm); returns (this layer's MLP output, the stream before it)."""
        if residual is None:
            x, residual = self.input_layernorm(x), x
        else:
            x, residual = self.input_layernorm(x, residual)
        x = self.self_attn(x, cos, sin, meta, kv)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x), residual


class CausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig, max_positions: int | None = None):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = RotaryEmbedding(
            cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, max_positions or cfg.max_position_embeddings
        )
        self.lm_head = None if cfg.tie_word_embeddings else Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.heads = None  # engine/speculative/heads.py DraftHeads, when the target drafts its own tokens
        self.batch_invariant = False
        self.head_packed: torch.Tensor | None = None  # the lm_head's weight packed for the CPU (pack_weights)

    def set_kernel_impl(self, impl: str) -> None:
        """"ref" or "triton" (kernels/paged_attention.resolve_impl) for the attention and the fused
        small ops (kernels/fused_ops: norms, SiLU-and-mul, RoPE), the same for every layer."""
        for module in self.modules():
            if isinstance(module, (Attention, RMSNorm, SiluAndMul)):
                module.impl = impl

    def set_batch_invariant(self, on: bool) -> None:
        """Every row's result independent of the step's other rows (of its own sequence and of the
        batch): a verify block then commits the tokens plain decoding writes, in bf16 too. The
        linear layers in one fixed shape (layers.rows_matmul: oneDNN 2 to 32 rows at a time on the
        CPU, kernels/invariant_linear on CUDA), attention by fixed key chunks (ref.py's
        paged_attention_rows, split_kv.py's fixed splits). The int8 head and int4 KV's window are
        not covered."""
        self.batch_invariant = on
        for module in self.modules():
            if isinstance(module, (Attention, Linear)):
                module.batch_invariant = on

    def pack_weights(self) -> None:
        """Pack the linear layers' weights for the CPU's GEMMs (layers.pack_weight), and a packed
        copy of the lm_head's beside its plain weight (the embeddings, when tied, read the plain
        one). Where packing does not apply (not the CPU, another dtype), nothing changes."""
        linears = [m for m in self.layers.modules() if isinstance(m, Linear)]
        head = self.embed_tokens if self.lm_head is None else self.lm_head
        if not linears or not can_pack(linears[0].weight):
            return
        for module in linears:
            module.pack()
        if not isinstance(head, Int8Table):
            self.head_packed = pack_weight(head.weight)

    def quantize_head(self, impl: str) -> None:
        """Store embed_tokens and lm_head as int8 tables (per-row scales; tied models share one).
        impl: "ref" (chunked dequantize, any device) or "triton" (kernels/int8_linear)."""
        self.embed_tokens = Int8Table(self.embed_tokens.weight, impl)
        if self.lm_head is not None:
            self.lm_head = Int8Table(self.lm_head.weight, impl)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata, kv_caches) -> torch.Tensor:
        """input_ids, positions: [T] -> hidden states [T, hidden] (final norm applied)."""
        x, residual = self.embed_tokens(input_ids), None
        cos, sin = self.rotary(positions, x.dtype)
        for layer, kv in zip(self.layers, kv_caches):
            x, residual = layer(x, residual, cos, sin, meta, kv)
        x, _ = self.norm(x, residual)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, hidden] -> [N, vocab] in fp32."""
        return self._logits(hidden).float()

    def greedy_tokens(self, hidden: torch.Tensor, vocab_limit: int | None = None) -> torch.Tensor:
        """[N, hidden] -> [N] argmax token ids, from logits in the model dtype (the same argmax as
        compute_logits': the fp32 copy is exact). Capturable in a CUDA graph."""
        return self.greedy_from_logits(self._logits(hidden), vocab_limit)

    def greedy_rows(self, hidden: torch.Tensor, vocab_limit: int | None = None, heads: bool = True) -> torch.Tensor:
        """[N, hidden] -> [1 + n, N]: the greedy token of every row, then with n draft heads (and
        `heads`) each head's guess for every row (engine/speculative/heads.py). The heads' rows join the
        lm_head GEMM, whose cost at a few dozen rows is reading the weight once. Capturable in a
        CUDA graph."""
        if self.heads is None or not heads:
            return self.greedy_tokens(hidden, vocab_limit)[None]
        rows = torch.cat([hidden[None], self.heads(hidden)]).reshape(-1, hidden.shape[-1])
        return self.greedy_from_logits(self._logits(rows), vocab_limit).view(1 + self.heads.num_heads, -1)

    def head_tokens(self, hidden: torch.Tensor, vocab_limit: int | None = None) -> torch.Tensor:
        """[N, hidden] -> [n, N]: each draft head's guess for every row."""
        rows = self.heads(hidden).reshape(-1, hidden.shape[-1])
        return self.greedy_from_logits(self._logits(rows), vocab_limit).view(self.heads.num_heads, -1)

    @staticmethod
    def greedy_from_logits(logits: torch.Tensor, vocab_limit: int | None = None) -> torch.Tensor:
        """[N, vocab] -> [N] argmax over the first `vocab_limit` ids (all when None)."""
        return (logits if vocab_limit is None else logits[:, :vocab_limit]).argmax(-1)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:  # [N, hidden] -> [N, vocab]
        head = self.embed_tokens if self.lm_head is None else self.lm_head
        if isinstance(head, Int8Table):
            return head.logits(hidden)
        if self.batch_invariant or self.head_packed is not None:
            return rows_matmul(hidden, head.weight, invariant=self.batch_invariant, packed=self.head_packed)
        return hidden @ head.weight.t()
