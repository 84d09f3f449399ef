"""The KV cache the engine owns: per-layer K/V storage addressed by slot, handed out in blocks.

A slot holds one token's K and V for one layer; slots come in blocks of `block_size`, and a
sequence's block table lists its blocks in order, so position p lives in slot
`block_table[p // block_size] * block_size + p % block_size`. Rolling back rejected verify
positions is a length change: the rows are simply overwritten by the next step.

Storage formats (`kv_dtype`, one switch: EDITAPPLY_KV_DTYPE):
  * `auto` (the model's dtype), `bf16`, `fp16`, `fp32` — stored as is;
  * `fp8`  — float8 e4m3 with one scale per token per head (amax / 448);
  * `int8` — symmetric int8 with one scale per token per head (amax / 127);
  * `int4` — asymmetric 4-bit, two per byte: keys per channel over each block's tokens, values per
             token in groups of 32 channels, and the block holding each query's position read in
             full precision (engine/kv_int4.py says why), for very long contexts.
Reads dequantize to the compute dtype (the reference path; a fused kernel reads them directly).
"""

from __future__ import annotations

import numpy as np
import torch

from engine.block_manager import BlockManager, OutOfBlocksError  # noqa: F401 (re-exported)
from engine.config import KV_DTYPES
from engine.kv_int4 import Int4LayerKV
_PLAIN = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def rows(store: torch.Tensor, slot_tables: torch.Tensor) -> torch.Tensor:
    """store[slot_tables]: [B, S, ...] rows of `store`, the same copy as advanced indexing but
    faster on the CPU (0.5B, 24 layers' K and V at 7k context: 20 against 25 ms a step; 5x when
    the cache fits the CPU's caches)."""
    return store.index_select(0, slot_tables.reshape(-1)).view(*slot_tables.shape, *store.shape[1:])


class LayerKV:
    """One layer's K and V, one row per slot: [num_slots, num_kv_heads, head_dim] each."""

    format = "plain"  # how kernels/paged_attention reads the rows: plain | fp8 | int8 | int4

    def __init__(self, num_slots: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device):
        self.k = torch.zeros(num_slots, num_kv_heads, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.dtype = dtype

    def write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k.index_copy_(0, slots, k.to(self.k.dtype))
        self.v.index_copy_(0, slots, v.to(self.v.dtype))

    def gather(self, slot_tables: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """slot_tables [B, S] -> K, V [B, S, num_kv_heads, head_dim] in `dtype`."""
        dtype = dtype or self.dtype
        return rows(self.k, slot_tables).to(dtype), rows(self.v, slot_tables).to(dtype)

    @property
    def bytes_per_slot(self) -> int:
        return 2 * self.k[0].numel() * self.k.element_size()


class QuantizedLayerKV(LayerKV):
    """Storage with scales beside it: writes quantize, reads dequantize to the compute dtype.
    Subclasses say how (`_quantize(x) -> (raw, scales)`, `_dequantize(raw, scales) -> float`)."""

    def write(self, slots, k, v) -> None:
        for data, scales, x in ((self.k, self.k_scale, k), (self.v, self.v_scale, v)):
            q, s = self._quantize(x)
            data.index_copy_(0, slots, q)
            scales.index_copy_(0, slots, s)

    def gather(self, slot_tables, dtype=None):
        dtype = dtype or self.dtype
        k = self._dequantize(rows(self.k, slot_tables), rows(self.k_scale, slot_tables)).to(dtype)
        v = self._dequantize(rows(self.v, slot_tables), rows(self.v_scale, slot_tables)).to(dtype)
        return k, v


class ScaledLayerKV(QuantizedLayerKV):
    """fp8 / int8 storage with one fp32 scale per token per head."""

    LIMITS = {torch.float8_e4m3fn: 448.0, torch.int8: 127.0}

    def __init__(self, num_slots, num_kv_heads, head_dim, dtype, device, store: torch.dtype):
        self.dtype = dtype
        self.store = store
        self.limit = self.LIMITS[store]
        self.format = "fp8" if store.is_floating_point else "int8"
        # Kept as raw bytes (index_copy_ has no float8 kernel on every device), viewed on read.
        self.k = torch.zeros(num_slots, num_kv_heads, head_dim, dtype=torch.uint8 if store.is_floating_point else store,
                             device=device)
        self.v = torch.zeros_like(self.k)
        self.k_scale = torch.zeros(num_slots, num_kv_heads, 1, dtype=torch.float32, device=device)
        self.v_scale = torch.zeros_like(self.k_scale)

    def _quantize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.float()
        scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-8) / self.limit  # [T, H, 1]
        q = x / scale
        q = q.round().clamp(-self.limit, self.limit) if self.store == torch.int8 else q
        q = q.to(self.store)
        return (q.view(torch.uint8) if self.store.is_floating_point else q), scale

    def _dequantize(self, raw: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return (raw.view(self.store) if self.store.is_floating_point else raw).float() * scale

    @property
    def bytes_per_slot(self) -> int:
        return 2 * (self.k[0].numel() * self.k.element_size() + self.k_scale[0].numel() * 4)


def make_layer_kv(kv_dtype: str, num_slots: int, num_kv_heads: int, head_dim: int, dtype, device,
                  block_size: int = 16, window_blocks: int = 64) -> LayerKV:
    if kv_dtype == "auto":
        return LayerKV(num_slots, num_kv_heads, head_dim, dtype, device)
    if kv_dtype in _PLAIN:
        layer = LayerKV(num_slots, num_kv_heads, head_dim, _PLAIN[kv_dtype], device)
        layer.dtype = dtype
        return layer
    if kv_dtype == "fp8":
        return ScaledLayerKV(num_slots, num_kv_heads, head_dim, dtype, device, torch.float8_e4m3fn)
    if kv_dtype == "int8":
        return ScaledLayerKV(num_slots, num_kv_heads, head_dim, dtype, device, torch.int8)
    if kv_dtype == "int4":
        return Int4LayerKV(num_slots, num_kv_heads, head_dim, dtype, device, block_size, window_blocks)
    raise ValueError(f"kv dtype must be one of {KV_DTYPES}, got {kv_dtype!r}")


def kv_bytes_per_token(kv_dtype: str, num_layers: int, num_kv_heads: int, head_dim: int, dtype,
                       block_size: int = 16) -> int:
    probe = make_layer_kv(kv_dtype, block_size, num_kv_heads, head_dim, dtype, "cpu", block_size, window_blocks=1)
    return num_layers * probe.bytes_per_slot


def slot_row(block_table, width: int, block_size: int) -> np.ndarray:
    """The slot of each position 0..width-1 that `block_table` holds (shorter where the table is):
    the one layout of the eager path's slot tables and of the CUDA graphs' staged inputs."""
    table = np.asarray(block_table[: -(-width // block_size)], dtype=np.int64)
    return (table[:, None] * block_size + np.arange(block_size)).ravel()[:width]


def fill_slot_tables(out: np.ndarray, block_tables, block_size: int) -> None:
    """Write `out` [B, width] as the slot tables of `block_tables` (slot_row each), 0 past each
    table's end and in the rows past them (masked, or idle rows)."""
    width = out.shape[1]
    for i, table in enumerate(block_tables):
        row = slot_row(table, width, block_size)
        out[i, : len(row)], out[i, len(row) :] = row, 0
    out[len(block_tables) :] = 0


class KVCache:
    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device, kv_dtype: str = "auto",
                 salt: str = "", enable_prefix_caching: bool = True, window_blocks: int = 64):
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.kv_dtype = kv_dtype
        # window_blocks: int4's full-precision pool, at least the blocks one step writes (engine/kv_int4.py)
        self.layers = [make_layer_kv(kv_dtype, num_blocks * block_size, num_kv_heads, head_dim, dtype, device,
                                     block_size, window_blocks)
                       for _ in range(num_layers)]
        self.blocks = BlockManager(num_blocks, block_size, salt=f"{salt}|{kv_dtype}",
                                   enable_prefix_caching=enable_prefix_caching)

    @property
    def allocator(self) -> BlockManager:
        return self.blocks

    @property
    def bytes_per_token(self) -> int:
        return sum(layer.bytes_per_slot for layer in self.layers)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def slot_tables(self, block_tables: list[list[int]], width: int, device) -> torch.Tensor:
        """[B, width] slot of each position 0..width-1 (past a table's end: slot 0, masked anyway)."""
        out = np.empty((len(block_tables), width), dtype=np.int64)
        fill_slot_tables(out, block_tables, self.block_size)
        return torch.from_numpy(out).to(device)
