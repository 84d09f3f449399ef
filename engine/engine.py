"""LLMEngine: requests in, token streams out, one speculative step at a time.

A step has four phases, named as in the code (nano-vllm's shape):
  * `schedule`    — the scheduler's `StepPlan` (engine/scheduler.py): it admits waiting requests
                    while KV blocks allow, picks prefill or verify, has each sequence's drafter
                    (or the draft model) propose up to K-1 tokens, sizes the drafts from the step
                    cost, and grows blocks, preempting when they run out;
  * `forward`     — one model pass over the plan's batch: prompt chunks, or every sequence's
                    `[last token] + draft` with one device-to-host copy (the runner's
                    `StepOutput`: greedy tokens, logits when sampled, the draft heads' guesses);
  * `accept`      — verify the drafts against the target (exact greedy or rejection sampling):
                    the accepted prefix plus one bonus/recovered token;
  * `postprocess` — the scheduler's bookkeeping: commit up to the stop conditions
                    (`StopChecker`), roll the KV cache back over the rejected tail, record stats
                    and acceptance estimates, publish completed blocks to the prefix cache.
"""

from __future__ import annotations

import atexit
import functools
import gc
import secrets
import time
from dataclasses import dataclass, fields
from typing import Iterator

import torch

from engine.config import MAX_VERIFY_TOKENS, EngineConfig
from engine.runner import Flight, ModelRunner, StepOutput
from engine.scheduler import Scheduler, StepPlan, StopChecker
from engine.sampling import position_noise, target_probs
from engine.sequence import Sequence
from engine.speculative.choose import load_draft_model
from engine.speculative.drafters import DRAFTER_KINDS, MODEL_DRAFTERS, DraftConfig, make_drafter
from engine.speculative.verify import accept_greedy, parse_output, verify_coupled, verify_sampled
from engine.step_cost import StepCost
from engine.tokenizer import IncrementalDecoder
from engine.types import Event, Request, RequestError, check_prompt_length, check_score_from


class EventCursor:
    """A sequence's progress as Events: the tokens committed since the last call and their text
    (end-of-sequence tokens are sent as ids but never decoded)."""

    def __init__(self, seq: Sequence, tokenizer, eos_ids: set[int]):
        self.seq, self.eos_ids, self.sent = seq, eos_ids, seq.prompt_len
        self.decoder = IncrementalDecoder(tokenizer)

    def next(self) -> Event | None:
        """The next event, or None when nothing happened since the last one."""
        seq = self.seq
        new = seq.tokens[self.sent :]
        if not new and not seq.is_finished:
            return None
        self.sent = len(seq.tokens)
        visible = [t for t in new if t not in self.eos_ids]
        text = self.decoder.push(visible) if visible else ""
        logprob = seq.logprob if seq.score_from is not None and seq.finish_reason == "stop" else None
        return Event(seq.id, new, text, seq.is_finished, seq.finish_reason, seq.stats.snapshot(), logprob=logprob)


@dataclass
class StepTimes:
    """Host wall seconds of the engine's verify steps by phase (prefill steps are not counted):
    `schedule` makes the plan (or the next one ahead, while the GPU runs this one), `redraft`
    turns a plan made ahead into the next step's once the tokens are in (`next_from_ahead`: the
    sequences whose bet failed drafted again), `launch` stages the inputs and starts the graph or
    eager forward, `collect` reads the greedy tokens back, `wait` being its part blocked on the
    GPU (StepOutput.wait_s), `accept` verifies, `postprocess` commits. `ahead` counts the steps
    launched from a plan made ahead. The GPU idles through the host work between `collect` and
    the next launch: without a plan ahead that is everything but `wait`; with one, `accept`,
    `postprocess`, `redraft` and the launch. Prefill steps are counted apart: how many, and their
    wall seconds in all."""

    steps: int = 0
    ahead: int = 0
    schedule: float = 0.0
    redraft: float = 0.0
    launch: float = 0.0
    collect: float = 0.0
    wait: float = 0.0
    accept: float = 0.0
    postprocess: float = 0.0
    prefills: int = 0
    prefill: float = 0.0

    def start(self) -> "StepTimes":
        self._mark = time.perf_counter()
        return self

    def lap(self, phase: str, value=None):
        """Add the time since the last mark to `phase` and mark now; returns `value` (so a phase
        reads `out = times.lap("collect", work())`)."""
        now = time.perf_counter()
        setattr(self, phase, getattr(self, phase) + now - self._mark)
        self._mark = now
        return value

    def per_step_us(self) -> dict[str, float]:
        """µs per verify step by phase."""
        n = max(self.steps, 1)
        return {f.name: getattr(self, f.name) / n * 1e6 for f in fields(self) if f.type == "float" and f.name != "prefill"}

    def cells(self) -> dict[str, str]:
        """The benches' table cells: the share of steps planned ahead, µs per verify step by phase,
        then the prefill steps and their seconds."""
        return {"ahead": f"{self.ahead / max(self.steps, 1):.0%}",
                **{k: f"{v:.0f}" for k, v in self.per_step_us().items()},
                "prefill steps": str(self.prefills), "prefill s": f"{self.prefill:.3f}"}


@dataclass
class Launched:
    """A verify step launched and not yet collected: its plan, its forward, when it started."""

    plan: StepPlan
    forward: Flight
    t_launch: float


def freeze_loaded_objects() -> None:
    """Take what the process has loaded so far (torch, the model, the tokenizer, grammars: ~300k
    objects) out of the cyclic garbage collector's reach, once per process. A full collection
    otherwise walks all of it, and the objects a busy engine makes per step trigger one every few
    hundred steps, a cost every verify step shares (bench/HISTORY.md, "Draft heads, round two").
    vLLM freezes after its start-up too. Unfrozen at exit, so that the final collection still sees them (extension
    modules count what it frees)."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()
        atexit.register(gc.unfreeze)


class LLMEngine:
    def __init__(self, cfg: EngineConfig | None = None, **overrides):
        self.runner = ModelRunner(cfg or EngineConfig.from_env(**overrides))
        self.cfg = self.runner.cfg  # max_model_len resolved against the model's context
        self.tokenizer = self.runner.tokenizer
        self.kv = self.runner.kv
        self.eos_ids = set(self.tokenizer.eos_ids) | set(self.runner.model_config.eos_token_ids)
        self.step_cost = StepCost()
        self.step_times = StepTimes()
        self.draft_config = DraftConfig(min_match=self.cfg.min_match, max_match=self.cfg.max_match,
                                        pld_num_tokens=max(1, self.cfg.verify_tokens - 1))
        self.hybrid = load_draft_model(self.cfg, self.runner, self.tokenizer)
        stop = StopChecker(self.cfg.max_model_len, frozenset(self.eos_ids), self.tokenizer)
        self.scheduler = Scheduler(self.kv, self.cfg, self.step_cost, self.hybrid, stop)
        self._ahead: Launched | None = None  # a verify step launched ahead, collected by the next step()
        freeze_loaded_objects()  # the engine is freed by reference counting alone (no cycles), frozen or not

    # ---- requests -------------------------------------------------------------------------
    def warmup(self, max_context: int, batch_sizes: list[int] = (1,)) -> int:
        """Capture the CUDA graphs these batch sizes need up to `max_context` tokens and compile
        the prefill's kernel variants (ModelRunner.warm_prefill), the draft model's too, with its
        DecodeChains (no-op on CPU). Returns how many graphs there are."""
        draft = self.hybrid.model.runner if self.hybrid else None  # None for the target's own heads
        runners = [self.runner] + ([draft] if draft else [])
        for r in runners:
            r.warm_prefill(max_context)
        return sum(r.graphs.capture(list(batch_sizes), min(max_context, self.cfg.max_model_len), chains=r is not self.runner)
                   for r in runners if r.graphs)

    def reset_estimates(self) -> None:
        """Forget the measured step cost and the hybrid drafter's acceptance estimates (benches
        that compare configurations on one engine start each one cold)."""
        self.step_cost.reset()
        if self.hybrid is not None:
            self.hybrid.reset()

    def check_request(self, request: Request) -> None:
        """Raise RequestError if `request` can never run on this engine."""
        self.limits.check(request)

    @functools.cached_property
    def limits(self) -> "RequestLimits":
        draft = None if self.hybrid is None else self.hybrid.model.capacity()
        return RequestLimits(self.cfg.max_model_len, self.kv.allocator.capacity * self.kv.block_size,
                             self.cfg.verify_tokens, self.runner.model_config.vocab_size, self.cfg.drafter,
                             self.hybrid is not None, draft)

    def add_request(self, request: Request) -> Sequence:
        self.check_request(request)
        n = len(request.prompt_ids)
        kind = request.drafter or self.cfg.drafter
        k = request.verify_tokens or self.cfg.verify_tokens
        sources = dict(request.sources)
        # A score request never drafts; the room its verify block reserves is what a short
        # prefill's padding writes into (ModelRunner._graph_prefill).
        drafter = make_drafter(kind, sources, n, self.draft_config) if k > 1 and request.score_from is None else None
        generator, seed = None, request.params.seed
        if seed is None:
            seed = secrets.randbits(62)
        if not request.params.greedy:
            generator = torch.Generator(device=self.runner.device)
            generator.manual_seed(seed)
        seq = Sequence(request, drafter, k, generator)
        seq.seed = seed
        seq.model_drafts = kind in MODEL_DRAFTERS and k > 1
        seq.lookup_fills = kind == "hybrid"
        self.scheduler.add(seq)
        return seq

    def cancel(self, seq: Sequence) -> None:
        self.scheduler.finish(seq, "cancelled")

    def has_work(self) -> bool:
        return self.scheduler.has_work()  # a step in flight runs sequences that are still running

    @property
    def waiting(self):
        return self.scheduler.waiting

    @property
    def running(self):
        return self.scheduler.running

    def generate(self, request: Request) -> Iterator[Event]:
        """Submit `request` and drive the engine until it finishes, yielding its stream."""
        seq = self.add_request(request)
        events = EventCursor(seq, self.tokenizer, self.eos_ids)
        try:
            while not seq.is_finished:
                self.step()
                if (event := events.next()) is not None:
                    yield event
        finally:
            if not seq.is_finished:
                self.cancel(seq)

    # ---- one step ---------------------------------------------------------------------------
    def step(self) -> None:
        """One engine step: a prefill step, or a verify step -- launch, accept, commit.

        A verify step's successor is planned while it runs (`Scheduler.plan_ahead`) and, where its
        bets hold, launched before this call returns (`Scheduler.next_from_ahead`: the sequences
        whose bet failed drafted again first): the next call finds it in flight and only waits for
        it, so the GPU does not idle through the host's planning (and, every bet held, staging)."""
        times = self.step_times.start()
        launched = self._take_ahead() or self._schedule()
        if launched is None:
            return
        ahead = self._plan_ahead(launched.plan)
        out = times.lap("collect", self.runner.collect(launched.forward))
        accepted = times.lap("accept", self._accept(launched.plan, out))
        self.step_cost.observe(launched.plan.num_tokens, time.perf_counter() - launched.t_launch)
        times.lap("postprocess", self.scheduler.postprocess(launched.plan, accepted, out.head_rows))
        nxt = times.lap("redraft", self.scheduler.next_from_ahead(ahead[0]) if ahead is not None else None)
        if nxt is not None:
            self._ahead = self._launch(nxt, ahead[1] if nxt is ahead[0] else None)
            times.ahead += 1
        times.steps, times.wait = times.steps + 1, times.wait + out.wait_s

    def _take_ahead(self) -> Launched | None:
        """The step launched ahead by the last call, unless every sequence of it was cancelled."""
        launched, self._ahead = self._ahead, None
        if launched is not None and all(seq.is_finished for seq, _ in launched.plan.batch):
            self.runner.collect(launched.forward)  # dropped
            return None
        return launched

    def _schedule(self) -> Launched | None:
        """The scheduler's plan: a prefill runs here whole (None), a verify step is launched."""
        plan = self.scheduler.schedule()
        if not plan.batch:
            return None
        if plan.prefill:
            picks, owners = _score_picks(plan.batch)
            for seq, logprob in zip(owners, self.runner.prefill(plan.batch, picks)):
                seq.logprob += logprob
            self.scheduler.postprocess(plan)
            self.step_times.prefills += 1
            self.step_times.lap("prefill")
            return None
        return self._launch(plan)

    def _plan_ahead(self, plan: StepPlan) -> tuple[StepPlan, object] | None:
        """The next step planned and its inputs staged while this one runs (`plan_ahead`)."""
        ahead = self.scheduler.plan_ahead(plan) if self.cfg.plan_ahead else None
        staged = self.runner.stage(ahead.batch, ahead.starts) if ahead is not None else None
        self.step_times.lap("schedule")
        return (ahead, staged) if ahead is not None else None

    def _launch(self, plan: StepPlan, staged=None) -> Launched:
        """Start `plan`'s forward (one for the whole batch; logits only for sampled requests)."""
        started = self.step_times.lap("schedule", time.perf_counter())  # the step's cost counts from here
        logits = any(self._sampled(seq) for seq, _ in plan.batch)
        forward = self.runner.launch(plan.batch, logits, plan.starts, staged)
        return Launched(plan, forward, self.step_times.lap("launch", started))

    def _sampled(self, seq: Sequence) -> bool:
        return not (seq.params.greedy and self.cfg.greedy_fast_path)

    def _accept(self, plan: StepPlan, out: StepOutput) -> list[list[int]]:
        """The tokens each sequence of `plan` commits: its accepted drafts and a bonus token."""
        start, accepted, logits = 0, [], out.logits
        for (seq, feed), row in zip(plan.batch, out.rows):
            if seq.is_finished:
                accepted.append([])  # cancelled while its step ran: nothing to verify
            elif self._sampled(seq):
                accepted.append(self.accept_sampled(seq, logits[start : start + len(feed)], feed[1:]))
            else:
                accepted.append(accept_greedy(row, feed[1:]))
            start += len(feed)
        return accepted

    def accept_sampled(self, seq: Sequence, logits: torch.Tensor, draft: list[int]) -> list[int]:
        """Verify `draft` against target logits [len(draft)+1, V] by sampling (engine/speculative/verify.py);
        return the tokens to commit. Greedy requests take `accept_greedy` unless greedy_fast_path
        is off."""
        draft_t = torch.tensor([draft], dtype=torch.long, device=logits.device).reshape(1, len(draft))
        if self.cfg.sampled_verify == "coupled":
            probs = target_probs(logits, seq.params)
            # Row j predicts the token at position len(seq) + j.
            noise = position_noise(seq.seed, len(seq), probs.shape[0], probs.shape[1], probs.device)
            out = verify_coupled(probs[None], draft_t, noise[None])
        else:
            probs = target_probs(logits, seq.params)
            out = verify_sampled(probs[None], draft_t, seq.generator)
        return parse_output(out)[0]

def _score_picks(batch) -> tuple[list[tuple[int, int]], list[Sequence]]:
    """The (row, token) pairs of a prefill batch that score requests score -- the row of position
    p predicts the token at p + 1 -- and each pair's sequence. Example: a prompt [a b c d] with
    score_from 2, prefilled whole (positions 0-2; d, the last, is never fed), picks rows 1 and 2
    for c and d."""
    picks, owners, row = [], [], 0
    for seq, feed in batch:
        if seq.score_from is not None:
            start = seq.num_cached
            for p in range(max(start, seq.score_from - 1), start + len(feed)):
                picks.append((row + p - start, seq.tokens[p + 1]))
                owners.append(seq)
        row += len(feed)
    return picks, owners


@dataclass(frozen=True)
class RequestLimits:
    """What decides whether a request can ever run on a loaded engine (`LLMEngine.check_request`):
    plain figures, so a front end in another process checks a request before sending it
    (engine/engine_process.py)."""

    max_model_len: int
    kv_tokens: int  # the KV cache's capacity (BlockManager.capacity)
    verify_tokens: int  # the engine's default verify block
    vocab_size: int
    drafter: str  # the engine's default drafter
    draft_model: bool  # whether a draft model (or the target's heads) is loaded
    draft_kv_tokens: int | None = None  # the draft model's room for a prompt; None: no bound (heads)

    def check(self, request: Request) -> None:
        """Raise RequestError if `request` can never run."""
        check_prompt_length(request.prompt_ids, self.max_model_len)
        check_score_from(request)
        n = len(request.prompt_ids)
        k = request.verify_tokens or self.verify_tokens
        if not 1 <= k <= MAX_VERIFY_TOKENS:
            raise RequestError(f"verify_tokens must be in [1, {MAX_VERIFY_TOKENS}], got {k}")
        if n + k > self.kv_tokens:  # Scheduler.admit holds the prompt and its verify block
            raise RequestError(f"prompt of {n} tokens and its verify block of {k} do not fit the KV cache "
                               f"({self.kv_tokens} tokens)", "context_length_exceeded")
        if request.prompt_ids and not (0 <= min(request.prompt_ids) and max(request.prompt_ids) < self.vocab_size):
            raise RequestError(f"prompt has token ids outside the vocabulary [0, {self.vocab_size})")
        kind = request.drafter or self.drafter
        if request.score_from is not None:
            return  # a score request only prefills: no drafter runs for it
        if kind not in DRAFTER_KINDS:
            raise RequestError(f"unknown drafter {request.drafter!r}; choose one of {', '.join(DRAFTER_KINDS)}")
        if kind in MODEL_DRAFTERS:
            if not self.draft_model:
                raise RequestError(f"drafter {kind!r} needs the engine's draft model; this engine has none "
                                   "(start it with EDITAPPLY_DRAFTER=hybrid or EDITAPPLY_DRAFT_MODEL)")
            if self.draft_kv_tokens is not None and n > self.draft_kv_tokens:
                raise RequestError(f"prompt of {n} tokens does not fit the draft model's KV cache "
                                   f"({self.draft_kv_tokens} tokens for a prompt)", "context_length_exceeded")
