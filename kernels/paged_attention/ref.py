"""Reference attention over a paged (slot-addressed) KV cache, in plain PyTorch.

The cache holds one row per *slot*; a sequence's context is the list of slots in its slot table,
position j of the sequence living in slot `slot_tables[b, j]`. Queries are the sequence's newest
tokens (a prompt chunk, one decode token, or a verify block), already written to the cache, so a
query at position p attends to context positions 0..p (and only the last `sliding_window` of them
when the model has a window).

Padded table entries (past a sequence's context length) are always masked: every query position is
below the context length, so `key_pos <= query_pos` excludes them. That makes the batched form
shape-static, which CUDA graph capture needs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Most queries of one SDPA call in the cache form: longer prompt chunks are split (see below).
QUERY_TILE = 512


def causal_mask(q_positions: torch.Tensor, num_keys: int, sliding_window: int | None) -> torch.Tensor:
    """[B, Tq, S] bool: key j visible to the query at position p iff p - window < j <= p."""
    key_pos = torch.arange(num_keys, device=q_positions.device)  # [S]
    mask = key_pos[None, None, :] <= q_positions[:, :, None]
    if sliding_window is not None:
        mask &= key_pos[None, None, :] > q_positions[:, :, None] - sliding_window
    return mask


def paged_attention_ref(
    q: torch.Tensor,  # [B, Tq, H, D]
    k: torch.Tensor,  # [B, S, Hkv, D] keys gathered through the slot tables
    v: torch.Tensor,  # [B, S, Hkv, D]
    q_positions: torch.Tensor,  # [B, Tq] absolute position of each query
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:  # [B, Tq, H, D]
    mask = causal_mask(q_positions, k.shape[1], sliding_window)  # [B, Tq, S]
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        attn_mask=mask[:, None],
        scale=scale,
        enable_gqa=q.shape[2] != k.shape[2],
    )
    return out.transpose(1, 2)


def paged_attention_window_ref(
    q: torch.Tensor,  # [B, Tq, H, D]
    kv,  # a layer with a full-precision window (engine/kv_int4.py): .gather, .gather_window, .block_size
    slot_tables: torch.Tensor,  # [B, S]
    q_positions: torch.Tensor,  # [B, Tq]
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:  # [B, Tq, H, D]
    """Each query reads the block holding its own position in full precision and every other block
    quantized: one SDPA over both forms of the keys side by side, [quantized | full], each masked
    to the blocks it serves."""
    kq, vq = kv.gather(slot_tables)  # [B, S, Hkv, D]
    kf, vf = kv.gather_window(slot_tables, kq, vq)
    S, bs = kq.shape[1], kv.block_size
    mask = causal_mask(q_positions, S, sliding_window)  # [B, Tq, S]
    own = (torch.arange(S, device=q.device) // bs)[None, None, :] == (q_positions // bs)[:, :, None]
    mask = torch.cat((mask & ~own, mask & own), dim=-1)  # [B, Tq, 2S]
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        torch.cat((kq, kf), dim=1).transpose(1, 2),
        torch.cat((vq, vf), dim=1).transpose(1, 2),
        attn_mask=mask[:, None],
        scale=scale,
        enable_gqa=q.shape[2] != kq.shape[2],
    )
    return out.transpose(1, 2)


def paged_attention_cache_ref(
    q: torch.Tensor,  # [T, H, D]: the step's queries, sequence after sequence
    kv,  # the layer's cache: .gather(slot_tables) -> K, V [B, S, Hkv, D] in the compute dtype (int4: and .gather_window)
    slot_tables: torch.Tensor,  # [B, S]
    q_positions: torch.Tensor,  # [B, Tq_max]
    query_lens: list[int],  # rows of each sequence in q
    context_lens: list[int],  # cached tokens of each sequence, this step's included
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:  # [T, H, D]
    """The cache form: gather each sequence's context, then `paged_attention_ref`. Sequences of one
    query length run as one batched call (shape-static); otherwise one call each, over the context
    the sequence has. A long prompt chunk runs in tiles of QUERY_TILE queries, each over the
    context up to its last query, so the mask SDPA expands ([Tq, S] floats: 512 MB for 4096 rows
    over 32k keys) stays bounded; decode and verify blocks are never split."""
    T, H, D = q.shape

    def attend(q, slot_tables, q_positions):
        if hasattr(kv, "gather_window"):
            return paged_attention_window_ref(q, kv, slot_tables, q_positions, scale, sliding_window)
        kc, vc = kv.gather(slot_tables)  # [B, S, Hkv, D]
        return paged_attention_ref(q, kc, vc, q_positions, scale, sliding_window)

    if len(set(query_lens)) == 1 and query_lens[0] <= QUERY_TILE:
        B, Tq = len(query_lens), query_lens[0]
        return attend(q.view(B, Tq, H, D), slot_tables, q_positions[:, :Tq]).reshape(T, H, D)
    outs, start = [], 0
    for b, (qlen, ctx) in enumerate(zip(query_lens, context_lens)):
        for t in range(0, qlen, QUERY_TILE):
            n = min(QUERY_TILE, qlen - t)
            keys = ctx - qlen + t + n  # the tile's last query position + 1
            rows = q[None, start + t : start + t + n]
            outs.append(attend(rows, slot_tables[b : b + 1, :keys], q_positions[b : b + 1, t : t + n])[0])
        start += qlen
    return torch.cat(outs)


# Batch-invariant attention (EngineConfig.batch_invariant). SDPA's CPU kernel blocks queries and
# keys by how many there are, so a query's output depends on the rows computed beside it and on how
# far its key table is padded; in bf16 those last-bit differences flip greedy tokens at near-ties,
# and speculation then writes another text than plain decoding (bench/RESULTS.md, "bf16 on the CPU,
# batch-invariant").
# Here every shape a query meets is fixed: keys in chunks of KEY_CHUNK at fixed positions, queries
# in tiles of ROW_TILE rows (a single decode token is padded to a tile), the math in fp32 (bf16
# storage), the softmax over the row's own max and its chunk sums added in chunk order. Chunks past
# a query's position add exact zeros. So a query's output depends on its own row, its position
# and the keys up to it, nothing else.
KEY_CHUNK = 256
ROW_TILE = 16


def paged_attention_rows(
    q: torch.Tensor,  # [Tq, H, D] one sequence's queries
    k: torch.Tensor,  # [S, Hkv, D] its keys, S past the last query position (any padding beyond)
    v: torch.Tensor,  # [S, Hkv, D]
    q_positions: torch.Tensor,  # [Tq] absolute position of each query
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:  # [Tq, H, D]
    """Attention whose every row is computed alone, in fixed shapes (see above)."""
    Tq, H, D = q.shape
    Hkv = k.shape[1]
    group = H // Hkv
    n = -(-(int(q_positions.max()) + 1) // KEY_CHUNK)
    keys = n * KEY_CHUNK
    kc, vc = (_padded(x, keys).float().view(n, KEY_CHUNK, Hkv, D).permute(2, 0, 1, 3) for x in (k, v))  # [Hkv, n, C, D]
    key_pos = torch.arange(keys, device=q.device).view(n, 1, KEY_CHUNK)
    outs = []
    for t in range(0, Tq, ROW_TILE):
        rows = min(ROW_TILE, Tq - t)
        qt = _padded(q[t : t + rows].float(), ROW_TILE)  # [R, H, D]
        pos = _padded(q_positions[t : t + rows], ROW_TILE).view(1, ROW_TILE, 1)
        # Heads of one KV head side by side: [Hkv, 1, group * R, D] against [Hkv, n, D, C].
        qh = qt.view(ROW_TILE, Hkv, group, D).permute(1, 2, 0, 3).reshape(Hkv, 1, group * ROW_TILE, D)
        s = torch.matmul(qh, kc.transpose(-1, -2)) * scale  # [Hkv, n, group * R, C]
        visible = key_pos <= pos  # [n, R, C]
        if sliding_window is not None:
            visible &= key_pos > pos - sliding_window
        s = s.view(Hkv, n, group, ROW_TILE, KEY_CHUNK).masked_fill(~visible[:, None], float("-inf"))
        top = s.amax(dim=(1, 4), keepdim=True)  # [Hkv, 1, group, R, 1]
        p = torch.exp(s - top)
        sums = p.sum(-1)  # [Hkv, n, group, R]
        pv = torch.matmul(p.view(Hkv, n, group * ROW_TILE, KEY_CHUNK), vc).view(Hkv, n, group, ROW_TILE, D)
        acc, total = pv[:, 0], sums[:, 0]
        for c in range(1, n):  # in chunk order, never a reduction whose order depends on n
            acc, total = acc + pv[:, c], total + sums[:, c]
        out = (acc / total[..., None]).permute(2, 0, 1, 3).reshape(ROW_TILE, H, D)  # [R, H, D]
        outs.append(out[:rows])
    return torch.cat(outs).to(q.dtype)


def paged_attention_rows_cache(
    q: torch.Tensor,  # [T, H, D]: the step's queries, sequence after sequence
    kv,  # the layer's cache: .gather(slot_tables) -> K, V [B, S, Hkv, D] in the compute dtype
    slot_tables: torch.Tensor,  # [B, S]
    q_positions: torch.Tensor,  # [B, Tq_max]
    query_lens: list[int],
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:  # [T, H, D]
    """`paged_attention_rows` over the cache, one sequence at a time."""
    outs, start = [], 0
    for b, qlen in enumerate(query_lens):
        positions = q_positions[b, :qlen]
        keys = min(slot_tables.shape[1], int(positions.max()) + 1)
        kc, vc = kv.gather(slot_tables[b : b + 1, :keys])
        outs.append(paged_attention_rows(q[start : start + qlen], kc[0], vc[0], positions, scale, sliding_window))
        start += qlen
    return torch.cat(outs)


def _padded(x: torch.Tensor, n: int) -> torch.Tensor:
    """x cut, or padded with zero rows, to n rows (dim 0)."""
    return x[:n] if x.shape[0] >= n else torch.cat((x, x.new_zeros(n - x.shape[0], *x.shape[1:])))
