"""KV blocks: a free list, reference counts, and prefix caching by hash chain.

A *full* block whose K/V are final (every position committed) is registered under the hash of
its tokens chained with its predecessor's hash and a salt (model and KV dtype), so the hash names
the whole prefix ending at that block. A new sequence looks its prompt's full blocks up in order
and shares the longest cached run (reference count + 1) instead of recomputing it.

A block whose count drops to zero stays cached, in LRU order, until a fresh block is needed and
none is plainly free; then the least recently released cached block is evicted. Shared blocks
are never written: a sequence writes only at positions past its shared prefix, and the last
prompt token is always recomputed in a private block (it must produce the first logits).
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from hashlib import blake2b

import numpy as np


class OutOfBlocksError(RuntimeError):
    """The cache has fewer free blocks than a request needs."""


def chain_hash(prev: bytes, tokens: list[int] | tuple[int, ...]) -> bytes:
    """Hash of a block given its predecessor's hash: equal iff the whole prefixes are equal.

    Example: chain_hash(salt, [1, 2]) differs from chain_hash(chain_hash(salt, [9, 9]), [1, 2]):
    the same tokens after a different prefix are a different block.
    """
    h = blake2b(prev, digest_size=16)
    h.update(array("q", tokens).tobytes())  # 8 bytes a token: an array's bytes, not a string per token
    return h.digest()


class BlockTable:
    """A sequence's KV block ids in position order, held in a numpy array: a slice is a view, so
    staging a batch's tables for a step copies arrays, where a Python list's ints were converted
    one by one (~8 µs a row of ~200 blocks; bench.host_path's staging). It only grows (`extend`);
    a sequence that gives its blocks up gets an empty table. Indexing a position gives an int."""

    def __init__(self, blocks=()):
        self._buf = np.array(blocks, dtype=np.int64)
        self._ids = self._buf  # the table: the filled part of _buf, a view

    def extend(self, blocks) -> None:
        blocks = np.asarray(blocks, dtype=np.int64)
        n = len(self._ids)
        end = n + len(blocks)
        if end > len(self._buf):  # capacity doubles: appending a block a step stays amortized O(1)
            self._buf = np.empty(max(end, 2 * len(self._buf)), dtype=np.int64)
            self._buf[:n] = self._ids
        self._buf[n:end] = blocks
        self._ids = self._buf[:end]

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, i):
        return self._ids[i] if isinstance(i, slice) else int(self._ids[i])

    def __iter__(self):
        return iter(self._ids.tolist())

    def __reversed__(self):
        return reversed(self._ids.tolist())

    def __array__(self, dtype=None, copy=None):
        return self._ids.astype(dtype or self._ids.dtype, copy=bool(copy))

    def __repr__(self) -> str:
        return f"BlockTable({self._ids.tolist()})"


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, salt: str = "", enable_prefix_caching: bool = True):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.salt = blake2b(salt.encode(), digest_size=16).digest()
        self.caching = enable_prefix_caching
        self.ref = [0] * num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))  # never cached (or evicted): pop from the end
        self._cached_free: OrderedDict[int, None] = OrderedDict()  # ref 0 but still cached, LRU first
        self._by_hash: dict[bytes, int] = {}
        self._hash_of: dict[int, bytes] = {}
        self.hits = 0  # blocks reused from the cache
        self.reserved = 0  # blocks taken out for good (`reserve`)

    # ---- counts -------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Blocks an allocation can take now (plainly free or evictable)."""
        return len(self._free) + len(self._cached_free)

    @property
    def capacity(self) -> int:
        """Blocks a sequence can ever hold: all but the reserved ones."""
        return self.num_blocks - self.reserved

    @property
    def num_cached(self) -> int:
        return len(self._by_hash)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # ---- allocation ---------------------------------------------------------------------
    def allocate(self, n: int) -> list[int]:
        if n > self.num_free:
            raise OutOfBlocksError(f"need {n} KV blocks, {self.num_free} free of {self.num_blocks}")
        blocks = []
        for _ in range(n):
            if self._free:
                b = self._free.pop()
            else:
                b, _ = self._cached_free.popitem(last=False)  # evict the least recently released
                del self._by_hash[self._hash_of.pop(b)]
            self.ref[b] = 1
            blocks.append(b)
        return blocks

    def reserve(self) -> int:
        """A block taken out of the pool for good (the CUDA graphs' scratch block): `capacity`,
        and so the longest request the engine accepts (LLMEngine.limits), counts without it."""
        block = self.allocate(1)[0]
        self.reserved += 1
        return block

    def release(self, blocks: list[int]) -> None:
        for b in reversed(blocks):  # tail first: a prefix's later blocks are evicted before its head
            self.ref[b] -= 1
            if self.ref[b] > 0:
                continue
            if b in self._hash_of:
                self._cached_free[b] = None
            else:
                self._free.append(b)

    # ---- prefix caching -----------------------------------------------------------------
    def extend_hashes(self, hashes: list[bytes], tokens: list[int], limit: int) -> list[bytes]:
        """Extend `hashes` (chain hashes of `tokens`' leading full blocks, kept by the caller: tokens
        only grow, so they never change) to the first `limit` full blocks; returns it."""
        bs = self.block_size
        for i in range(len(hashes), min(limit, len(tokens) // bs)):
            hashes.append(chain_hash(hashes[-1] if hashes else self.salt, tokens[i * bs : (i + 1) * bs]))
        return hashes

    def prompt_hashes(self, tokens: list[int], limit: int) -> list[bytes]:
        """Chain hashes of the first `limit` full blocks of `tokens`."""
        return self.extend_hashes([], tokens, limit)

    def lookup(self, hashes: list[bytes]) -> list[int]:
        """The cached blocks of the longest run of `hashes` (no references taken)."""
        blocks = []
        if self.caching:
            for h in hashes:
                b = self._by_hash.get(h)
                if b is None:
                    break
                blocks.append(b)
        return blocks

    def free_after_sharing(self, blocks: list[int]) -> int:
        """`num_free` once `blocks` (from `lookup`) are shared: idle cached ones stop being free."""
        return self.num_free - sum(1 for b in blocks if self.ref[b] == 0)

    def share(self, blocks: list[int]) -> None:
        """Take a reference on each of `blocks` (from `lookup`)."""
        for b in blocks:
            if self.ref[b] == 0:
                del self._cached_free[b]
            self.ref[b] += 1
        self.hits += len(blocks)

    def match_prefix(self, tokens: list[int]) -> tuple[list[int], list[bytes]]:
        """Share the longest cached run of `tokens`' full blocks, never the last token's block.

        Returns the shared blocks (reference counts taken) and their hashes.
        """
        if not self.caching:
            return [], []
        hashes = self.prompt_hashes(tokens, (len(tokens) - 1) // self.block_size)
        shared = self.lookup(hashes)
        self.share(shared)
        return shared, hashes[: len(shared)]

    def publish(self, owner, tokens: list[int], num_tokens: int) -> None:
        """Register the full blocks among `owner`'s first `num_tokens` positions (holding `tokens`,
        all final) for sharing. `owner` keeps `block_table`, `chain_hashes` and `num_published`
        (a target sequence, or the draft model's view of one)."""
        final = num_tokens // self.block_size
        if self.caching and final > owner.num_published:
            hashes = self.extend_hashes(owner.chain_hashes, tokens, final)
            for i in range(owner.num_published, final):
                self.register(owner.block_table[i], hashes[i])
            owner.num_published = final

    def register(self, block: int, h: bytes) -> None:
        """Publish a full, final block under its chain hash (first writer wins)."""
        if not self.caching or block in self._hash_of:
            return
        if h in self._by_hash:
            return  # an identical block is cached already; this one stays private
        self._by_hash[h] = block
        self._hash_of[block] = h
