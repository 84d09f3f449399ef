"""Scheduler: the whole step plan, over a paged, prefix-cached KV cache (continuous batching).

`schedule()` returns one `StepPlan`, and the engine runs it (one forward over its batch, then
acceptance); `postprocess()` does the bookkeeping after. A plan is either

* a **prefill** plan: prompt chunks of the sequences that still have uncached tokens, within the
  token budget `max_batch_tokens`; or
* a **verify** plan: every running sequence feeds `[last token] + draft`. Its drafter proposes up
  to K-1 tokens (`draft_room` bounds them by the block, shorter in a crowded step, `max_tokens`
  and the context); sequences of the hybrid/draft drafters take the draft model's proposal
  instead (engine/speculative/hybrid.py); how much of each draft a crowded step verifies comes
  from the measured step cost and each sequence's acceptance rate (engine/step_cost.py), within
  the optional hard cap `verify_budget`.

A sequence's last known token is always fed by a verify step, so fresh prompts, prefix-cache hits
and recomputed (preempted) sequences all take the same path, and the first token is drafted and
verified like any other.

Admission is first come, first served, while the sequence's blocks (after sharing its cached
prefix) and a seat (`max_num_seqs`) are free. When a running sequence cannot grow, the most
recently admitted other sequence is preempted: its blocks are released (they stay prefix-cached
until evicted) and it goes back to the head of the queue to be recomputed later; a preempted
sequence is not in the plan.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from engine.block_manager import BlockTable
from engine.config import EngineConfig
from engine.kv_cache import KVCache
from engine.sequence import Sequence, Status
from engine.step_cost import StepCost, acceptance_rate, plan_drafts

# Plan ahead only while at most this many sequences run (None: any number). Each sequence's bet
# is kept where it holds and the others are drafted again after the step (`next_from_ahead`);
# bench/HISTORY.md, "The next step planned ahead" and "Planned ahead per sequence", measure it.
PLAN_AHEAD_MAX_SEQS: int | None = None

# Long verify blocks pay while a step's rows are few: at batch 1 the GPU step barely grows with
# its rows, and copied text fills a block of 64. With more sequences the rows cost: from 8 on,
# blocks of 32 beat 48 and 16 (bench/RESULTS.md, "Verify block length"). So every sequence verifies
# its whole K while the running sequences' blocks add up to FULL_BLOCK_ROWS at most, and at most
# CROWDED_BLOCK positions past that.
FULL_BLOCK_ROWS = 256
CROWDED_BLOCK = 32


def crowded_cap(blocks: list[int]) -> int | None:
    """The most positions each sequence verifies in a step whose sequences' verify blocks are
    `blocks`; None while each may verify its whole block."""
    return None if sum(blocks) <= FULL_BLOCK_ROWS else CROWDED_BLOCK


@dataclass
class StepPlan:
    """What one step runs: `batch` of (sequence, tokens to feed), prompt chunks when `prefill`,
    else `[last token] + draft` per sequence; `proposals` holds the hybrid drafter's Proposal of
    each sequence whose draft the draft model wrote or shaped (its acceptance estimates learn
    from them after the step)."""

    prefill: bool
    batch: list[tuple[Sequence, list[int]]] = field(default_factory=list)
    proposals: dict = field(default_factory=dict)  # Sequence -> engine.speculative.hybrid.Proposal
    # Where each feed starts (a plan made ahead: the cached lengths the step before will leave);
    # None = each sequence's cached length now.
    starts: list[int] | None = None

    @property
    def num_tokens(self) -> int:
        return sum(len(feed) for _, feed in self.batch)


class StopChecker:
    """A sequence's stop conditions, applied as its tokens are committed: an end-of-sequence token
    (unless `ignore_eos`), `max_tokens`, the context, and the request's stop strings (decoded with
    `tokenizer`, over a tail window: a stop string can only end in the newest tokens)."""

    def __init__(self, max_model_len: int, eos_ids: frozenset[int] = frozenset(), tokenizer=None):
        self.max_model_len, self.eos_ids, self.tokenizer = max_model_len, eos_ids, tokenizer

    def commit(self, seq: Sequence, new: list[int]) -> tuple[int, str | None]:
        """Append `new` up to the first stop condition (an end-of-sequence token before a length
        limit on the same token); how many were appended, and the finish reason."""
        p = seq.params
        eos = len(new) + 1
        if not p.ignore_eos and not self.eos_ids.isdisjoint(new):
            eos = next(i for i, t in enumerate(new) if t in self.eos_ids) + 1
        limit = max(1, min(p.max_tokens - seq.num_generated, self.max_model_len - len(seq)))
        n = min(eos, limit, len(new))
        seq.tokens.extend(new[:n])
        seq.stats.generated += n
        if n == eos:
            return n, "stop"
        if n == limit:
            return n, "length"
        return n, "stop" if p.stop and self._hit_stop_string(seq) else None

    def _hit_stop_string(self, seq: Sequence) -> bool:
        longest = max(len(s) for s in seq.params.stop)
        tail = self.tokenizer.decode(seq.output_ids[-(longest + 64) :])
        return any(s in tail for s in seq.params.stop)


class Scheduler:
    def __init__(self, kv: KVCache, cfg: EngineConfig, step_cost: StepCost | None = None, hybrid=None,
                 stop: StopChecker | None = None):
        self.blocks = kv.blocks
        self.max_num_seqs = cfg.max_num_seqs
        self.max_batch_tokens = cfg.max_batch_tokens
        self.max_model_len = cfg.max_model_len
        self.verify_budget = cfg.verify_budget or None
        self.adaptive_drafts = cfg.adaptive_drafts
        self.step_cost = step_cost or StepCost()
        self.hybrid = hybrid  # engine/speculative/hybrid.py's HybridDrafting, or None without a draft model
        self.stop = stop or StopChecker(cfg.max_model_len)
        # The target's own draft heads (no runner of their own): each step's guesses are the next draft.
        self.own_heads = hybrid is not None and hybrid.model.runner is None
        # The draft model drafts the next step beside the target's (HybridDrafting.propose_ahead); the
        # target's own heads (no runner of their own) already run inside its step.
        self.draft_ahead = hybrid is not None and hybrid.model.runner is not None and cfg.draft_ahead
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- the plan -------------------------------------------------------------------------
    def schedule(self) -> StepPlan:
        """Admit what fits, then a prefill plan if any prompt has uncached tokens, else a verify
        plan (its batch is empty when nothing runs)."""
        self.admit()
        batch = self.prefill_batch()
        if batch:
            return StepPlan(prefill=True, batch=batch)
        return self.verify_plan()

    def admit(self) -> None:
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            # Hashes are kept on the sequence, so a head that waits for room is not re-hashed
            # every step; the last token's block is never shared (its token is fed again).
            shared = []
            if self.blocks.caching:
                limit = (len(seq) - 1) // self.blocks.block_size
                if seq.score_from is not None:  # the row before the first scored token is computed here
                    limit = min(limit, (seq.score_from - 1) // self.blocks.block_size)
                shared = self.blocks.lookup(self.blocks.extend_hashes(seq.chain_hashes, seq.tokens, limit)[:limit])
            need = self.blocks.blocks_for(len(seq) + seq.verify_tokens) - len(shared)
            if need > self.blocks.free_after_sharing(shared):
                break
            self.blocks.share(shared)
            seq.block_table = BlockTable(shared + self.blocks.allocate(need))
            seq.num_published = len(shared)
            seq.num_cached = len(shared) * self.blocks.block_size
            if seq.stats.steps == 0:
                seq.stats.cached_prompt_tokens = seq.num_cached
            seq.status = Status.RUNNING
            self.running.append(self.waiting.popleft())
            if seq.scored:  # a prefill-only request whose prompt the cache held whole
                self.finish(seq, "stop")

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

    def verify_plan(self, seqs: list[Sequence] | None = None) -> StepPlan:
        """Propose, size, then grow each sequence's blocks for its verify block: the running
        sequences, or those of `seqs`."""
        seqs, cap = list(self.running if seqs is None else seqs), self.block_cap()
        rooms = [self.draft_room(seq, cap=cap) for seq in seqs]
        drafts = [seq.drafter.propose(seq.tokens, room) if seq.drafter is not None and room > 0 else []
                  for seq, room in zip(seqs, rooms)]
        proposals = self.propose_with_model(seqs, drafts, rooms)
        drafts = [proposals[seq].tokens if seq in proposals else d for seq, d in zip(seqs, drafts)]
        lengths = self.size_drafts(seqs, drafts)
        grown = []
        for seq, draft, n in zip(seqs, drafts, lengths):
            if seq.status != Status.RUNNING:
                continue  # preempted while an earlier sequence grew
            # Room for a whole verify block: CUDA graphs pad short drafts to K positions.
            if self.ensure_room(seq, len(seq) + seq.verify_tokens - 1):
                grown.append((seq, [seq.tokens[-1]] + draft[:n]))
        batch = [(seq, feed) for seq, feed in grown if seq.status == Status.RUNNING]
        return StepPlan(prefill=False, batch=batch,
                        proposals={seq: proposals[seq] for seq, _ in batch if seq in proposals})

    def block_cap(self) -> int | None:
        """The most positions a sequence verifies in this step's crowd (FULL_BLOCK_ROWS); None
        while each may verify its whole block."""
        return crowded_cap([seq.verify_tokens for seq in self.running])

    def draft_room(self, seq: Sequence, grown: int = 0, cap: int | None = None) -> int:
        """Most draft tokens `seq` may take this step -- after `grown` more tokens, for a plan made
        ahead: its block (within `cap`, `block_cap`'s), its max_tokens, the context."""
        block = min(seq.verify_tokens, cap) if cap else seq.verify_tokens
        return max(0, min(block - 1,
                          seq.params.max_tokens - seq.num_generated - grown - 1,
                          self.max_model_len - len(seq) - grown - 1))

    # ---- the next plan, made while this one runs --------------------------------------------
    def plan_ahead(self, plan: StepPlan) -> StepPlan | None:
        """The verify plan after `plan`, made while `plan` runs on the GPU, on a bet per sequence:
        it accepts its whole draft and its bonus token is the one predicted next, as in most steps
        of copied text. Once `plan`'s tokens are in, `next_from_ahead` keeps the sequences whose
        bet held and drafts the others again, so the GPU waits only for that part of the host's
        planning (none when every bet held: the plan was staged while `plan` ran). Exactness does
        not depend on the bet: a plan made ahead is verified like any other.

        Who predicts: lookup (the drafter's `lookahead`), where its bet fills the next block: the
        sequence's part of the plan is then the one `verify_plan` would make from the state it
        bets on. Otherwise, for the one running sequence of the draft model with drafting ahead
        on, the model (`HybridDrafting.propose_ahead`: it drafts beside the target's step; one
        model step per sequence would not hide behind a batch's). A sequence neither
        predicts is left out (drafted after the step). None where there is no bet at all, or more
        than PLAN_AHEAD_MAX_SEQS sequences, requests waiting (admission changes the batch), too
        few free blocks (it never preempts).
        """
        if (plan.prefill or self.waiting or len(plan.batch) != len(self.running)
                or (PLAN_AHEAD_MAX_SEQS is not None and len(plan.batch) > PLAN_AHEAD_MAX_SEQS)):
            return None
        seqs, bets, rooms, starts, proposals, cap = [], [], [], [], {}, self.block_cap()
        for seq, feed in plan.batch:
            if seq.status != Status.RUNNING:
                continue
            room = self.draft_room(seq, grown=len(feed), cap=cap)
            bet = self._lookup_bet(plan, seq, feed, room)
            if not bet and seq.model_drafts and self.draft_ahead and len(plan.batch) == 1:
                fit = self._fit(flat=True)
                step = fit[0] + fit[1] * len(feed) if fit else 0.0
                ahead = self.hybrid.propose_ahead(seq, feed[1:], room, fit, step)
                if ahead is not None:
                    bet = [ahead[0]] + ahead[1].tokens
                    proposals[seq] = ahead[1]
            if not bet:
                continue
            seqs.append(seq)
            bets.append(bet)
            rooms.append(room)
            starts.append(seq.num_cached + len(feed))
        if not seqs:
            return None
        quotes = [i for i, seq in enumerate(seqs) if seq not in proposals]
        # Lookup's bets fill the block: the draft model does not run for them.
        quoted = self.propose_with_model([seqs[i] for i in quotes], [bets[i][1:] for i in quotes],
                                         [rooms[i] for i in quotes])
        proposals.update(quoted)
        lengths = self.size_drafts(seqs, [bet[1:] for bet in bets], bet=[len(feed) - 1 for _, feed in plan.batch])
        # Room for the whole verify block (graphs pad to K), allocated only if nothing is preempted.
        need = [self.blocks.blocks_for(start + seq.verify_tokens) - len(seq.block_table)
                for seq, start in zip(seqs, starts)]
        if sum(max(0, n) for n in need) > self.blocks.num_free:
            return None
        for seq, n in zip(seqs, need):
            if n > 0:
                seq.block_table.extend(self.blocks.allocate(n))
        return StepPlan(prefill=False, batch=[(seq, bet[: n + 1]) for seq, bet, n in zip(seqs, bets, lengths)],
                        proposals=proposals, starts=starts)

    @staticmethod
    def _lookup_bet(plan: StepPlan, seq: Sequence, feed: list[int], room: int) -> list[int]:
        """Lookup's bet after `feed`: the predicted bonus token, then its next draft ([] for none,
        and for a draft-model sequence unless lookup quotes both steps: the model does not run
        then)."""
        lookahead = getattr(seq.drafter, "lookahead", None)
        quoted = seq not in plan.proposals or plan.proposals[seq].quoted
        if lookahead is None or not quoted:
            return []
        bet = lookahead(seq.tokens, feed[1:], room)
        if seq.model_drafts and len(bet) - 1 < room:
            return []
        return bet

    def next_from_ahead(self, ahead: StepPlan) -> StepPlan | None:
        """The next verify plan from `ahead` (a `plan_ahead` plan) once the step before it was
        postprocessed: `ahead` itself where every bet held (the same sequences run, none waits,
        each cached every fed token and committed the predicted bonus token); else, where some
        held, their part of it and the others drafted now (`verify_plan`), in running order;
        None where none held or requests wait (admission comes first), or a verify budget is set
        (it is shared by the whole batch)."""
        held = {seq: feed for (seq, feed), start in zip(ahead.batch, ahead.starts)
                if seq.status == Status.RUNNING and seq.num_cached == start and seq.tokens[-1] == feed[0]}
        if self.waiting or not held:
            return None
        if len(held) == len(ahead.batch) == len(self.running) and all(
                seq is run for (seq, _), run in zip(ahead.batch, self.running)):
            return ahead
        if self.verify_budget is not None:
            return None
        redo = self.verify_plan([seq for seq in self.running if seq not in held])
        fresh = dict(redo.batch)
        batch = [(seq, held[seq] if seq in held else fresh[seq]) for seq in self.running
                 if seq in held or seq in fresh]  # a preemption may have taken some
        proposals = {seq: p for seq, p in ahead.proposals.items() if seq in held} | redo.proposals
        return StepPlan(prefill=False, batch=batch, proposals={seq: proposals[seq] for seq, _ in batch
                                                                if seq in proposals})

    def propose_with_model(self, seqs: list[Sequence], drafts: list[list[int]], rooms: list[int]) -> dict:
        """The hybrid/draft drafters' proposals (engine/speculative/hybrid.py), by sequence, for the
        sequences that use the draft model; the others keep their drafter's draft."""
        idx = [i for i, seq in enumerate(seqs) if seq.model_drafts]
        if not idx or self.hybrid is None:
            return {}
        # A flat cost where the fit finds no slope (a GPU's verify step barely grows with its tokens).
        proposals = self.hybrid.propose([seqs[i] for i in idx], [drafts[i] for i in idx],
                                        [rooms[i] for i in idx], self._fit(flat=True))
        return {seqs[i]: p for i, p in zip(idx, proposals)}

    def size_drafts(self, seqs: list[Sequence], drafts: list[list[int]], bet: list[int] | None = None) -> list[int]:
        """How much of each draft to verify this step (engine/step_cost.py explains the rule); a
        plan made ahead counts the `bet` drafts of the step before as accepted."""
        full = [len(d) for d in drafts]
        fit = self._fit()
        if fit is None:
            return full if self.verify_budget is None else plan_drafts(full, [1.0] * len(full), 1.0, 0.0,
                                                                       self.verify_budget)
        bet = bet or [0] * len(seqs)
        alphas = [acceptance_rate(s.stats.accepted + n, s.stats.rejections) for s, n in zip(seqs, bet)]
        return plan_drafts(full, alphas, *fit, budget=self.verify_budget)

    def _fit(self, flat: bool = False) -> tuple[float, float] | None:
        if not self.adaptive_drafts:
            return None
        return self.step_cost.fit_or_flat() if flat else self.step_cost.fit()

    # ---- after the step -------------------------------------------------------------------
    def postprocess(self, plan: StepPlan, accepted: list[list[int]] | None = None,
                    head_rows: list | None = None) -> None:
        """Bookkeeping once `plan` ran. A prefill plan's chunks are all cached now. A verify plan's
        `accepted[i]` are the tokens its i-th sequence commits (accepted drafts, then the bonus or
        recovered token), up to a stop condition (`stop`); with the target's own draft heads,
        `head_rows` (StepOutput) holds their guesses, whose row after the bonus token is the next
        draft (`Sequence.head_draft`)."""
        if plan.prefill:
            for seq, feed in plan.batch:
                seq.num_cached += len(feed)
                self.publish_blocks(seq)
                if seq.scored:
                    self.finish(seq, "stop")
            return
        for i, ((seq, feed), new) in enumerate(zip(plan.batch, accepted)):
            if self.own_heads:
                seq.head_draft = list(head_rows[i][len(new) - 1]) if head_rows and new else []
            if seq.is_finished:
                continue  # cancelled while its step ran
            # The cache holds [last token] + the accepted drafts; the rejected tail is dropped by
            # this length change alone (its rows are overwritten by the next step).
            seq.num_cached = len(seq) + len(new) - 1
            if seq.stats.t_first is None:
                seq.stats.t_first = time.perf_counter()
            model_drafted = model_accepted = 0
            if seq in plan.proposals:
                model_drafted, model_accepted = self.hybrid.observe(plan.proposals[seq], len(feed) - 1, new)
            committed, reason = self.stop.commit(seq, new)
            if reason is not None:
                self.finish(seq, reason)
            seq.stats.record_step(drafted=len(feed) - 1, accepted=len(new) - 1, committed=committed,
                                  model_drafted=model_drafted, model_accepted=model_accepted)
            if not seq.is_finished:
                self.publish_blocks(seq)

    # ---- growth and preemption ----------------------------------------------------------
    def ensure_room(self, seq: Sequence, num_tokens: int) -> bool:
        """Blocks for `num_tokens` positions of `seq`, preempting others if needed.

        False if `seq` cannot have them: with nothing else left to take from, the whole cache is
        too small for it, so it ends at this length (finish reason "length", as at the context
        limit); preempted, it could never be admitted again.
        """
        need = self.blocks.blocks_for(num_tokens) - len(seq.block_table)
        while need > self.blocks.num_free:
            victim = next((s for s in reversed(self.running) if s is not seq), None)
            if victim is None:
                self.finish(seq, "length")
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

    def finish(self, seq: Sequence, reason: str) -> None:
        """End `seq` with `reason`: free its seat, KV blocks and draft-model cache."""
        if seq.is_finished:
            return
        seq.status = Status.FINISHED
        seq.finish_reason = reason
        seq.stats.t_end = time.perf_counter()
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self._release(seq)
        if self.hybrid is not None:
            self.hybrid.model.release(seq.id)

    def _release(self, seq: Sequence) -> None:
        self.blocks.release(seq.block_table)
        seq.block_table = BlockTable()
        seq.num_published = 0

    # ---- prefix caching -------------------------------------------------------------------
    def publish_blocks(self, seq: Sequence) -> None:
        """Register the sequence's newly completed blocks (every position committed)."""
        self.blocks.publish(seq, seq.tokens, seq.num_cached)
