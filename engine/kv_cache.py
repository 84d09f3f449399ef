"""The KV cache the engine owns: per-layer K/V storage addressed by slot, handed out in blocks.

A slot holds one token's K and V for one layer; slots come in blocks of `block_size`, and a
sequence's block table lists its blocks in order, so position p lives in slot
`block_table[p // block_size] * block_size + p % block_size`. Rolling back rejected verify
positions is a length change: the rows are simply overwritten by the next step.
"""

from __future__ import annotations

import torch


class LayerKV:
    """One layer's K and V, one row per slot: [num_slots, num_kv_heads, head_dim] each."""

    def __init__(self, num_slots: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device):
        self.k = torch.zeros(num_slots, num_kv_heads, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)

    def write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k.index_copy_(0, slots, k.to(self.k.dtype))
        self.v.index_copy_(0, slots, v.to(self.v.dtype))

    def gather(self, slot_tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """slot_tables [B, S] -> K, V [B, S, num_kv_heads, head_dim]."""
        return self.k[slot_tables], self.v[slot_tables]

    @property
    def bytes_per_slot(self) -> int:
        return 2 * self.k[0].numel() * self.k.element_size()


class OutOfBlocksError(RuntimeError):
    """The cache has fewer free blocks than a request needs."""


class BlockAllocator:
    """A free list of block ids."""

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise OutOfBlocksError(f"need {n} KV blocks, {len(self._free)} free of {self.num_blocks}")
        return [self._free.pop() for _ in range(n)]

    def free(self, blocks: list[int]) -> None:
        self._free.extend(reversed(blocks))


class KVCache:
    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device):
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.layers = [LayerKV(num_blocks * block_size, num_kv_heads, head_dim, dtype, device)
                       for _ in range(num_layers)]
        self.allocator = BlockAllocator(num_blocks)

    @property
    def bytes_per_token(self) -> int:
        return sum(layer.bytes_per_slot for layer in self.layers)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def slot_tables(self, block_tables: list[list[int]], width: int, device) -> torch.Tensor:
        """[B, width] slot of each position 0..width-1 (past a table's end: slot 0, masked anyway)."""
        max_blocks = self.blocks_for(width)
        bt = torch.zeros(len(block_tables), max_blocks, dtype=torch.long)
        for i, table in enumerate(block_tables):
            n = min(len(table), max_blocks)
            bt[i, :n] = torch.tensor(table[:n], dtype=torch.long)
        slots = bt[:, :, None] * self.block_size + torch.arange(self.block_size)
        return slots.reshape(len(block_tables), -1)[:, :width].to(device)
