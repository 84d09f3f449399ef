"""LLMEngine: requests in, token streams out, one speculative step at a time.

A step has four phases, named as in the code (nano-vllm's shape):
  * `schedule`    — the scheduler's `StepPlan` (engine/scheduler.py): it admits waiting requests
                    while KV blocks allow, picks prefill or verify, has each sequence's drafter
                    (or the draft model) propose up to K-1 tokens, sizes the drafts from the step
                    cost, and grows blocks, preempting when they run out;
  * `forward`     — one model pass over the plan's batch: prompt chunks, or every sequence's
                    `[last token] + draft` with one device-to-host copy;
  * `accept`      — verify the drafts against the target (exact greedy or rejection sampling):
                    the accepted prefix plus one bonus/recovered token;
  * `postprocess` — the scheduler's bookkeeping: commit through the engine's stop conditions
                    (`_commit`), roll the KV cache back over the rejected tail, record stats and
                    acceptance estimates, publish completed blocks to the prefix cache.
"""

from __future__ import annotations

import atexit
import gc
import secrets
import time
from dataclasses import dataclass, fields
from typing import Iterator

import torch

from engine.config import EngineConfig
from engine.runner import Flight, ModelRunner
from engine.scheduler import Scheduler, StepPlan
from engine.sampling import position_noise, target_probs
from engine.sequence import Sequence
from engine.loader.registry import PRESETS
from engine.speculative.drafters import DRAFTER_KINDS, MODEL_DRAFTERS, DraftConfig, make_drafter
from engine.speculative.heads import HEADS_MODEL, HeadsModel, heads_path, load_heads
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
    `schedule` makes the plan (or the next one ahead, while the GPU runs this one), `launch`
    stages the inputs and starts the graph or eager forward, `collect` reads the greedy tokens
    back, `wait` being its part blocked on the GPU (ModelRunner.wait_seconds), `accept`
    verifies, `postprocess` commits. `ahead` counts the steps launched from a plan made ahead.
    The GPU idles through the host work between `collect` and the next launch: without a plan
    ahead that is everything but `wait`; with one, `accept`, `postprocess` and the launch."""

    steps: int = 0
    ahead: int = 0
    schedule: float = 0.0
    launch: float = 0.0
    collect: float = 0.0
    wait: float = 0.0
    accept: float = 0.0
    postprocess: float = 0.0

    def per_step_us(self) -> dict[str, float]:
        n = max(self.steps, 1)
        return {f.name: getattr(self, f.name) / n * 1e6 for f in fields(self) if f.type == "float"}

    def cells(self) -> dict[str, str]:
        """The benches' table cells: the share of steps planned ahead, then µs per step by phase."""
        return {"ahead": f"{self.ahead / max(self.steps, 1):.0%}",
                **{k: f"{v:.0f}" for k, v in self.per_step_us().items()}}


@dataclass
class _Flight:
    """A verify step launched and not yet collected: its plan, its forward, when it started."""

    plan: StepPlan
    forward: Flight
    t_launch: float


def freeze_loaded_objects() -> None:
    """Take what the process has loaded so far (torch, the model, the tokenizer, grammars: ~300k
    objects) out of the cyclic garbage collector's reach, once per process. A full collection
    otherwise walks all of it (~80 ms on a 2-core CPU), and the objects a busy engine makes per
    step trigger one every ~100-150 steps: on the H200 the hybrid drafter's verify steps paid ~200
    us each for it on average (bench/HISTORY.md, "Draft heads, round two"). vLLM freezes after its
    start-up too. Unfrozen at exit, so that the final collection still sees them (extension
    modules count what it frees)."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()
        atexit.register(gc.unfreeze)


def default_draft_model(paired: str, heads_trained: bool, flat_verify: bool) -> str:
    """The draft model a `hybrid`/`draft` engine runs when EDITAPPLY_DRAFT_MODEL is empty. Where a
    verify step of a few tokens costs about a one-token step (`flat_verify`: a GPU, or a CPU in
    bf16, made for one with AMX units), the target's own draft heads if they were trained: against
    lookup on the H200 RAG +25-30% and chat +21-27% with them, -6% to -9% and -12% to +6% with the
    0.5B pair, whose token costs most of a verify step; on a 2-core Xeon in bf16 +13% and +25%, the
    0.5B -1% and +34%. Else the preset's paired model: on a CPU in fp32 every fed token costs
    compute and the heads' few accepted guesses do not pay, the 0.5B's do (bench/RESULTS.md
    "Draft heads").

    Example: ("qwen2.5-coder-0.5b", True, True) -> "heads"; ("qwen2.5-coder-0.5b", True, False) ->
    "qwen2.5-coder-0.5b"; ("", False, True) -> "" (nothing to draft with).
    """
    if flat_verify and heads_trained:
        return HEADS_MODEL
    return paired


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
        self.hybrid = self._load_draft_model()
        self.scheduler = Scheduler(self.kv, self.cfg, self.step_cost, self.hybrid)
        self._flight: _Flight | None = None  # a verify step launched ahead, collected by the next step()
        freeze_loaded_objects()  # the engine is freed by reference counting alone (no cycles), frozen or not

    def _load_draft_model(self):
        """The draft model of the hybrid/draft drafters (engine/speculative/hybrid.py), when the engine's
        drafter uses one or EDITAPPLY_DRAFT_MODEL names one; else None."""
        name = self.cfg.draft_model
        if not name and self.cfg.drafter in MODEL_DRAFTERS:
            preset = PRESETS.get(self.cfg.model)
            flat_verify = self.runner.device.type == "cuda" or self.runner.dtype == torch.bfloat16
            name = default_draft_model(preset.draft if preset else "", heads_path(self.runner.folder).is_file(),
                                       flat_verify)
            if not name:
                raise ValueError(f"drafter {self.cfg.drafter!r} needs a draft model: {self.cfg.model!r} has no "
                                 "paired one and no trained draft heads, so set EDITAPPLY_DRAFT_MODEL (a preset "
                                 "or folder with its tokenizer) or train heads (`editapply train-heads`)")
        if not name:
            return None
        from engine.speculative.hybrid import HybridDrafting

        if name == HEADS_MODEL:  # the target's own draft heads (engine/speculative/heads.py)
            mc = self.runner.model_config
            heads, _ = load_heads(heads_path(self.runner.folder), mc.hidden_size, self.runner.dtype,
                                  self.runner.device)
            self.runner.attach_heads(heads)
            return HybridDrafting(HeadsModel(heads.num_heads), self.cfg.draft_tokens)
        from engine.speculative.draft_model import DraftModel

        model = DraftModel(self.cfg, name, self.tokenizer, self.runner.model_config.vocab_size)
        return HybridDrafting(model, self.cfg.draft_tokens)

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
        check_prompt_length(request.prompt_ids, self.cfg.max_model_len)
        check_score_from(request)
        n = len(request.prompt_ids)
        if self.kv.blocks_for(n + self.cfg.verify_tokens) > self.kv.num_blocks:
            raise RequestError(f"prompt of {n} tokens does not fit the KV cache ({self.kv.num_blocks * self.kv.block_size} tokens)",
                               "context_length_exceeded")
        vocab = self.runner.model_config.vocab_size
        if request.prompt_ids and not (0 <= min(request.prompt_ids) and max(request.prompt_ids) < vocab):
            raise RequestError(f"prompt has token ids outside the vocabulary [0, {vocab})")
        k = request.verify_tokens or self.cfg.verify_tokens
        if not 1 <= k <= 64:
            raise RequestError(f"verify_tokens must be in [1, 64], got {k}")
        kind = request.drafter or self.cfg.drafter
        if request.score_from is not None:
            return  # a score request only prefills: no drafter runs for it
        if kind not in DRAFTER_KINDS:
            raise RequestError(f"unknown drafter {request.drafter!r}; choose one of {', '.join(DRAFTER_KINDS)}")
        if kind in MODEL_DRAFTERS:
            if self.hybrid is None:
                raise RequestError(f"drafter {kind!r} needs the engine's draft model; this engine has none "
                                   "(start it with EDITAPPLY_DRAFTER=hybrid or EDITAPPLY_DRAFT_MODEL)")
            self.hybrid.model.check(n)

    def add_request(self, request: Request) -> Sequence:
        self.check_request(request)
        n = len(request.prompt_ids)
        kind = request.drafter or self.cfg.drafter
        k = 1 if request.score_from is not None else request.verify_tokens or self.cfg.verify_tokens
        sources = dict(request.sources)
        drafter = make_drafter(kind, sources, n, self.draft_config) if k > 1 else None
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
        self._finish(seq, "cancelled")

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

        A verify step's successor is planned while it runs (`Scheduler.plan_ahead`) and, when its
        bet holds, launched before this call returns: the next call finds it in flight and only
        waits for it, so the GPU does not idle through the host's planning and staging."""
        times = self.step_times
        t0 = time.perf_counter()
        flight = self._flight
        if flight is not None and all(seq.is_finished for seq, _ in flight.plan.batch):
            self.runner.collect(flight.forward)  # every sequence of it was cancelled: drop it
            flight = self._flight = None
        if flight is None:
            plan = self.scheduler.schedule()
            if not plan.batch:
                return
            if plan.prefill:
                picks, owners = _score_picks(plan.batch)
                for seq, logprob in zip(owners, self.runner.prefill(plan.batch, picks)):
                    seq.logprob += logprob
                self.scheduler.postprocess(plan)
                return
            t1 = time.perf_counter()
            times.schedule += t1 - t0
            flight = self._launch(plan)
        self._flight = None
        t1 = time.perf_counter()
        ahead = staged = None
        if self.cfg.plan_ahead:
            ahead = self.scheduler.plan_ahead(flight.plan)
            staged = self.runner.stage(ahead.batch, ahead.starts) if ahead is not None else None
        t2 = time.perf_counter()
        wait = self.runner.wait_seconds
        rows, logits = self.runner.collect(flight.forward)
        t3 = time.perf_counter()
        accepted = self._accept(flight.plan, rows, logits)
        if self.runner.model.heads is not None:  # the heads' guesses after each sequence's bonus token
            guesses = flight.forward.head_rows  # None: a step too large to run the heads
            for i, ((seq, _), new) in enumerate(zip(flight.plan.batch, accepted)):
                seq.head_draft = list(guesses[i][len(new) - 1]) if guesses and new else []
        t4 = time.perf_counter()
        self.step_cost.observe(flight.plan.num_tokens, t4 - flight.t_launch)
        self.scheduler.postprocess(flight.plan, accepted, self._commit)
        t5 = time.perf_counter()
        if ahead is not None and self.scheduler.ahead_holds(ahead):
            self._flight = self._launch(ahead, staged)
            times.ahead += 1
        times.steps += 1
        times.schedule += t2 - t1
        times.collect += t3 - t2
        times.wait += self.runner.wait_seconds - wait
        times.accept += t4 - t3
        times.postprocess += t5 - t4

    def _launch(self, plan: StepPlan, staged=None) -> _Flight:
        """Start `plan`'s forward (one for the whole batch; logits only for sampled requests)."""
        t = time.perf_counter()
        logits = any(self._sampled(seq) for seq, _ in plan.batch)
        forward = self.runner.launch(plan.batch, logits, plan.starts, staged)
        self.step_times.launch += time.perf_counter() - t
        return _Flight(plan, forward, t)

    def _sampled(self, seq: Sequence) -> bool:
        return not (seq.params.greedy and self.cfg.greedy_fast_path)

    def _accept(self, plan: StepPlan, rows: list[list[int]], logits: torch.Tensor | None) -> list[list[int]]:
        """The tokens each sequence of `plan` commits: its accepted drafts and a bonus token."""
        start, accepted = 0, []
        for (seq, feed), row in zip(plan.batch, rows):
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

    # ---- helpers ----------------------------------------------------------------------------
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
        self.scheduler.finish(seq, reason)


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
