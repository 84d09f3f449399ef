"""LLMEngine: requests in, token streams out, one speculative step at a time.

A step has four phases, named as in the code:
  * `schedule` — admit waiting requests while KV blocks allow, pick what runs;
  * `propose`  — each running sequence's drafter proposes up to K-1 tokens from its sources;
  * `forward`  — one model pass over every sequence's `[last token] + draft` (or prompt chunk);
  * `accept`   — verify the drafts against the target (exact greedy or rejection sampling),
                 commit the accepted prefix plus one bonus/recovered token, roll back the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

import torch

from engine.config import EngineConfig
from engine.kv_cache import OutOfBlocksError
from engine.runner import ModelRunner
from engine.sampling import SamplingParams, sample, target_probs
from engine.sequence import Request, Sequence, Status
from engine.spec.drafters import DRAFTER_KINDS, DraftConfig, make_drafter
from engine.spec.verify import parse_output, verify_greedy, verify_sampled
from engine.tokenizer import IncrementalDecoder


class RequestError(ValueError):
    """A request the engine cannot serve as given (too long, empty prompt, ...)."""


@dataclass
class Event:
    """One increment of a request's stream."""

    seq_id: str
    token_ids: list[int]
    text: str
    finished: bool
    finish_reason: str | None
    stats: dict


class LLMEngine:
    def __init__(self, cfg: EngineConfig | None = None, **overrides):
        self.cfg = cfg or EngineConfig.from_env(**overrides)
        self.runner = ModelRunner(self.cfg)
        self.tokenizer = self.runner.tokenizer
        self.kv = self.runner.kv
        self.eos_ids = set(self.tokenizer.eos_ids) | set(self.runner.model_config.eos_token_ids)
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.draft_config = DraftConfig(min_match=self.cfg.min_match, max_match=self.cfg.max_match,
                                        pld_num_tokens=max(1, self.cfg.verify_tokens - 1))

    # ---- requests -------------------------------------------------------------------------
    def check_request(self, request: Request) -> None:
        """Raise RequestError if `request` can never run on this engine."""
        n = len(request.prompt_ids)
        if n == 0:
            raise RequestError("empty prompt")
        if n + 1 > self.cfg.max_model_len:
            raise RequestError(f"prompt is {n} tokens; the context limit is {self.cfg.max_model_len}")
        if self.kv.blocks_for(n + self.cfg.verify_tokens) > self.kv.num_blocks:
            raise RequestError(f"prompt of {n} tokens does not fit the KV cache ({self.kv.num_blocks * self.kv.block_size} tokens)")
        vocab = self.runner.model_config.vocab_size
        if any(not 0 <= t < vocab for t in request.prompt_ids):
            raise RequestError(f"prompt has token ids outside the vocabulary [0, {vocab})")
        k = request.verify_tokens or self.cfg.verify_tokens
        if not 1 <= k <= 64:
            raise RequestError(f"verify_tokens must be in [1, 64], got {k}")
        if (request.drafter or self.cfg.drafter) not in DRAFTER_KINDS:
            raise RequestError(f"unknown drafter {request.drafter!r}; choose one of {', '.join(DRAFTER_KINDS)}")

    def add_request(self, request: Request) -> Sequence:
        self.check_request(request)
        n = len(request.prompt_ids)
        kind = request.drafter or self.cfg.drafter
        k = request.verify_tokens or self.cfg.verify_tokens
        sources = dict(request.sources)
        drafter = make_drafter(kind, sources, n, self.draft_config) if k > 1 else None
        generator = None
        if not request.params.greedy:
            generator = torch.Generator(device=self.runner.device)
            generator.manual_seed(request.params.seed if request.params.seed is not None else torch.seed())
        seq = Sequence(request, drafter, k, generator)
        self.waiting.append(seq)
        return seq

    def cancel(self, seq: Sequence) -> None:
        if seq in self.waiting:
            self.waiting.remove(seq)
        self._finish(seq, "cancelled")

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def generate(self, request: Request) -> Iterator[Event]:
        """Submit `request` and drive the engine until it finishes, yielding its stream."""
        seq = self.add_request(request)
        decoder = IncrementalDecoder(self.tokenizer)
        sent = seq.prompt_len
        try:
            while not seq.is_finished:
                self.step()
                new = seq.tokens[sent:]
                sent = len(seq.tokens)
                visible = [t for t in new if t not in self.eos_ids]
                text = decoder.push(visible) if visible else ""
                if new or seq.is_finished:
                    yield Event(seq.id, new, text, seq.is_finished, seq.finish_reason, seq.stats.as_dict())
        finally:
            if not seq.is_finished:
                self.cancel(seq)

    # ---- one step ---------------------------------------------------------------------------
    def step(self) -> list[Sequence]:
        """Run one engine step; return the sequences that received tokens."""
        self.schedule()
        prefills = [s for s in self.running if s.needs_prefill]
        if prefills:
            return self._prefill_step(prefills)
        if self.running:
            return self._verify_step(list(self.running))
        return []

    def schedule(self) -> None:
        while self.waiting and len(self.running) < self.cfg.max_num_seqs:
            seq = self.waiting[0]
            need = self.kv.blocks_for(len(seq) + seq.verify_tokens)
            if need > self.kv.allocator.num_free:
                break
            seq.block_table = self.kv.allocator.allocate(need)
            seq.status = Status.RUNNING
            self.running.append(self.waiting.pop(0))

    def _prefill_step(self, seqs: list[Sequence]) -> list[Sequence]:
        budget, batch = self.cfg.max_batch_tokens, []
        for seq in seqs:
            if budget <= 0:
                break
            feed = seq.tokens[seq.num_cached : seq.num_cached + budget]
            batch.append((seq, feed))
            budget -= len(feed)
        logits = self.runner.forward(batch, all_logits=False)  # [B, V]
        done = []
        for (seq, feed), row in zip(batch, logits):
            seq.num_cached += len(feed)
            if seq.num_cached < len(seq):
                continue  # more prompt chunks to go
            token = self._sample_one(seq, row)
            seq.stats.t_first = time.perf_counter()
            self._commit(seq, [token])
            done.append(seq)
        return done

    def _verify_step(self, seqs: list[Sequence]) -> list[Sequence]:
        batch = []
        for seq in seqs:
            draft = self.propose(seq)
            # Room for a whole verify block: CUDA graphs pad short drafts to K positions.
            self._ensure_blocks(seq, len(seq) + seq.verify_tokens - 1)
            batch.append((seq, [seq.tokens[-1]] + draft))
        logits = self.runner.forward(batch, all_logits=True)  # [sum(K_i), V]
        start = 0
        for seq, feed in batch:
            rows = logits[start : start + len(feed)]
            start += len(feed)
            new = self.accept(seq, rows, feed[1:])
            committed = self._commit(seq, new)
            # The cache holds [last token] + the accepted drafts; the rejected tail is dropped by
            # this length change alone (its rows are overwritten by the next step).
            seq.num_cached = len(seq) - 1
            seq.stats.record_step(drafted=len(feed) - 1, accepted=len(new) - 1, committed=committed)
        return seqs

    def propose(self, seq: Sequence) -> list[int]:
        if seq.drafter is None:
            return []
        room = min(seq.verify_tokens - 1,
                   seq.params.max_tokens - seq.num_generated - 1,
                   self.cfg.max_model_len - len(seq) - 1)
        return seq.drafter.propose(seq.tokens, room) if room > 0 else []

    def accept(self, seq: Sequence, logits: torch.Tensor, draft: list[int]) -> list[int]:
        """Verify `draft` against target logits [len(draft)+1, V]; return the tokens to commit."""
        draft_t = torch.tensor([draft], dtype=torch.long, device=logits.device).reshape(1, len(draft))
        if seq.params.greedy and self.cfg.greedy_fast_path:
            out = verify_greedy(logits[None], draft_t)
        else:
            probs = target_probs(logits, seq.params)
            out = verify_sampled(probs[None], draft_t, seq.generator)
        return parse_output(out)[0]

    # ---- helpers ----------------------------------------------------------------------------
    def _sample_one(self, seq: Sequence, logits: torch.Tensor) -> int:
        if seq.params.greedy:
            return int(logits.argmax())
        return int(sample(target_probs(logits[None], seq.params), seq.generator)[0])

    def _ensure_blocks(self, seq: Sequence, num_tokens: int) -> None:
        need = self.kv.blocks_for(num_tokens) - len(seq.block_table)
        if need > 0:
            if need > self.kv.allocator.num_free:
                # TODO(issue 5): preempt a sequence instead of failing this one.
                raise OutOfBlocksError(f"KV cache full while extending {seq.id}")
            seq.block_table.extend(self.kv.allocator.allocate(need))

    def _commit(self, seq: Sequence, new: list[int]) -> int:
        """Append tokens until a stop condition; return how many were committed."""
        p = seq.params
        n = 0
        for t in new:
            seq.tokens.append(t)
            seq.stats.generated += 1
            n += 1
            if t in self.eos_ids and not p.ignore_eos:
                self._finish(seq, "stop")
                break
            if seq.num_generated >= p.max_tokens or len(seq) >= self.cfg.max_model_len:
                self._finish(seq, "length")
                break
        if not seq.is_finished and p.stop and self._hit_stop_string(seq):
            self._finish(seq, "stop")
        return n

    def _hit_stop_string(self, seq: Sequence) -> bool:
        longest = max(len(s) for s in seq.params.stop)
        # Decode only a tail window: a stop string can only end in the newest tokens.
        tail_ids = seq.output_ids[-(longest + 64) :]
        tail = self.tokenizer.decode(tail_ids)
        return any(s in tail for s in seq.params.stop)

    def _finish(self, seq: Sequence, reason: str) -> None:
        if seq.is_finished:
            return
        seq.status = Status.FINISHED
        seq.finish_reason = reason
        seq.stats.t_end = time.perf_counter()
        if seq in self.running:
            self.running.remove(seq)
        if seq.block_table:
            self.kv.allocator.free(seq.block_table)
            seq.block_table = []
