"""Attention of new query tokens over a sequence's cached context (prefill chunks, decode, verify blocks)."""

from kernels.paged_attention.ref import causal_mask, paged_attention_ref

paged_attention = paged_attention_ref

__all__ = ["paged_attention", "paged_attention_ref", "causal_mask"]
