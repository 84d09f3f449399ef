"""CUDA graph capture and replay of the model's forward for verify/decode steps.

On the GPU a small model's step is dominated by kernel launches (hundreds per step), so verify and
decode steps replay a captured graph. A graph is shape-static, so a step is padded to a fixed
shape: B sequences (the batch rounded up to a power of two; idle rows write to a scratch slot),
each fed exactly `Tq` tokens (Tq = 1 for plain decode, K for verify blocks; a
shorter draft is padded with copies of its last token, whose K/V land in rejected-tail positions
that are overwritten later anyway), and a slot-table width rounded up to a multiple of
WIDTH_STEP (attention reads the whole width, so coarser buckets cost real time). One graph
per (B, Tq, width) is captured lazily on first use and shares one memory pool with the others.
"""

from __future__ import annotations

import torch

from engine.models.transformer import AttentionMetadata

WIDTH_STEP = 512


class _Graph:
    def __init__(self, runner, B: int, Tq: int, width: int, pool, scratch_slot: int):
        dev, model = runner.device, runner.model
        self.input_ids = torch.zeros(B * Tq, dtype=torch.long, device=dev)
        self.positions = torch.zeros(B * Tq, dtype=torch.long, device=dev)
        self.meta = AttentionMetadata(
            slot_mapping=torch.zeros(B * Tq, dtype=torch.long, device=dev),
            slot_tables=torch.zeros(B, width, dtype=torch.long, device=dev),
            q_positions=torch.zeros(B, Tq, dtype=torch.long, device=dev),
            query_lens=[Tq] * B,
            context_lens=[width] * B,
        )
        layers = runner.kv.layers
        # Capture-time writes go to a reserved block, never to a live sequence's slots.
        self.meta.slot_mapping.fill_(scratch_slot)
        # Warm up on a side stream (allocator and library handles), then capture.
        stream = torch.cuda.Stream(dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream):
            model(self.input_ids, self.positions, self.meta, layers)
        torch.cuda.current_stream(dev).wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.hidden = model(self.input_ids, self.positions, self.meta, layers)
            # [B * Tq] greedy tokens: a greedy verify step needs nothing else from the GPU.
            self.tokens = model.greedy_tokens(self.hidden, runner.vocab_limit)

    def replay(self, ids, positions, meta: AttentionMetadata, scratch_slot: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the graph on a batch of up to its B sequences; rows past the batch are idle
        (token 0 at position 0, written to the scratch slot). Returns hidden states and greedy
        tokens of the first T rows."""
        T, B = ids.numel(), meta.slot_tables.shape[0]
        self.input_ids[:T].copy_(ids)
        self.input_ids[T:].zero_()
        self.positions[:T].copy_(positions)
        self.positions[T:].zero_()
        self.meta.slot_mapping[:T].copy_(meta.slot_mapping)
        self.meta.slot_mapping[T:].fill_(scratch_slot)
        self.meta.slot_tables[:B].copy_(meta.slot_tables)
        self.meta.slot_tables[B:].zero_()
        self.meta.q_positions[:B].copy_(meta.q_positions)
        self.meta.q_positions[B:].zero_()
        self.graph.replay()
        return self.hidden[:T], self.tokens[:T]


class GraphRunner:
    def __init__(self, runner):
        self.runner = runner
        self.max_batch = 1 << (runner.cfg.max_num_seqs - 1).bit_length()
        self.verify_tokens = runner.cfg.verify_tokens
        self.graphs: dict[tuple[int, int, int], _Graph] = {}
        self.pool = torch.cuda.graph_pool_handle()
        self.scratch_slot = runner.kv.allocator.allocate(1)[0] * runner.kv.block_size

    def capture(self, batch_sizes: list[int], max_context: int) -> int:
        """Capture every graph that steps of these batch sizes up to `max_context` will need, so
        that no capture lands inside a timed or latency-sensitive step. Returns how many."""
        widths = range(WIDTH_STEP, -(-(max_context + self.verify_tokens) // WIDTH_STEP) * WIDTH_STEP + 1, WIDTH_STEP)
        for b in sorted({1 << (n - 1).bit_length() for n in batch_sizes if n <= self.max_batch}):
            for tq in sorted({1, self.verify_tokens}):
                for width in widths:
                    if (b, tq, width) not in self.graphs:
                        self.graphs[(b, tq, width)] = _Graph(self.runner, b, tq, width, self.pool, self.scratch_slot)
        return len(self.graphs)

    def can_run(self, batch) -> bool:
        """Decode/verify steps only (every feed within one verify block), no prefill chunks."""
        return len(batch) <= self.max_batch and all(
            1 <= len(feed) <= self.verify_tokens and not seq.needs_prefill for seq, feed in batch
        )

    def run(self, batch) -> tuple[torch.Tensor, torch.Tensor, list[int] | None]:
        """Hidden states [N, hidden] and greedy tokens [N] of the replayed rows, and which of them
        are `batch`'s real (unpadded) rows, in order (None: the first sum(len(feed)) rows)."""
        Tq = 1 if all(len(f) == 1 for _, f in batch) else self.verify_tokens
        padded = [(seq, feed + [feed[-1]] * (Tq - len(feed))) for seq, feed in batch]
        need = max(seq.num_cached + Tq for seq, _ in batch)
        width = -(-need // WIDTH_STEP) * WIDTH_STEP
        rows = 1 << (len(batch) - 1).bit_length()  # batch sizes in powers of two: fewer graphs
        key = (rows, Tq, width)
        if key not in self.graphs:
            self.graphs[key] = _Graph(self.runner, rows, Tq, width, self.pool, self.scratch_slot)
        ids, positions, meta = self.runner.prepare(padded, width=width)
        hidden, tokens = self.graphs[key].replay(ids, positions, meta, self.scratch_slot)
        if Tq == 1 or all(len(f) == Tq for _, f in batch):
            return hidden, tokens, None
        return hidden, tokens, [i * Tq + j for i, (_, f) in enumerate(batch) for j in range(len(f))]
