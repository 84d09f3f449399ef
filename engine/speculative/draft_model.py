"""The draft model: a small model of the target's tokenizer proposing tokens autoregressively.

It runs in the engine's process on its own ModelRunner: its own weights, paged KV cache (prefix
cached, so RAG questions over one document share the draft's cache too) and CUDA graphs. Each
target sequence the draft model works for has a `DraftSequence` here: its block table and the
tokens whose K/V the draft cache holds.

`propose` serves a whole verify step at once. Each job is (sequence, lead, n): catch up on what
the target committed since the last call (on first use the whole prompt), feed `lead` (another
drafter's tokens, which the draft continues) and decode n tokens greedily. All but the last
verify block of each catch-up is fed ahead (`_feed_ahead`): a long one (a prompt, a long quote)
as prefill chunks, a short one a verify block at a time for every job together, so that on a GPU
it replays CUDA graphs instead of an eager forward (whose launches alone cost ten graph
replays). Then one forward covers every job's rest and lead, and n - 1 steps of one token per
job follow, each token fed back on the device (ModelRunner.decode_greedy: on a GPU n - 1 replays
of one captured step back to back, read back once; every job decodes the largest n and keeps its
own). The last drafted token is never fed: if the target accepts it, the next catch-up feeds it.

The costs the hybrid's rule prices (engine/speculative/hybrid.py) are measured here: `cost` fits the
seconds of a drafting forward (every feed within a verify block) against the tokens it feeds,
`chain_cost` the seconds of a chained step (its GPU time on CUDA) against the rows,
`prefill_cost` the seconds of a long catch-up's forward (eager, a prefill chunk) against its
tokens, so its fixed cost (on a GPU the Python launches of an eager forward, ~10 graph replays)
is priced too; `draft_seconds` prices d tokens, `catch_up_seconds` what a step's catch-ups will
cost before it runs them.
A forward without logits is timed to the end of its GPU work (a synchronize on CUDA): timing
only its launches priced a 2k-token catch-up at a few launches, and a fit without slope at none.

Rollback is a length change, as for the target: the next call keeps the longest prefix of what the
draft cache was fed that the job's context (the committed tokens, then the lead) holds, and
overwrites the rest.

On CUDA the model runs on its own stream, so that it can draft the next step while the target
verifies this one (`HybridDrafting.propose_ahead`, engine/speculative/hybrid.py): its host reads wait for
its own stream only. Forwards run ahead (`ahead=True`) share the GPU with the target's step, so
their seconds are not taken into the fits.
"""

from __future__ import annotations

import contextlib
import math
import time

import torch

from engine.block_manager import BlockTable
from engine.config import EngineConfig
from engine.runner import ModelRunner
from engine.step_cost import StepCost
from engine.tokenizer import TOKENIZER_PROBE

# A catch-up longer than this many verify blocks is prefilled (eager chunks); a shorter one is fed
# a verify block at a time, through CUDA graphs where the runner has them.
GRAPH_CATCH_UP_BLOCKS = 8



class DraftSequence:
    """The draft cache's view of one target sequence (what ModelRunner.prepare reads)."""

    needs_prefill = False  # feeds are passed explicitly; a feed within one verify block may replay a graph

    def __init__(self):
        self.tokens: list[int] = []  # fed to the draft model; positions < num_cached hold their K/V
        self.num_cached = 0
        self.block_table = BlockTable()
        self.chain_hashes: list[bytes] = []
        self.num_published = 0
        self.synced = 0  # leading fed tokens known to be committed ones (those never change)

    def common_prefix(self, context: list[int]) -> int:
        """How many leading fed tokens `context` holds (what `sync` would keep), read-only."""
        n = min(self.num_cached, len(context))
        i = min(self.synced, n)
        while i < n and self.tokens[i] == context[i]:
            i += 1
        return i

    def sync(self, context: list[int], committed: int) -> None:
        """Keep the longest prefix of the fed tokens that `context` holds (the rollback); its first
        `committed` tokens are the target's committed ones, which never change."""
        i = self.common_prefix(context)
        self.num_cached = i
        self.synced = min(i, committed)
        del self.tokens[i:]


class DraftModel:
    """The draft model and its per-sequence caches; see the module docstring."""

    continues_lead = True  # it can continue another drafter's tokens (it is fed them first)
    max_tokens = None  # most tokens it can write a step: any (HybridDrafting's D bounds them)

    def __init__(self, cfg: EngineConfig, name: str, target_tokenizer, target_vocab: int):
        # Its own cache for as many sequences as the target runs; int4 has no graphs, so the
        # draft keeps a plain cache of the model's dtype.
        dcfg = cfg.model_copy(update={"model": name, "int8_head": False,
                                      "kv_dtype": "auto" if cfg.kv_dtype == "int4" else cfg.kv_dtype})
        self.runner = ModelRunner(dcfg)
        self.cfg = self.runner.cfg
        if self.runner.tokenizer.encode(TOKENIZER_PROBE) != target_tokenizer.encode(TOKENIZER_PROBE):
            raise ValueError(f"draft model {name!r} has another tokenizer than the target: a draft model "
                             "must share the target's tokenizer (qwen2.5-coder-0.5b drafts for qwen2.5-coder-1.5b)")
        # Only ids both models know may be proposed (a padded vocabulary may be larger).
        self.runner.vocab_limit = min(self.runner.model_config.vocab_size, target_vocab)
        self.blocks = self.runner.kv.blocks
        cuda = self.runner.device.type == "cuda"
        self.stream = torch.cuda.Stream(self.runner.device) if cuda else None
        self.states: dict[str, DraftSequence] = {}
        self.reset_costs()
        self.caught_up = 0  # committed tokens read to catch up, all calls (HybridStats counts its own)

    def reset_costs(self) -> None:
        """Forget the measured costs. `cost`: seconds per drafting forward against the tokens it
        feeds, priced (flat) from its second sample, as is `chain_cost`, seconds per chained step
        against the rows; `prefill_cost`: seconds per long catch-up forward against its tokens,
        priced (flat) from the first. Few samples suffice: until `cost` and `prefill_cost` are
        priced the hybrid's rule reads for no sequence it is behind on but through probes, one
        sample each (engine/speculative/hybrid.py); a fit follows once the sizes differ."""
        self.cost = StepCost(min_samples=2)
        self.prefill_cost = StepCost(min_samples=1)
        self.chain_cost = StepCost(min_samples=2)

    def release(self, seq_id: str) -> None:
        st = self.states.pop(seq_id, None)
        if st is not None:
            self.blocks.release(st.block_table)

    def _state(self, seq, context: list[int]) -> DraftSequence:
        st = self.states.get(seq.id)
        if st is None:
            st = self.states[seq.id] = DraftSequence()
            shared, hashes = self.blocks.match_prefix(seq.tokens)
            st.block_table, st.chain_hashes = BlockTable(shared), hashes
            st.num_published = len(shared)
            st.num_cached = len(shared) * self.blocks.block_size
            st.tokens = list(seq.tokens[: st.num_cached])
            st.synced = st.num_cached
        st.sync(context, len(seq.tokens))
        return st

    def _room(self, st: DraftSequence, positions: int, keep: set[str]) -> bool:
        """Blocks for `positions` positions; frees the caches of sequences not in `keep` if short."""
        need = self.blocks.blocks_for(positions) - len(st.block_table)
        if need > self.blocks.num_free:
            for sid in [s for s in self.states if s not in keep]:
                self.release(sid)
                if need <= self.blocks.num_free:
                    break
        if need > self.blocks.num_free:
            return False
        if need > 0:
            st.block_table.extend(self.blocks.allocate(need))
        return True

    def _feed(self, batch: list[tuple[DraftSequence, list[int]]], observe: bool = True) -> None:
        """Feed each (state, tokens) pair without logits: a catch-up ahead of the drafting forward."""
        t = time.perf_counter()
        self.runner.forward(batch, logits=False)
        if self.stream is not None:  # its seconds on the GPU too, not only the launches
            self.stream.synchronize()
        if observe:
            self._observe_first(batch, time.perf_counter() - t)
        for st, feed in batch:
            st.tokens.extend(feed)
            st.num_cached += len(feed)

    def _observe_first(self, batch, seconds: float) -> None:
        fed = sum(len(f) for _, f in batch)
        short = all(len(f) <= self.cfg.verify_tokens for _, f in batch)
        (self.cost if short else self.prefill_cost).observe(fed, seconds)

    def _draft(self, batch: list[tuple[DraftSequence, list[int]]], n: int, observe: bool) -> list[list[int]]:
        """Feed each (state, tokens) pair and decode n greedy tokens after it, chained on the
        device (ModelRunner.decode_greedy); the first n - 1 are fed (their K/V written)."""
        t = time.perf_counter()
        tokens, chained = self.runner.decode_greedy(batch, n)
        if observe:
            self._observe_first(batch, time.perf_counter() - t - (n - 1) * chained)
            if n > 1:
                self.chain_cost.observe(len(batch), chained)
        for (st, feed), out in zip(batch, tokens):
            st.tokens.extend(feed + out[:-1])
            st.num_cached += len(feed) + n - 1
        return tokens

    def draft_seconds(self, d: int, rows: int) -> float | None:
        """Priced seconds of d draft tokens for `rows` sequences the model is in sync with: the
        drafting forward at its fit, the d - 1 chained steps at theirs (at the forward's while
        not measured); None while the forward is not priced."""
        fit = self.cost.fit_or_flat()
        if fit is None:
            return None
        first = fit[0] + fit[1] * rows
        chained = self.chain_cost.fit_or_flat()
        return first + (d - 1) * (chained[0] + chained[1] * rows if chained else first)

    def _feed_ahead(self, feeds: list[list], observe: bool) -> None:
        """Feed each [state, feed] pair's tokens but its last verify block (no logits), so the
        drafting forward fits a CUDA graph; see the module docstring. Without graphs only what
        exceeds a prefill chunk is fed ahead (one forward takes the rest)."""
        K, chunk = self.cfg.verify_tokens, self.cfg.max_batch_tokens
        graphs = self.runner.graphs is not None
        for pair in feeds:
            st, feed = pair
            keep = K if graphs else chunk
            if len(feed) > GRAPH_CATCH_UP_BLOCKS * K or not graphs:
                while len(feed) > keep:
                    n = min(chunk, len(feed) - keep)
                    self._feed([(st, feed[:n])], observe)
                    feed = feed[n:]
                pair[1] = feed
        while graphs and (ahead := [pair for pair in feeds if len(pair[1]) > K]):
            self._feed([(st, feed[:K]) for st, feed in ahead], observe)
            for pair in ahead:
                pair[1] = pair[1][K:]

    def lag(self, seq, lead: int) -> int:
        """Tokens of `seq` (and `lead` more) the model must read before its drafting forward: 0 for
        a sequence it is in sync with (what it has not read fits that forward's verify block)."""
        st = self.states.get(seq.id)
        return max(0, len(seq.tokens) + lead - (st.common_prefix(seq.tokens) if st else 0) - self.cfg.verify_tokens)

    def catch_up_seconds(self, jobs: list[tuple[object, int]]) -> float:
        """Estimated seconds `_feed_ahead` will take for these (sequence, lead length) jobs. With
        CUDA graphs: short catch-ups at the drafting forward's fitted cost a verify block at a time
        (all jobs together), long ones at the prefill fit, one eager forward per chunk (flat while
        the prefills seen show no slope). Without graphs a catch-up rides in the drafting forward,
        so it costs its tokens at the fitted slope, plus a forward per chunk past the first.
        Infinite while a catch-up it needs has no measured price: the hybrid's rule never pays
        an unpriced one, only a probe does (engine/speculative/hybrid.py)."""
        K, chunk = self.cfg.verify_tokens, self.cfg.max_batch_tokens
        fit, prefill = self.cost.fit_or_flat(), self.prefill_cost.fit_or_flat()
        slope = prefill[1] if prefill and prefill[1] else fit[1] if fit else None  # a flat prefill has none
        blocks = tokens = long_seconds = 0.0
        for seq, lead in jobs:
            lag = self.lag(seq, lead)
            if lag <= 0:
                continue
            if self.runner.graphs is None:
                if slope is None:
                    return math.inf
                long_seconds += lag * slope + ((-(-(lag + K) // chunk) - 1) * prefill[0] if prefill else 0.0)
            elif lag > (GRAPH_CATCH_UP_BLOCKS - 1) * K:
                if prefill is None:
                    return math.inf
                long_seconds += -(-lag // chunk) * prefill[0] + lag * prefill[1]
            else:
                blocks, tokens = max(blocks, -(-lag // K)), tokens + lag
        if blocks and fit is None:
            return math.inf
        return (blocks * fit[0] + tokens * fit[1] if blocks else 0.0) + long_seconds

    def propose(self, jobs: list[tuple[object, list[int], int]], ahead: bool = False) -> list[list[int]]:
        """For each (sequence, lead, n): n greedy tokens continuing `sequence.tokens + lead` ([] for
        a sequence the draft cache has no room for). `ahead`: while the target's step runs (the
        lead is the draft it verifies), its forwards not priced."""
        with torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
            return self._propose(jobs, observe=not ahead)

    @torch.inference_mode()
    def _propose(self, jobs: list[tuple[object, list[int], int]], observe: bool) -> list[list[int]]:
        keep = {seq.id for seq, _, _ in jobs}
        out: list[list[int]] = [[] for _ in jobs]
        n = max((n for _, _, n in jobs), default=0)  # every row decodes as many; each job keeps its own
        live, feeds = [], []
        for i, (seq, lead, want) in enumerate(jobs):
            if want <= 0:
                continue
            context = seq.tokens + list(lead)
            st = self._state(seq, context)
            read = max(0, len(seq.tokens) - st.num_cached)
            feed = context[st.num_cached :]
            # Graphs pad a feed to the verify block, and decoding writes n - 1 more positions.
            if not feed or not self._room(st, st.num_cached + len(feed) + n + self.cfg.verify_tokens, keep):
                continue
            live.append(i)
            feeds.append([st, feed])
            self.caught_up += read
        if not live:
            return out
        self._feed_ahead(feeds, observe)
        for i, tokens in zip(live, self._draft(feeds, n, observe)):
            out[i] = tokens[: jobs[i][2]]
        for seq, _, _ in jobs:  # the committed tokens fed so far, for sharing
            if (st := self.states.get(seq.id)) is not None:
                self.blocks.publish(st, seq.tokens, min(st.num_cached, len(seq.tokens)))
        return out

    def capacity(self) -> int:
        """The longest prompt the draft cache can ever hold (two verify blocks and 64 tokens of
        room beside it)."""
        return self.blocks.num_blocks * self.blocks.block_size - 2 * self.cfg.verify_tokens - 64
