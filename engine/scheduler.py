"""Scheduler: continuous batching over a paged, prefix-cached KV cache.

Each step is either a **prefill** step (prompt chunks of the sequences that still have uncached
tokens, within the token budget) or a **verify** step (every running sequence feeds
`[last token] + draft`). A sequence's last known token is always fed by a verify step, so fresh
prompts, prefix-cache hits and recomputed (preempted) sequences all take the same path, and the
first token is drafted and verified like any other.

Admission is first come, first served, while the sequence's blocks (after sharing its cached
prefix) and a seat (`max_num_seqs`) are free. When a running sequence cannot grow, the most
recently admitted other sequence is preempted: its blocks are released (they stay prefix-cached
until evicted) and it goes back to the head of the queue to be recomputed later.

Long verify blocks cost slots and compute: a verify step feeds up to K tokens per sequence. How
much of each draft a crowded step verifies is decided by the engine from the measured step cost
(engine/step_cost.py), within the optional hard cap `verify_budget`.
"""

from __future__ import annotations

from collections import deque

from engine.kv_cache import KVCache
from engine.sequence import Sequence, Status


class Scheduler:
    def __init__(self, kv: KVCache, max_num_seqs: int, max_batch_tokens: int):
        self.blocks = kv.blocks
        self.max_num_seqs = max_num_seqs
        self.max_batch_tokens = max_batch_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- admission ------------------------------------------------------------------------
    def admit(self) -> None:
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            # Hashes are kept on the sequence, so a head that waits for room is not re-hashed
            # every step; the last token's block is never shared (its token is fed again).
            shared = []
            if self.blocks.caching:
                limit = (len(seq) - 1) // self.blocks.block_size
                shared = self.blocks.lookup(self.blocks.extend_hashes(seq.chain_hashes, seq.tokens, limit)[:limit])
            need = self.blocks.blocks_for(len(seq) + seq.verify_tokens) - len(shared)
            if need > self.blocks.free_after_sharing(shared):
                break
            self.blocks.share(shared)
            seq.block_table = shared + self.blocks.allocate(need)
            seq.num_published = len(shared)
            seq.num_cached = len(shared) * self.blocks.block_size
            if seq.stats.steps == 0:
                seq.stats.cached_prompt_tokens = seq.num_cached
            seq.status = Status.RUNNING
            self.running.append(self.waiting.popleft())

    # ---- step plans -----------------------------------------------------------------------
    def prefill_batch(self) -> list[tuple[Sequence, list[int]]]:
        """Prompt chunks for sequences with uncached tokens (all but the last known token)."""
        budget, batch = self.max_batch_tokens, []
        for seq in self.running:
            if not seq.needs_prefill or budget <= 0:
                continue
            end = min(len(seq) - 1, seq.num_cached + budget)
            batch.append((seq, seq.tokens[seq.num_cached : end]))
            budget -= end - seq.num_cached
        return batch

    # ---- growth and preemption ----------------------------------------------------------
    def ensure_room(self, seq: Sequence, num_tokens: int) -> bool:
        """Blocks for `num_tokens` positions of `seq`, preempting others if needed.

        False if `seq` itself had to be preempted (nothing else left to take from).
        """
        need = self.blocks.blocks_for(num_tokens) - len(seq.block_table)
        while need > self.blocks.num_free:
            victim = next((s for s in reversed(self.running) if s is not seq), None)
            if victim is None:
                self.preempt(seq)
                return False
            self.preempt(victim)
        if need > 0:
            seq.block_table.extend(self.blocks.allocate(need))
        return True

    def preempt(self, seq: Sequence) -> None:
        self.preemptions += 1
        self._release(seq)
        seq.status = Status.WAITING
        seq.num_cached = 0
        self.running.remove(seq)
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self._release(seq)

    def _release(self, seq: Sequence) -> None:
        self.blocks.release(seq.block_table)
        seq.block_table = []
        seq.num_published = 0

    # ---- prefix caching -------------------------------------------------------------------
    def publish_blocks(self, seq: Sequence) -> None:
        """Register the sequence's newly completed blocks (every position committed)."""
        self.blocks.publish(seq, seq.tokens, seq.num_cached)
