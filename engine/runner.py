"""ModelRunner: loads the model, owns the KV cache, and runs one forward step for a batch.

A step's input is, for each sequence, the tokens not yet in the cache (a prompt chunk, or
`[last token] + draft` for a verify block). The runner lays them out flat, computes cache slots,
runs the model, and returns logits for the rows asked for. Compile/graph decisions live here and
only here: uniform batches (every sequence with the same number of query tokens) on CUDA replay a
captured CUDA graph unless `enforce_eager` is set.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import accumulate
from types import SimpleNamespace

import numpy as np
import torch

from engine.config import MAX_VERIFY_TOKENS, EngineConfig
from engine.cuda_graphs import DecodeChain, GraphRunner, Staged
from engine.kv_cache import KVCache, kv_bytes_per_token
from engine.loader.hf_folder import load_model
from engine.loader.registry import model_context, resolve
from engine.models.transformer import AttentionMetadata
from engine.sequence import Sequence
from engine.speculative.heads import heads_max_rows
from engine.tokenizer import Tokenizer
from kernels.paged_attention import resolve_impl

CPU_KV_BUDGET_BYTES = 1 << 30
# Prefill lengths `warm_prefill` runs: between them the attention's compile-time variants (split
# or not, and the number of splits, which follow from the length) that prefills use.
WARM_PREFILL_LENGTHS = (64, 128, 256, 512, 1024, 2048)
SCORE_ROWS = 256  # rows of one lm_head pass when a prefill scores tokens (`prefill`)
# A prefill of at most SHORT_PREFILL tokens a sequence (a question after a cached document, a
# ranking's window) runs as verify-shaped CUDA graph replays in blocks of K positions, where that
# takes at most SHORT_PREFILL_REPLAYS replays (`_graph_prefill`). Eager, a short prefill pays a
# launch from Python for every kernel of every layer (a later RAG question's first token: 16-30 ->
# 5-8 ms through the graphs, bench/HISTORY.md "A short prefill through the verify graphs"); the two
# bounds are not yet measured against eager prefills on the H200.
SHORT_PREFILL = 256
SHORT_PREFILL_REPLAYS = 4


class ModelRunner:
    def __init__(self, cfg: EngineConfig):
        self.folder = resolve(cfg.model)
        # The one place max_model_len is resolved (0 = the model's own context); the engine and
        # everything behind it read `runner.cfg`.
        self.cfg = cfg = cfg.for_model(model_context(self.folder))
        self.device, self.dtype = cfg.torch_device, cfg.torch_dtype
        self.tokenizer = Tokenizer(self.folder)
        # Room past max_model_len for the padded tail of a verify block.
        self.model = load_model(self.folder, self.dtype, self.device, max_positions=cfg.max_model_len + 64)
        mc = self.model.config
        self.model_config = mc
        per_token = kv_bytes_per_token(cfg.kv_dtype, mc.num_layers, mc.num_kv_heads, mc.head_dim, self.dtype,
                                       cfg.block_size)
        tokens = cfg.kv_cache_tokens or self._default_kv_tokens(per_token)
        num_blocks = max(1, tokens // cfg.block_size)
        self.kv = KVCache(mc.num_layers, num_blocks, cfg.block_size, mc.num_kv_heads, mc.head_dim, self.dtype,
                          self.device, kv_dtype=cfg.kv_dtype, salt=f"{self.folder.resolve()}|{self.dtype}",
                          enable_prefix_caching=cfg.enable_prefix_caching, window_blocks=self._window_blocks())
        self.attention = resolve_impl(cfg.attention, self.device, mc.head_dim, cfg.kv_dtype)
        self.model.set_kernel_impl(self.attention)
        if self.device.type == "cuda":  # before any graph is captured: the launches carry it
            from kernels import pdl  # imports Triton, whose interpreter is chosen before its first import

            pdl.set_enabled(cfg.pdl)
        if cfg.rows_invariant:
            self.model.set_batch_invariant(True)
        if cfg.int8_head:
            self.model.quantize_head("triton" if self.device.type == "cuda" else "ref")
        if cfg.packed_weights:
            self.model.pack_weights()  # the CPU's GEMMs; elsewhere a no-op
        # Greedy tokens are taken among the first vocab_limit ids (a draft model proposes only ids its
        # target has); None = the whole vocabulary. Set before any graph is captured.
        self.vocab_limit: int | None = None
        self.heads_max_rows = heads_max_rows(self.device.type)  # the draft heads' steps, once attached
        self.graphs = None
        # int4 hands out its full-precision window on the host at each write, which a graph cannot replay.
        if self.device.type == "cuda" and not cfg.enforce_eager and cfg.kv_dtype != "int4":
            self.graphs = GraphRunner(self)

    def attach_heads(self, heads) -> None:
        """Run the target's draft heads (engine/speculative/heads.py) in every verify step of at most
        `heads_max_rows` rows: its greedy tokens come with the heads' guesses (`collect` hands them
        out per row). Before any CUDA graph is captured, since graphs capture them."""
        if self.graphs is not None and (self.graphs.graphs or self.graphs.chains):
            raise RuntimeError("attach draft heads before any CUDA graph is captured")
        self.model.heads = heads

    def _window_blocks(self) -> int:
        """int4's full-precision pool (engine/kv_int4.py): every block a step can write (a full prompt
        chunk, each sequence's verify block) and then some, so waiting sequences keep theirs."""
        bs = self.cfg.block_size
        return self.cfg.max_batch_tokens // bs + self.cfg.max_num_seqs * (self.cfg.verify_tokens // bs + 3)

    def _default_kv_tokens(self, per_token: int) -> int:
        # A seat: a full-context sequence with the longest verify block a request may ask for
        # (Scheduler.admit holds it). Every seat, and the CUDA graphs' scratch block.
        seat = self.cfg.max_model_len + MAX_VERIFY_TOKENS
        want = self.cfg.max_num_seqs * seat + self.cfg.block_size
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            return min(want, int(0.5 * free) // per_token)
        return max(seat, min(want, CPU_KV_BUDGET_BYTES // per_token))  # on the CPU one seat at least

    def prepare(self, batch: list[tuple[Sequence, list[int]]], starts: list[int] | None = None):
        """Flat inputs and attention metadata for `batch` of (sequence, tokens to feed) for an eager
        forward, each feed at positions from its `starts` entry (default: the sequence's cached
        length); a CUDA graph stages its own (engine/cuda_graphs.py)."""
        bs = self.cfg.block_size
        starts = starts or [seq.num_cached for seq, _ in batch]
        ids, positions, slots, q_lens, ctx_lens = [], [], [], [], []
        for (seq, feed), start in zip(batch, starts):
            pos = np.arange(start, start + len(feed))
            ids.extend(feed)
            positions.append(pos)
            slots.append(np.asarray(seq.block_table, dtype=np.int64)[pos // bs] * bs + pos % bs)
            q_lens.append(len(feed))
            ctx_lens.append(start + len(feed))
        width = max(ctx_lens)
        max_q = max(q_lens)
        q_pos = torch.zeros(len(batch), max_q, dtype=torch.long)
        for i, start in enumerate(starts):
            q_pos[i] = torch.arange(start, start + max_q)
        dev = self.device
        meta = AttentionMetadata(
            slot_mapping=torch.from_numpy(np.concatenate(slots)).to(dev),
            slot_tables=self.kv.slot_tables([s.block_table for s, _ in batch], width, dev),
            q_positions=q_pos.to(dev),
            query_lens=q_lens,
            context_lens=ctx_lens,
        )
        if not meta.uniform:
            meta.query_starts = torch.tensor(list(accumulate(q_lens, initial=0)), dtype=torch.int32, device=dev)
        return (torch.tensor(ids, dtype=torch.long, device=dev), torch.from_numpy(np.concatenate(positions)).to(dev),
                meta)

    @torch.inference_mode()
    def warm_prefill(self, max_tokens: int) -> None:
        """Run eager prefill forwards of WARM_PREFILL_LENGTHS (up to `max_tokens` and the prefill
        chunk) into scratch blocks, so that Triton compiles the attention variants prompts use now
        and not in a request (a compile costs about a second). Where CUDA graphs run."""
        lengths = [n for n in WARM_PREFILL_LENGTHS if n <= min(max_tokens, self.cfg.max_batch_tokens)
                   and self.kv.blocks_for(n) <= self.kv.allocator.num_free]
        if self.graphs is None or not lengths:
            return
        blocks = self.kv.allocator.allocate(self.kv.blocks_for(max(lengths)))
        scratch = SimpleNamespace(block_table=blocks, num_cached=0, needs_prefill=True)
        try:
            for n in lengths:
                self.forward([(scratch, [0] * n)], logits=False)
        finally:
            self.kv.allocator.release(blocks)

    @torch.inference_mode()
    def prefill_hidden(self, feeds: list[list[int]]) -> torch.Tensor:
        """Final hidden states [sum(len(feed)), hidden] of fresh sequences, each fed from position 0,
        in one eager forward; their K/V go to scratch blocks given back after (what training the
        draft heads reads, engine/training/heads.py). An inference tensor: clone it for autograd."""
        tables = []
        try:
            for feed in feeds:
                tables.append(self.kv.allocator.allocate(self.kv.blocks_for(len(feed))))
            batch = [(SimpleNamespace(block_table=t, num_cached=0, needs_prefill=True), f)
                     for t, f in zip(tables, feeds)]
            ids, positions, meta = self.prepare(batch, [0] * len(batch))
            return self.model(ids, positions, meta, self.kv.layers)
        finally:
            for t in tables:
                self.kv.allocator.release(t)

    @torch.inference_mode()
    def forward(self, batch: list[tuple[Sequence, list[int]]], logits: bool) -> torch.Tensor | None:
        """Run the model over `batch`, writing K/V; logits [sum(len(feed)), vocab] fp32 if asked."""
        hidden, _, keep = self._run(batch)
        return self.model.compute_logits(_rows(hidden, keep)) if logits else None

    @torch.inference_mode()
    def prefill(self, batch: list[tuple[Sequence, list[int]]], picks: list[tuple[int, int]] = ()) -> list[float]:
        """Run a prefill plan's forward, writing K/V. With `picks` [(row, token)], the
        log-probability of each token after its row (score requests, engine._score_picks): the
        lm_head runs on those rows only, SCORE_ROWS at a time ([SCORE_ROWS, vocab] fp32 each)."""
        rows = [r for r, _ in picks]
        hidden = self._graph_prefill(batch, rows)
        if hidden is None:
            hidden, _, keep = self._run(batch)
            hidden = _rows(hidden, keep)[torch.tensor(rows, dtype=torch.long, device=hidden.device)] if picks else None
        if not picks:
            return []
        tokens = torch.tensor([t for _, t in picks], dtype=torch.long, device=hidden.device)
        out = []
        for i in range(0, len(picks), SCORE_ROWS):
            logits = self.model.compute_logits(hidden[i : i + SCORE_ROWS])  # [n, vocab]
            out.append(torch.log_softmax(logits, dim=-1).gather(1, tokens[i : i + SCORE_ROWS, None])[:, 0])
        return torch.cat(out).tolist()

    def _graph_prefill(self, batch: list[tuple[Sequence, list[int]]], picked: list[int]) -> torch.Tensor | None:
        """Run a short prefill (every feed at most SHORT_PREFILL tokens, SHORT_PREFILL_REPLAYS
        replays in all) through the captured verify graphs: the final hidden states of rows
        `picked` (rows of the feeds laid end to end), or None where it does not apply (no graphs,
        a long prefill). Each feed is cut into blocks of K tokens, and each block is a row of a
        replay, as a verify block is, reading its sequence's cache from its own start: a layer
        writes every row's K/V before any row attends, so the blocks of one sequence in one
        replay see each other. Eager, a few hundred tokens pay a launch from Python for every
        kernel of every layer: most of a later RAG question's time to first token and of a
        ranking (bench/HISTORY.md, "A short prefill through the verify graphs" and "Packed weights
        on the CPU, graph inputs staged as block tables, short prefills in verify graphs"). A block's padding writes past the feed, into positions
        the sequence's verify block reserves (`Scheduler.admit`) and its next forward writes again
        before any row reads them (a sequence that reserves less, prefills eager)."""
        graphs, k, bs = self.graphs, self.cfg.verify_tokens, self.cfg.block_size
        if graphs is None or any(len(feed) > SHORT_PREFILL or  # and the padded blocks within the blocks held
                                 seq.num_cached + -(-len(feed) // k) * k > len(seq.block_table) * bs
                                 for seq, feed in batch):
            return None
        first = list(accumulate((len(feed) for _, feed in batch), initial=0))  # each feed's first row
        # (the block's first row, its sequence, its tokens, its first position)
        blocks = [(first[i] + at, seq, feed[at : at + k], seq.num_cached + at)
                  for i, (seq, feed) in enumerate(batch) for at in range(0, len(feed), k)]
        if len(blocks) > SHORT_PREFILL_REPLAYS * graphs.max_batch:
            return None
        wanted, parts, order = set(picked), [], []
        for r in range(0, len(blocks), graphs.max_batch):
            replay = blocks[r : r + graphs.max_batch]
            hidden, _, keep = graphs.run([(seq, f) for _, seq, f, _ in replay], [start for *_, start in replay])
            rows = [row + j for row, _, f, _ in replay for j in range(len(f))]
            mine = [n for n, row in enumerate(rows) if row in wanted]
            if mine:  # taken now: the next replay writes the graph's output buffer again
                parts.append(_rows(hidden, keep)[torch.tensor(mine, dtype=torch.long, device=hidden.device)])
                order.extend(rows[n] for n in mine)
        if not picked:
            return torch.empty(0)
        hidden, at = torch.cat(parts), {row: n for n, row in enumerate(order)}
        return hidden[torch.tensor([at[row] for row in picked], dtype=torch.long, device=hidden.device)]

    @torch.inference_mode()
    def verify(self, batch: list[tuple[Sequence, list[int]]], logits: bool = False,
               last_only: bool = False) -> StepOutput:
        """Run the model over `batch`, writing K/V. Returns each sequence's greedy token after every
        fed row (only after its last row with `last_only`), read back in one device-to-host copy,
        and fp32 logits [sum(len(feed)), vocab] when `logits` (sampled requests need them).
        `launch` then `collect`."""
        return self.collect(self.launch(batch, logits), last_only)

    def stage(self, batch: list[tuple[Sequence, list[int]]], starts: list[int]) -> Staged | None:
        """Lay out a verify step's inputs ahead of its launch (while the GPU runs the step before),
        each feed at positions from its `starts` entry: a CUDA graph's Staged, or None where the
        step will run eager (launch prepares it then)."""
        if self.graphs is not None and self.graphs.can_run(batch):
            return self.graphs.stage(batch, starts)
        return None

    @torch.inference_mode()
    def launch(self, batch: list[tuple[Sequence, list[int]]], logits: bool = False,
               starts: list[int] | None = None, staged: Staged | None = None) -> Flight:
        """Start the forward over `batch` (each feed at positions from `starts`, default the cached
        lengths; `staged` = its inputs as `stage` laid them out) without waiting for it.

        On a CUDA graph the greedy tokens come out of the graph itself (lm_head and argmax are
        captured), so a greedy step launches no kernel outside it."""
        hidden, tokens, keep = self.graphs.replay(staged) if staged is not None else self._run(batch, starts)
        out = None
        if logits or tokens is None:
            hidden, keep = _rows(hidden, keep), None
            heads = self.model.heads is not None and len(hidden) <= self.heads_max_rows
            if logits:
                out = self.model.compute_logits(hidden)  # [T, V]
                tokens = self.model.greedy_from_logits(out, self.vocab_limit)
                if heads:
                    tokens = torch.cat([tokens[None], self.model.head_tokens(hidden, self.vocab_limit)])
            else:  # greedy: the rows and the heads' rows in one lm_head GEMM, no fp32 logits
                tokens = self.model.greedy_rows(hidden, self.vocab_limit, heads)
                tokens = tokens if heads else tokens[0]
        return Flight(batch, tokens, keep, out)

    def collect(self, flight: Flight, last_only: bool = False) -> StepOutput:
        """Wait for `flight`: each sequence's greedy tokens (see `verify`), the logits if asked,
        and the draft heads' guesses when they ran."""
        t = time.perf_counter()
        flat = flight.tokens.tolist()  # the step's one device-to-host copy
        wait_s = time.perf_counter() - t
        guesses = None
        if flight.tokens.dim() == 2:  # draft heads: each row's greedy token, then the heads' guesses
            flat, guesses = flat[0], list(zip(*flat[1:]))
        if flight.keep is not None:
            flat = [flat[i] for i in flight.keep]
            if guesses is not None:
                guesses = [guesses[i] for i in flight.keep]
        rows, start = [], 0
        head_rows = [] if guesses is not None else None
        for _, feed in flight.batch:
            start += len(feed)
            rows.append(flat[start - 1 : start] if last_only else flat[start - len(feed) : start])
            if guesses is not None:
                head_rows.append(guesses[start - len(feed) : start])
        return StepOutput(rows, flight.logits, head_rows, wait_s)

    @torch.inference_mode()
    def decode_greedy(self, batch: list[tuple[Sequence, list[int]]], n: int) -> tuple[list[list[int]], float]:
        """Feed each (sequence, feed) from its cached length and decode n greedy tokens after it,
        the first n - 1 of them fed back on the device (engine/cuda_graphs.py DecodeChain) and
        all n read back at once: what a draft model writes. Returns each sequence's n tokens, and
        the seconds each of the n - 1 chained steps took (their GPU time on CUDA; 0.0 for n = 1).
        The K/V of the feed and of the first n - 1 tokens are written."""
        starts = [seq.num_cached for seq, _ in batch]
        ends = list(accumulate(len(feed) for _, feed in batch))
        hidden, tokens, keep = self._run(batch, starts)
        if tokens is None:  # eager: lm_head over each feed's last row only
            tokens = self.model.greedy_tokens(hidden[torch.tensor([e - 1 for e in ends], device=hidden.device)],
                                              self.vocab_limit)
            last = list(range(len(batch)))
        else:
            last = [keep[e - 1] if keep is not None else e - 1 for e in ends]
        if n == 1:
            flat = tokens.tolist()
            return [[flat[i]] for i in last], 0.0
        need = max(s + len(feed) for s, (_, feed) in zip(starts, batch)) + n - 1
        if self.graphs is not None:
            if n > self.graphs.verify_tokens:
                raise ValueError(f"a chain decodes at most {self.graphs.verify_tokens} tokens, not {n}")
            chain = self.graphs.chain(len(batch), need)
        else:
            chain = DecodeChain(self, len(batch), need, n, scratch_slot=0)  # no idle rows: never written
        chain.stage(starts, [len(feed) for _, feed in batch], last, [seq.block_table for seq, _ in batch])
        return chain.decode(tokens, n, len(batch))

    def _run(self, batch, starts: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None, list[int] | None]:
        """Hidden states and, from a CUDA graph, greedy tokens; `keep` lists the real rows when a
        graph padded the batch (GraphRunner.run), else the rows are the first sum(len(feed))."""
        starts = starts or [seq.num_cached for seq, _ in batch]
        if self.graphs is not None and self.graphs.can_run(batch):
            return self.graphs.run(batch, starts)
        ids, positions, meta = self.prepare(batch, starts)
        return self.model(ids, positions, meta, self.kv.layers), None, None


@dataclass
class Flight:
    """A forward launched and not yet read back (`ModelRunner.launch`, then `collect`): its
    batch, the greedy tokens of its rows on the device (and the draft heads' guesses), the real
    rows among them when a graph padded it (None: all), and the fp32 logits when asked."""

    batch: list[tuple[Sequence, list[int]]]
    tokens: torch.Tensor  # [rows], or [1 + n, rows] with n draft heads
    keep: list[int] | None
    logits: torch.Tensor | None


@dataclass(frozen=True)
class StepOutput:
    """What a forward gives back (`collect`): per sequence, the greedy token after each fed row;
    the fp32 logits when asked; with draft heads, per sequence and fed row the heads' guesses
    after it (None when the heads did not run: none attached, or a step too large for them)."""

    rows: list[list[int]]
    logits: torch.Tensor | None
    head_rows: list[list[tuple[int, ...]]] | None = None
    wait_s: float = 0.0  # host seconds blocked on the device-to-host copy (engine.StepTimes `wait`)


def _rows(x: torch.Tensor, keep: list[int] | None) -> torch.Tensor:
    return x if keep is None else x[torch.tensor(keep, device=x.device)]
