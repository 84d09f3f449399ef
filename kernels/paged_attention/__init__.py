"""Attention of new query tokens over a sequence's cached context (prefill chunks, decode, verify blocks).

`paged_attention` has two implementations behind one signature: `ref` (ref.py, the spec: gather the
context, then SDPA; the CPU path) and `triton` (split_kv.py: reads K/V in place through the slot
table, one launch for the whole batch; the CUDA path). `resolve_impl("auto", device)` picks triton
on CUDA and ref elsewhere; the engine's switch is EDITAPPLY_ATTENTION. Both have a batch-invariant
form (`invariant`: ref.py `paged_attention_rows`, split_kv.py's fixed splits;
EDITAPPLY_BATCH_INVARIANT), for every cache but int4's, whose window form neither covers.
"""

from __future__ import annotations

import os

import torch

from kernels.paged_attention.ref import (
    causal_mask,
    paged_attention_cache_ref,
    paged_attention_ref,
    paged_attention_rows,
    paged_attention_rows_cache,
)

IMPLS = ("auto", "triton", "ref")


def triton_supports(head_dim: int) -> bool:
    """The kernel splits the head dim in halves of at least 16 channels (tl.dot's minimum)."""
    return head_dim in (32, 64, 128, 256)


def resolve_impl(impl: str, device: torch.device, head_dim: int, kv_dtype: str = "auto") -> str:
    """"auto" -> triton on CUDA for head dims it supports, ref elsewhere. Triton off CUDA needs its
    interpreter (tests). int4 KV stays on ref under "auto" until its Triton path is timed (its
    tokens match in fp32; bf16 near-ties of a random model once differed); `triton` forces it."""
    if impl not in IMPLS:
        raise ValueError(f"attention must be one of {IMPLS}, got {impl!r}")
    if impl == "auto":
        fast = device.type == "cuda" and triton_supports(head_dim) and kv_dtype != "int4"
        return "triton" if fast else "ref"
    if impl == "triton" and not triton_supports(head_dim):
        raise ValueError(f"attention=triton supports head dims 32, 64, 128, 256, not {head_dim}")
    if impl == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError("attention=triton needs a CUDA device (or TRITON_INTERPRET=1)")
    return impl


def paged_attention(
    q: torch.Tensor,  # [T, H, D]: the step's queries, sequence after sequence
    kv,  # the layer's cache (engine/kv_cache.py LayerKV)
    slot_tables: torch.Tensor,  # [B, S] cache slot of each context position
    q_positions: torch.Tensor,  # [B, Tq_max] absolute position of each query
    query_lens: list[int],  # rows of each sequence in q
    context_lens: list[int],  # cached tokens of each sequence, this step's included
    scale: float,
    sliding_window: int | None = None,
    query_starts: torch.Tensor | None = None,  # [B+1] int32 row offsets, needed by triton when lengths differ
    impl: str = "ref",
    invariant: bool = False,  # each row's output independent of the others (see above)
) -> torch.Tensor:  # [T, H, D]
    if invariant and impl == "ref" and not hasattr(kv, "gather_window"):
        return paged_attention_rows_cache(q, kv, slot_tables, q_positions, query_lens, scale, sliding_window)
    if impl == "triton":
        from kernels.paged_attention.split_kv import paged_attention_triton

        uniform = len(set(query_lens)) == 1
        return paged_attention_triton(q, kv, slot_tables, q_positions, scale, sliding_window,
                                      query_starts=None if uniform else query_starts, invariant=invariant)
    return paged_attention_cache_ref(q, kv, slot_tables, q_positions, query_lens, context_lens, scale, sliding_window)


__all__ = ["paged_attention", "paged_attention_ref", "paged_attention_cache_ref", "paged_attention_rows", "causal_mask", "resolve_impl", "triton_supports", "IMPLS"]
