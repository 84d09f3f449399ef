"""CUDA graph capture and replay of the model's forward for verify/decode steps.

On the GPU a small model's step is dominated by kernel launches (hundreds per step), so verify and
decode steps replay a captured graph. A graph is shape-static, so a step is padded to a fixed
shape: B sequences (the batch rounded up to a power of two; idle rows write to a scratch slot),
each fed exactly `Tq` tokens (Tq = 1 for plain decode, a short block (EngineConfig.short_block) for
short drafts, then 16, 32, ... up to K for longer verify blocks, `block_sizes`; a shorter feed is
padded with copies of its last token, whose K/V land in rejected-tail positions that are
overwritten later anyway), and a slot-table width rounded up to a multiple of WIDTH_STEP
(attention reads the whole width, so coarser buckets cost real time). One graph per (B, Tq, width)
is captured lazily on first use and shares one memory pool with the others, and one input buffer:
a replay stages the step's inputs in pinned host memory and copies them over at once (`_Inputs`),
so a greedy verify step is one copy in, the graph, one copy out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from engine.kv_cache import fill_slot_tables
from engine.models.transformer import AttentionMetadata

WIDTH_STEP = 512


class _Graph:
    def __init__(self, runner, B: int, Tq: int, width: int, pool, inputs: "_Inputs", capture_stream):
        dev, model = runner.device, runner.model
        self.B, self.Tq, self.width = B, Tq, width
        layers = runner.kv.layers
        # The shared buffer holds another graph's last inputs: start from token 0 at position 0 in
        # every row, idle, so capture-time writes go to the scratch block, never a live sequence's.
        inputs.idle(B, Tq, width)
        # Warm up on the runner's capture stream (allocator and library handles), then capture there.
        capture_stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(capture_stream):
            model(*inputs.derive(B, Tq, width), layers)
        torch.cuda.current_stream(dev).wait_stream(capture_stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool, stream=capture_stream):
            self.hidden = model(*inputs.derive(B, Tq, width), layers)
            # [B * Tq] greedy tokens: a greedy verify step needs nothing else from the GPU. With draft
            # heads, in a step of few rows, [1 + n, B * Tq]: each row's greedy token, then every
            # head's guess after it.
            heads = model.heads is not None and B * Tq <= runner.heads_max_rows  # the eager steps' rule
            rows = model.greedy_rows(self.hidden, runner.vocab_limit, heads)
            self.tokens = rows if heads else rows[0]


class _Inputs:
    """Every graph's inputs live in one int64 device buffer, staged in one pinned host buffer: the
    fed tokens [B * Tq], each row's first position [B], and each row's block table [B, blocks
    of width]. A replay is one host-to-device copy, and the graph derives the rest on the device
    (`derive`: positions, the slot each token's K/V goes to, the slot tables attention reads), so
    the host writes a block number where it would write a slot for each of its positions
    (bench/HISTORY.md, "Graph inputs staged as block tables"). Rows past the batch are idle: token
    0 from position 0, their tables all the scratch block; a table past its sequence's blocks
    holds the scratch block too (masked columns). Graphs replay one at a time, so they share both
    buffers; each lays its inputs out from the start."""

    def __init__(self, max_batch: int, max_tq: int, max_width: int, device, scratch_slot: int, block_size: int):
        self.scratch_slot, self.block_size = scratch_slot, block_size
        self.scratch_block = scratch_slot // block_size
        size = self.size(max_batch, max_tq, max_width)
        cuda = torch.device(device).type == "cuda"  # elsewhere only for the layout's CPU test
        self.device_buf = torch.zeros(size, dtype=torch.long, device=device)
        self.host_buf = torch.zeros(size, dtype=torch.long, pin_memory=cuda)
        self.host = self.host_buf.numpy()
        self.copied = torch.cuda.Event() if cuda else None

    def _split(self, buf, B: int, Tq: int, width: int):
        """(ids [B * Tq], first positions [B], block tables [B, blocks]) views of `buf` (a torch
        tensor or a numpy array)."""
        n, blocks = B * Tq, self._blocks(width)
        return buf[:n], buf[n : n + B], buf[n + B : n + B + B * blocks].reshape(B, blocks)

    def _blocks(self, width: int) -> int:
        return -(-width // self.block_size)

    def size(self, B: int, Tq: int, width: int) -> int:
        """The int64s a replay of this shape copies to the device."""
        return B * (Tq + 1 + self._blocks(width))

    def derive(self, B: int, Tq: int, width: int) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        """The forward's inputs from the device buffer, as torch operations (captured into each
        graph): ids [B * Tq], positions [B * Tq], and the attention metadata -- the layout the
        eager path's `ModelRunner.prepare` builds on the host."""
        ids, first, tables = self._split(self.device_buf, B, Tq, width)
        device, bs = ids.device, self.block_size
        q_positions = first[:, None] + torch.arange(Tq, device=device)  # [B, Tq]
        columns = torch.arange(width, device=device)
        slot_tables = tables[:, columns // bs] * bs + columns % bs  # [B, width]
        meta = AttentionMetadata(slot_mapping=slot_tables.gather(1, q_positions).reshape(-1), slot_tables=slot_tables,
                                 q_positions=q_positions, query_lens=[Tq] * B, context_lens=[width] * B)
        return ids, q_positions.reshape(-1), meta

    def idle(self, B: int, Tq: int, width: int) -> None:
        """Set every row of the device buffer idle (graph capture)."""
        ids, first, tables = self._split(self.device_buf, B, Tq, width)
        ids.zero_(), first.zero_(), tables.fill_(self.scratch_block)

    def stage(self, graph: _Graph, batch, starts: list[int]) -> None:
        """Lay out `batch` (sequence, feed of exactly Tq tokens), each feed at positions from its
        `starts` entry, for `graph` in the host buffer; `copy` sends it over. A feed that reaches
        past its sequence's blocks is refused (IndexError), never written to another's slots."""
        if self.copied is not None:
            self.copied.synchronize()  # the last copy has read the host buffer
        B, Tq, bs = graph.B, graph.Tq, self.block_size
        ids, first, tables = self._split(self.host, B, Tq, graph.width)
        n, blocks = len(batch), tables.shape[1]
        ids[: n * Tq] = [token for _, feed in batch for token in feed]
        ids[n * Tq :], first[:n], first[n:] = 0, starts, 0
        tables.fill(self.scratch_block)
        for i, ((seq, _), start) in enumerate(zip(batch, starts)):
            table = seq.block_table
            if start + Tq > len(table) * bs:
                raise IndexError(f"positions {start}-{start + Tq - 1} reach past the sequence's {len(table)} blocks")
            row = table[:blocks]
            tables[i, : len(row)] = row

    def copy(self, graph: _Graph) -> None:
        """Send the inputs `stage` laid out for `graph` to the device buffer, in one copy."""
        n = self.size(graph.B, graph.Tq, graph.width)
        self.device_buf[:n].copy_(self.host_buf[:n], non_blocking=True)
        if self.copied is not None:
            self.copied.record()


class DecodeChain:
    """Greedy decoding with each token fed back on the device: the draft model's n tokens for a
    batch of B rows are one forward over their feeds (a `_Graph` or eager), then n - 1 steps of
    one token per row whose inputs (the token just decoded, its position, its cache slot) are
    computed on the GPU from the step before, then one read of the n tokens (`decode`). Captured as
    a CUDA graph of one step (`capture`), the n - 1 replays run back to back with no host round trip
    between them: a draft token costs its GPU time, not that plus the host's staging and read-back
    of a step (bench/HISTORY.md, "Draft tokens fed back on the device").

    Its inputs, staged from the host in one copy (`stage`): each row's position after its feed's
    last token, whether the row is real (idle padding rows write to the scratch slot), the row of
    the feed's last token in the first forward's output, and the slot table over `width`
    positions, which must cover every position the chain writes."""

    def __init__(self, runner, B: int, width: int, max_tokens: int, scratch_slot: int):
        dev = runner.device
        self.runner, self.B, self.width, self.scratch_slot = runner, B, width, scratch_slot
        cuda = dev.type == "cuda"
        size = 3 * B + B * width
        self.device_buf = torch.zeros(size, dtype=torch.long, device=dev)
        self.host_buf = torch.zeros(size, dtype=torch.long, pin_memory=cuda)
        self.positions, self.active, self.last, tables = self._split(self.device_buf)
        self.tokens = torch.zeros(B, dtype=torch.long, device=dev)  # fed by the next step
        self.history = torch.zeros(B, max_tokens, dtype=torch.long, device=dev)
        self.count = torch.zeros(1, dtype=torch.long, device=dev)  # tokens in history
        self.meta = AttentionMetadata(slot_mapping=torch.zeros(B, dtype=torch.long, device=dev), slot_tables=tables,
                                      q_positions=torch.zeros(B, 1, dtype=torch.long, device=dev),
                                      query_lens=[1] * B, context_lens=[width] * B)
        # The chained steps' GPU time, timed on the device (the host does not wait between them).
        self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
        self.graph = None

    def _split(self, buf):
        B = self.B
        return buf[:B], buf[B : 2 * B], buf[2 * B : 3 * B], buf[3 * B :].reshape(B, self.width)

    def capture(self, pool, capture_stream) -> None:
        """Capture `_step` as a CUDA graph (a warm-up step first, writing to the scratch slot)."""
        self.device_buf.zero_()
        capture_stream.wait_stream(torch.cuda.current_stream(self.runner.device))
        with torch.cuda.stream(capture_stream):
            self._step()
        torch.cuda.current_stream(self.runner.device).wait_stream(capture_stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool, stream=capture_stream):
            self._step()

    def stage(self, starts: list[int], lengths: list[int], last_rows: list[int], block_tables) -> None:
        """Lay out the chain's inputs for rows fed `lengths` tokens from `starts` whose last token
        is row `last_rows[i]` of the first forward's greedy tokens; rows past them are idle."""
        pos, active, last, tables = self._split(self.host_buf.numpy())
        n = len(starts)
        pos[:n] = np.asarray(starts) + np.asarray(lengths)
        pos[n:], active[:n], active[n:], last[:n], last[n:] = 0, 1, 0, last_rows, 0
        fill_slot_tables(tables, block_tables, self.runner.kv.block_size)
        # The host buffer is written again only after the chain's tokens were read, so after this copy.
        self.device_buf.copy_(self.host_buf, non_blocking=True)

    def decode(self, first_tokens: torch.Tensor, n: int, rows: int) -> tuple[list[list[int]], float]:
        """After `stage`: take each row's first token from the first forward's greedy tokens,
        decode n - 1 more, fed back on the device, and read the first `rows` rows' n tokens back
        at once; with the seconds each chained step took (GPU time on CUDA). n >= 2."""
        self.tokens.copy_(first_tokens.gather(0, self.last))
        self.history[:, 0] = self.tokens
        self.count.fill_(1)
        if self.events:
            self.events[0].record()
        step = self.graph.replay if self.graph is not None else self._step
        t = time.perf_counter()
        for _ in range(n - 1):
            step()
        if self.events:
            self.events[1].record()
        out = self.history[:rows, :n].tolist()
        seconds = self.events[0].elapsed_time(self.events[1]) / 1000 if self.events else time.perf_counter() - t
        return out, seconds / (n - 1)

    def _step(self) -> None:
        """Decode one token per row: its input the token, position and slot of the step before."""
        model, p = self.runner.model, self.positions
        slots = self.meta.slot_tables.gather(1, p[:, None]).squeeze(1)
        self.meta.slot_mapping.copy_(torch.where(self.active != 0, slots, self.scratch_slot))
        self.meta.q_positions.copy_(p[:, None])
        hidden = model(self.tokens, p, self.meta, self.runner.kv.layers)
        token = model.greedy_tokens(hidden, self.runner.vocab_limit)
        self.history.scatter_(1, self.count.expand(self.B)[:, None], token[:, None])
        self.tokens.copy_(token)
        p.add_(1)
        self.count.add_(1)


@dataclass
class Staged:
    """A step's inputs laid out in the host buffer for `graph`, not sent yet (`GraphRunner.replay`
    sends them); `keep` as in `GraphRunner.run`. The buffer holds one staging at a time."""

    graph: _Graph
    rows: int
    keep: list[int] | None


# The verify blocks below K that get graphs of their own: 16, 32, ... (block_sizes).
LADDER_FROM = 16


def block_sizes(k: int, short: int) -> list[int]:
    """Positions per sequence a graph is captured for: 1 (decode), a short block for short drafts
    (EngineConfig.short_block, 0 for none), LADDER_FROM, twice that, ... below K, and K. A step
    replays the smallest that holds its feeds, so a 10-token draft costs a 16-row step however
    long K's blocks are (bench/RESULTS.md, "Verify block length")."""
    sizes, n = {1, k} | ({min(short, k)} if short else set()), LADDER_FROM
    while n < k:
        sizes.add(n)
        n *= 2
    return sorted(sizes)


class GraphRunner:
    def __init__(self, runner):
        self.runner = runner
        self.max_batch = 1 << (runner.cfg.max_num_seqs - 1).bit_length()
        self.verify_tokens = runner.cfg.verify_tokens
        self.block_sizes = block_sizes(self.verify_tokens, runner.cfg.short_block)
        self.graphs: dict[tuple[int, int, int], _Graph] = {}
        self.pool = torch.cuda.graph_pool_handle()
        # Each runner captures on its own stream. cuBLAS keeps a workspace per stream, and a graph
        # bakes in the one of the stream it was captured on: graphs of two runners captured on one
        # stream (torch.cuda.graph's default) share it. Replayed at once on two streams (the draft
        # model drafting beside the target, engine/speculative/hybrid.py), the 1.5B's and the 0.5B's
        # graphs so captured hung the H200 (bench/HISTORY.md, "drafting ahead").
        self.capture_stream = torch.cuda.Stream(runner.device)
        scratch_slot = runner.kv.allocator.reserve() * runner.kv.block_size
        max_width = -(-(runner.cfg.max_model_len + self.verify_tokens) // WIDTH_STEP) * WIDTH_STEP
        self.inputs = _Inputs(self.max_batch, self.verify_tokens, max_width, runner.device, scratch_slot,
                              runner.kv.block_size)
        self._staged: Staged | None = None  # what the input buffer holds, not sent yet
        self.chains: dict[tuple[int, int], DecodeChain] = {}

    def chain(self, rows: int, need: int) -> DecodeChain:
        """The captured DecodeChain for `rows` real rows writing positions below `need` (its
        shape padded as a graph's: rows to a power of two, the width to WIDTH_STEP)."""
        key = (1 << (rows - 1).bit_length(), -(-need // WIDTH_STEP) * WIDTH_STEP)
        if key not in self.chains:
            chain = DecodeChain(self.runner, *key, self.verify_tokens, self.inputs.scratch_slot)
            chain.capture(self.pool, self.capture_stream)
            self.chains[key] = chain
        return self.chains[key]

    def capture(self, batch_sizes: list[int], max_context: int, chains: bool = False) -> int:
        """Capture every graph that steps of these batch sizes up to `max_context` will need (and
        with `chains` the DecodeChains of a draft model), so that no capture lands inside a timed
        or latency-sensitive step. Returns how many."""
        widths = range(WIDTH_STEP, -(-(max_context + self.verify_tokens) // WIDTH_STEP) * WIDTH_STEP + 1, WIDTH_STEP)
        for b in sorted({1 << (n - 1).bit_length() for n in batch_sizes if n <= self.max_batch}):
            for width in widths:
                for tq in self.block_sizes:
                    if (b, tq, width) not in self.graphs:
                        self.graphs[(b, tq, width)] = _Graph(self.runner, b, tq, width, self.pool, self.inputs, self.capture_stream)
                if chains:
                    self.chain(b, width)
        return len(self.graphs) + len(self.chains)

    def can_run(self, batch) -> bool:
        """Decode/verify steps only (every feed within one verify block), no prefill chunks."""
        return len(batch) <= self.max_batch and all(
            1 <= len(feed) <= self.verify_tokens and not seq.needs_prefill for seq, feed in batch
        )

    def stage(self, batch, starts: list[int]) -> Staged:
        """Pad `batch` to its graph's shape (capturing the graph on first use) and lay its inputs
        out, each feed at positions from its `starts` entry; `replay` runs it."""
        longest = max(len(f) for _, f in batch)
        Tq = next(t for t in self.block_sizes if t >= longest)
        padded = [(seq, feed + [feed[-1]] * (Tq - len(feed))) for seq, feed in batch]
        need = max(start + Tq for start in starts)
        width = -(-need // WIDTH_STEP) * WIDTH_STEP
        rows = 1 << (len(batch) - 1).bit_length()  # batch sizes in powers of two: fewer graphs
        key = (rows, Tq, width)
        if key not in self.graphs:
            self.graphs[key] = _Graph(self.runner, rows, Tq, width, self.pool, self.inputs, self.capture_stream)
        graph = self.graphs[key]
        self.inputs.stage(graph, padded, starts)
        self._staged = staged = Staged(graph, len(padded) * Tq, None)
        if Tq > 1 and any(len(f) != Tq for _, f in batch):
            staged.keep = [i * Tq + j for i, (_, f) in enumerate(batch) for j in range(len(f))]
        return staged

    def replay(self, staged: Staged) -> tuple[torch.Tensor, torch.Tensor, list[int] | None]:
        """Send `staged` over and replay its graph: hidden states [N, hidden] and greedy tokens [N]
        ([1 + n, N] where n draft heads ran: ModelRunner.attach_heads) of the replayed rows, and which
        of them are the batch's real (unpadded) rows, in order (None: the first sum(len(feed)) rows)."""
        if staged is not self._staged:
            raise RuntimeError("the graphs' input buffer holds another step's inputs now")
        self._staged = None
        graph = staged.graph
        self.inputs.copy(graph)
        graph.graph.replay()
        return graph.hidden[: staged.rows], graph.tokens[..., : staged.rows], staged.keep

    def run(self, batch, starts: list[int]) -> tuple[torch.Tensor, torch.Tensor, list[int] | None]:
        """`stage` then `replay`."""
        return self.replay(self.stage(batch, starts))
