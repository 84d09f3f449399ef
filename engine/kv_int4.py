"""int4 KV: keys per channel over a block (KIVI-style), values per token, the newest block in full precision.

Qwen2.5's keys have a few large channels (its k projection has a bias). A per-token group of 32
channels that holds one loses the other 31 to the scale, so keys are quantized *per channel*,
with an fp16 scale and minimum for each (block, head, channel) taken over the block's
`block_size` tokens. A channel that is large is large in every token, so its own range holds it.
Values have no such channels and stay per token (scale and minimum per 32 channels).

Per-channel statistics need the whole block, so a block's tokens are also kept in full precision
(the compute dtype) in a small *window* pool, and the rule for reading is:

    a query at position p reads the block holding p in full precision, every earlier block quantized.

A block's quantized form is recomputed from its window copy at each write to it; queries past the
block read it only after its last token is written, so what they read depends on the block's
tokens alone, never on how the steps were cut (one token at a time, a verify block, a prompt
chunk). Speculation therefore stays exact, and rolled-back positions are simply rewritten. A full
block shared through the prefix cache is never written again and never holds a query, so it is
read quantized, as written.

The window pool has `window_blocks` entries handed out on write, least recently written evicted
first. It must hold every block one step writes (checked), and then every query's own block is
in it. A block evicted while its sequence waits and written again later restarts from its
dequantized tokens (a small extra error, only when the pool is short).
"""

from __future__ import annotations

from collections import OrderedDict

import torch

INT4_GROUP = 32  # value channels per scale


def pack(q: torch.Tensor) -> torch.Tensor:
    """[..., D] values 0..15 -> [..., D/2] bytes: channel 2j in the low nibble of byte j, 2j+1 in the high."""
    return q[..., 0::2] | (q[..., 1::2] << 4)


def unpack(packed: torch.Tensor) -> torch.Tensor:
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2)


def quantize_keys(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [N, bs, H, D] (N blocks) -> packed [N, bs, H, D/2], params [N, H, D, 2] fp16 (scale, minimum per channel)."""
    x = x.float()
    lo, hi = x.amin(dim=1), x.amax(dim=1)  # [N, H, D]
    params = torch.stack(((hi - lo).clamp_min(1e-6) / 15.0, lo), dim=-1).half()
    scale, lo = params[..., 0].float()[:, None], params[..., 1].float()[:, None]
    return pack(((x - lo) / scale).round().clamp(0, 15).to(torch.uint8)), params


def quantize_values(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, H, D] -> packed [T, H, D/2], params [T, H, D/32, 2] fp16 (scale, minimum per 32 channels)."""
    T, H, D = x.shape
    g = x.float().reshape(T, H, D // INT4_GROUP, INT4_GROUP)
    lo, hi = g.amin(dim=-1, keepdim=True), g.amax(dim=-1, keepdim=True)
    params = torch.cat(((hi - lo).clamp_min(1e-6) / 15.0, lo), dim=-1).half()
    scale, lo = params[..., :1].float(), params[..., 1:].float()
    return pack(((g - lo) / scale).round().clamp(0, 15).to(torch.uint8).reshape(T, H, D)), params


def dequantize_values(packed: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    q = unpack(packed)
    g = q.reshape(*q.shape[:-1], -1, INT4_GROUP).float()
    return (g * params[..., :1].float() + params[..., 1:].float()).reshape(q.shape)


class Int4LayerKV:
    """One layer's int4 K/V: k, v [slots, H, D/2] packed; k_scale [blocks, H, D, 2]; v_scale
    [slots, H, D/32, 2]; k_window, v_window [window_blocks * bs, H, D] in the compute dtype and
    window_of [blocks] (the window entry of each block, -1 for none)."""

    format = "int4"

    def __init__(self, num_slots, num_kv_heads, head_dim, dtype, device, block_size: int = 16, window_blocks: int = 64):
        if head_dim % INT4_GROUP:
            raise ValueError(f"int4 KV needs head_dim divisible by {INT4_GROUP}, got {head_dim}")
        H, D, bs = num_kv_heads, head_dim, block_size
        self.dtype, self.block_size = dtype, bs
        num_blocks = -(-num_slots // bs)
        self.k = torch.zeros(num_blocks * bs, H, D // 2, dtype=torch.uint8, device=device)
        self.v = torch.zeros_like(self.k)
        self.k_scale = torch.zeros(num_blocks, H, D, 2, dtype=torch.float16, device=device)
        self.v_scale = torch.zeros(num_blocks * bs, H, D // INT4_GROUP, 2, dtype=torch.float16, device=device)
        self.k_window = torch.zeros(window_blocks * bs, H, D, dtype=dtype, device=device)
        self.v_window = torch.zeros_like(self.k_window)
        self.window_of = torch.full((num_blocks,), -1, dtype=torch.long, device=device)
        self._entries: OrderedDict[int, int] = OrderedDict()  # block -> window entry, least recently written first
        self._free = list(range(window_blocks - 1, -1, -1))

    # ---- writes --------------------------------------------------------------------------
    def _stage(self, blocks: list[int]) -> list[int]:
        """Window entries for `blocks` (distinct), taking least recently written ones if needed."""
        if len(blocks) > len(self._free) + len(self._entries):
            raise RuntimeError(f"one write touches {len(blocks)} KV blocks; the int4 window holds "
                               f"{len(self._free) + len(self._entries)}")
        entries, fresh = [], []
        for b in blocks:
            if b in self._entries:
                self._entries.move_to_end(b)
            else:
                if not self._free:
                    old, e = next((o, e) for o, e in self._entries.items() if o not in blocks)
                    del self._entries[old]
                    self.window_of[old] = -1
                    self._free.append(e)
                self._entries[b] = self._free.pop()
                fresh.append(b)
            entries.append(self._entries[b])
        if fresh:
            # A block new to the window starts from its dequantized tokens (garbage for a fresh
            # block, overwritten before anything reads it).
            fb = torch.tensor(fresh, dtype=torch.long, device=self.k.device)
            fe = torch.tensor([self._entries[b] for b in fresh], dtype=torch.long, device=self.k.device)
            self.window_of[fb] = fe
            slots = (fb[:, None] * self.block_size + torch.arange(self.block_size, device=fb.device)).flatten()
            rows = (fe[:, None] * self.block_size + torch.arange(self.block_size, device=fb.device)).flatten()
            k, v = self.gather(slots[None])
            self.k_window[rows], self.v_window[rows] = k[0].to(self.dtype), v[0].to(self.dtype)
        return entries

    def write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        bs = self.block_size
        blocks = list(dict.fromkeys((slots // bs).tolist()))
        entries = self._stage(blocks)
        rows = self.window_of[slots // bs] * bs + slots % bs
        self.k_window[rows] = k.to(self.dtype)
        self.v_window[rows] = v.to(self.dtype)
        # Keys: requantize every touched block from its window copy, per channel over its tokens.
        dev = slots.device
        bt = torch.tensor(blocks, dtype=torch.long, device=dev)
        wrows = (torch.tensor(entries, dtype=torch.long, device=dev)[:, None] * bs + torch.arange(bs, device=dev))
        packed, params = quantize_keys(self.k_window[wrows])  # [N, bs, H, D/2], [N, H, D, 2]
        block_slots = (bt[:, None] * bs + torch.arange(bs, device=dev)).flatten()
        self.k[block_slots] = packed.flatten(0, 1)
        self.k_scale[bt] = params
        packed, params = quantize_values(v)
        self.v.index_copy_(0, slots, packed)
        self.v_scale.index_copy_(0, slots, params)

    # ---- reads ---------------------------------------------------------------------------
    def gather(self, slot_tables: torch.Tensor, dtype=None) -> tuple[torch.Tensor, torch.Tensor]:
        """slot_tables [B, S] -> K, V [B, S, H, D] dequantized (every block as its quantized form)."""
        dtype = dtype or self.dtype
        params = self.k_scale[slot_tables // self.block_size]  # [B, S, H, D, 2]
        k = unpack(self.k[slot_tables]).float() * params[..., 0].float() + params[..., 1].float()
        v = dequantize_values(self.v[slot_tables], self.v_scale[slot_tables])
        return k.to(dtype), v.to(dtype)

    def gather_window(self, slot_tables: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """The full-precision K, V of `slot_tables` where their block is in the window, else `k`, `v`."""
        entry = self.window_of[slot_tables // self.block_size]  # [B, S]
        rows = entry.clamp_min(0) * self.block_size + slot_tables % self.block_size
        held = (entry >= 0)[..., None, None]
        return (torch.where(held, self.k_window[rows].to(k.dtype), k),
                torch.where(held, self.v_window[rows].to(v.dtype), v))

    @property
    def bytes_per_slot(self) -> int:
        """Per token (the window pool is a fixed extra: window_blocks * block_size full-precision tokens)."""
        H, half = self.k.shape[1], self.k.shape[2]
        return 2 * H * half + self.v_scale[0].numel() * 2 + H * 2 * half * 2 * 2 // self.block_size
