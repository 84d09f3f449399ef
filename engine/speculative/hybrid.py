"""Hybrid drafting: lookup and the draft model share each verify block.

Per step and sequence (drafter `hybrid`): lookup proposes first (free), and a draft that fills the
block is verified alone; otherwise whichever of lookup and the draft model is expected to commit
more leads (E(alpha, n) = alpha + ... + alpha^n from measured acceptance) and the other fills the
block's remaining slots. How many tokens the model writes (d <= D) is chosen by expected committed
tokens per second of the whole step, from the measured step costs; a catch-up the model must read
first is paid by ski rental's rule, and probes keep the estimates current while the rule declines
the model. The target's own draft heads (`heads.py`) can take the model's place; drafter `draft`
is the model alone. Verification is unchanged, so outputs are exactly plain decoding's (greedy)
or the target's distribution (sampled). The whole rule, with drafting ahead, is in README.md
beside this file.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from engine.speculative.draft_model import DraftModel

# D when EDITAPPLY_DRAFT_TOKENS is 0: bench/RESULTS.md ("Draft model + lookup") has the sweep.
DEFAULT_DRAFT_TOKENS = 5
# Where a draft's tokens came from: lookup leading (a draft shorter than the block: the case the
# estimates decide), lookup quoting (a draft that fills the block: verified alone), the draft
# model, lookup filling after the model's tokens.
LOOKUP, QUOTE, MODEL, FILL = "lookup", "quote", "model", "fill"
PROBE_EVERY = 16
PROBE_SHARE = 0.05
MIN_PROBE_SHARE = 0.01
MIN_GAIN = 1.05
# The share of the target's step that the draft model's forwards drafting ahead hide, the two
# slowing each other (measured with bench.step_time --beside: bench/HISTORY.md, drafting ahead).
OVERLAP_SHARE = 0.5


def expected_commits(alpha: float, n: int) -> float:
    """Expected accepted tokens of an n-token draft, each accepted with probability alpha if all
    before it were: alpha + alpha^2 + ... + alpha^n. Example: alpha 0.5, n 3 -> 0.875."""
    if n <= 0:
        return 0.0
    if alpha >= 1.0:
        return float(n)
    return alpha * (1 - alpha**n) / (1 - alpha)


def _likelier_than_not(alpha: float, n: int) -> int:
    """The draft length the rule takes while a cost is not measured: how many of n tokens are
    likelier accepted than not (alpha^k >= 1/2). Example: alpha 0.8, n 5 -> 3."""
    return sum(1 for k in range(1, n + 1) if alpha**k >= 0.5)


def _lookup_step_seconds(target_fit: tuple[float, float], lookup_drafts: list[list[int]]) -> float:
    """Estimated seconds of a step that verifies lookup's drafts alone."""
    a, b = target_fit
    return a + b * sum(1 + len(dr) for dr in lookup_drafts)


@dataclass
class Acceptance:
    """Decayed per-token acceptance counts of one draft source (geometric model, with a prior)."""

    prior: float
    weight: float = 4.0
    decay: float = 0.995
    accepted: float = 0.0
    rejections: float = 0.0

    def observe(self, accepted: int, rejected: bool) -> None:
        self.accepted = self.decay * self.accepted + accepted
        self.rejections = self.decay * self.rejections + rejected

    @property
    def rate(self) -> float:
        return (self.accepted + self.prior * self.weight) / (self.accepted + self.rejections + self.weight)


@dataclass
class Proposal:
    """One sequence's draft for a step and where its tokens came from, in order."""

    tokens: list[int] = field(default_factory=list)
    parts: list[tuple[str, int]] = field(default_factory=list)  # (LOOKUP | QUOTE | MODEL | FILL, length)
    displaced: list[int] = field(default_factory=list)  # lookup's short draft when the model led instead

    def add(self, kind: str, tokens: list[int]) -> None:
        if tokens:
            self.tokens.extend(tokens)
            self.parts.append((kind, len(tokens)))

    @property
    def quoted(self) -> bool:
        """Lookup's draft filled the block and the model did not run (or there was no room)."""
        return all(kind == QUOTE for kind, _ in self.parts)

    def count(self, kind: str, limit: int) -> int:
        """Tokens of `kind` among the first `limit`."""
        n, offset = 0, 0
        for k, length in self.parts:
            if k == kind:
                n += max(0, min(length, limit - offset))
            offset += length
        return n


@dataclass
class HybridStats:
    """What the drafter did since the last reset (bench/drafters.py prints it): steps it planned,
    those where the draft model ran (probes among them), and the wall seconds of the model's
    proposals against what the rule priced them at (catch-ups included). Probes and the steps run
    after waiting out a catch-up are among the model's steps."""

    steps: int = 0
    model_steps: int = 0
    probes: int = 0
    after_wait: int = 0  # model steps run once the steps waiting for it took as long as its catch-up
    ahead: int = 0  # model runs drafting the next step while the target verified (not among model_steps)
    ahead_seconds: float = 0.0  # their wall seconds (beside the target's step)
    caught_up: int = 0  # committed tokens the model read before drafting (prompts, quotes)
    model_seconds: float = 0.0
    priced_seconds: float = 0.0


@dataclass
class _SeqDraft:
    """One sequence's options for a step where lookup's draft leaves room: for each d = 0..D the
    model's expected extra accepted tokens and which leads (MODEL: its d tokens replace lookup's
    draft; LOOKUP: it continues after that draft), whichever gains more."""

    seq: object
    room: int
    lookup: list[int]  # lookup's draft
    gain_per_d: list[float]
    leads: list[str]
    fed_per_d: list[int] = field(init=False)  # tokens the step feeds beyond lookup's draft when the model writes d

    def __post_init__(self):
        n = len(self.lookup)
        self.fed_per_d = [min(d, self.room) - n if lead == MODEL else min(d, self.room - n)
                          for d, lead in enumerate(self.leads)]

    @property
    def lead_tokens(self) -> int:
        """Lookup's tokens the model reads before drafting, as the largest d would have it."""
        return len(self.lookup) if self.leads[-1] == LOOKUP else 0


class HybridDrafting:
    def __init__(self, model: DraftModel, draft_tokens: int = 0):
        self.model = model  # a DraftModel, or the target's draft heads (engine/speculative/heads.py HeadsModel)
        self.max_draft = draft_tokens or DEFAULT_DRAFT_TOKENS
        if model.max_tokens:  # the heads guess as many tokens as they are heads
            self.max_draft = min(self.max_draft, model.max_tokens)
        self.reset()

    def propose(self, seqs, lookup_drafts: list[list[int]], rooms: list[int],
                target_fit: tuple[float, float] | None) -> list[Proposal]:
        """Drafts for the sequences of one step. `lookup_drafts`: lookup's proposals ([] for the
        `draft` drafter), `rooms`: most draft tokens each may take. Lookup fills after the model's
        tokens for sequences whose drafter is `hybrid` (`seq.lookup_fills`)."""
        proposals = [Proposal() for _ in seqs]
        plans: list[tuple[int, _SeqDraft]] = []
        a_l, a_m = self.rates[LOOKUP].rate, self.rates[MODEL].rate
        e_model = [expected_commits(a_m, k) for k in range(self.max_draft + 1)]
        for i, (seq, draft, room) in enumerate(zip(seqs, lookup_drafts, rooms)):
            if room <= 0 or len(draft) >= room:
                proposals[i].add(QUOTE, draft[:room])
                continue
            e_lookup, left, reach = expected_commits(a_l, len(draft)), room - len(draft), a_l ** len(draft)
            gains, leads = [0.0], [LOOKUP]
            for d in range(1, self.max_draft + 1):
                model = e_model[min(d, room)] - e_lookup
                fill = reach * e_model[min(d, left)] if self.model.continues_lead else 0.0
                gains.append(max(model, fill))
                leads.append(MODEL if model > fill else LOOKUP)
            plans.append((i, _SeqDraft(seq, room, draft, gains, leads)))
        stats = self.stats
        stats.steps += bool(plans)
        probes = stats.probes
        d, priced, chosen = self._decide([p for _, p in plans], lookup_drafts, target_fit)
        if chosen and stats.probes == probes:  # the rule runs the model: probes may spend their full share again
            self.probe_share = PROBE_SHARE
        chosen_ids = {id(p) for p in chosen}
        jobs = []
        for i, p in plans:
            if id(p) not in chosen_ids or p.gain_per_d[d] <= 0:
                proposals[i].add(LOOKUP, p.lookup)
                continue
            if p.leads[d] == LOOKUP:
                proposals[i].add(LOOKUP, p.lookup)
                jobs.append((i, (p.seq, p.lookup, min(d, p.room - len(p.lookup)))))
            else:
                proposals[i].displaced = p.lookup
                jobs.append((i, (p.seq, [], min(d, p.room))))
        if jobs:
            t, read = time.perf_counter(), self.model.caught_up
            drafts = self.model.propose([job for _, job in jobs])
            stats.model_steps += 1
            stats.model_seconds += time.perf_counter() - t
            stats.priced_seconds += priced
            stats.caught_up += self.model.caught_up - read
            for (i, (seq, lead, _)), tokens in zip(jobs, drafts):
                p = proposals[i]
                if not tokens and p.displaced:  # no room in the draft cache: lookup's draft after all
                    p.add(LOOKUP, p.displaced)
                    p.displaced = []
                    continue
                p.add(MODEL, tokens)
                room = rooms[i] - len(p.tokens)
                if seq.lookup_fills and not lead and room > 0 and seq.drafter is not None:
                    # A match is at most max_match tokens long: the context's tail is all peek reads.
                    tail = seq.tokens[-seq.drafter.max_match :]
                    p.add(FILL, seq.drafter.peek(tail + p.tokens, room))
        return proposals

    def propose_ahead(self, seq, in_flight: list[int], room: int, target_fit: tuple[float, float] | None,
                      step_seconds: float) -> tuple[int, Proposal] | None:
        """The model's bet on the step after the one verifying `in_flight` (seq's draft, accepted
        whole): its guess of that step's bonus token, and the next step's proposal of up to
        `room` tokens (the model's, then lookup's fill), drafted while the target's step runs.
        The model writes the d tokens that maximize the next step's expected rate, its forwards
        priced past the share of the `step_seconds` they hide (OVERLAP_SHARE; while a cost is not
        measured, the tokens likelier accepted than not); None for a sequence the model is behind
        on, or where no d pays (module docstring)."""
        if room <= 0 or self.model.lag(seq, len(in_flight)) > 0:
            return None
        alpha = self.rates[MODEL].rate
        if target_fit is None or not self._model_priced():
            best = _likelier_than_not(alpha, min(self.max_draft, room))
        else:
            a, b = target_fit
            best, best_rate = 0, MIN_GAIN / (a + b)  # the bet's token alone
            for d in range(1, min(self.max_draft, room) + 1):
                unhidden = max(0.0, self.model.draft_seconds(d + 1, 1) - OVERLAP_SHARE * step_seconds)
                rate = (1 + expected_commits(alpha, d)) / (a + b * (1 + d) + unhidden)
                if rate > best_rate:
                    best, best_rate = d, rate
        if not best:
            return None
        t = time.perf_counter()
        tokens = self.model.propose([(seq, in_flight, best + 1)], ahead=True)[0]
        self.stats.ahead += 1
        self.stats.ahead_seconds += time.perf_counter() - t
        if len(tokens) < 2:
            return None
        proposal = Proposal()
        proposal.add(MODEL, tokens[1:])
        left = room - len(proposal.tokens)
        if seq.lookup_fills and left > 0 and seq.drafter is not None:
            tail = (seq.tokens + in_flight)[-seq.drafter.max_match :]
            proposal.add(FILL, seq.drafter.peek(tail + tokens, left))
        return tokens[0], proposal

    def _model_priced(self) -> bool:
        """Whether the draft model's drafting forward has a measured price (DraftModel.draft_seconds)."""
        return self.model.draft_seconds(1, 1) is not None

    def _catch_up(self, plans: list[_SeqDraft]) -> float:
        """Seconds the model must first spend reading what it has not seen (paid by this step;
        infinite while unpriced)."""
        return self.model.catch_up_seconds([(p.seq, p.lead_tokens) for p in plans])

    def _decide(self, plans: list[_SeqDraft], lookup_drafts: list[list[int]],
                target_fit: tuple[float, float] | None) -> tuple[int, float, list[_SeqDraft]]:
        """How many tokens the model writes this step, the seconds the rule priced that at, and
        for which plans (module docstring). The plans the model is in sync with are decided
        alone (no catch-up); the others join them when the rule prices the whole set, catch-ups
        included, above the synced ones alone, or once the steps waiting for them have taken as
        long as their catch-up. While the costs are not measured, the synced plans run as many
        tokens as are likelier accepted than not and the others only through a probe."""
        if not plans:
            self.waited_seconds = 0.0  # a quote resumed: the model's chance passed
            return 0, 0.0, []
        lags = {id(p): self.model.lag(p.seq, p.lead_tokens) for p in plans}
        synced = [p for p in plans if lags[id(p)] <= 0]
        d, rate, priced = self._choose_d(synced, lookup_drafts, target_fit, 0.0)
        chosen = synced if d else []
        if len(synced) < len(plans) and target_fit is not None and self._model_priced():
            catch_up = self._catch_up(plans)
            d_all, rate_all, priced_all = self._choose_d(plans, lookup_drafts, target_fit, catch_up)
            if d_all and rate_all > rate:
                self.waited_seconds = 0.0
                return d_all, priced_all, plans
            d_sync, rate_sync, priced_sync = self._choose_d(plans, lookup_drafts, target_fit, 0.0)
            if d_sync and rate_sync > rate and math.isfinite(catch_up):
                self.waited_seconds += _lookup_step_seconds(target_fit, lookup_drafts)
                if self.waited_seconds >= catch_up:
                    self.waited_seconds = 0.0
                    self.stats.after_wait += 1
                    return d_sync, priced_sync + catch_up, plans
        if chosen:
            return d, priced, chosen
        probe = [min(plans, key=lambda p: lags[id(p)])]  # the plan with the least to read
        catch_up = self._catch_up(probe)
        if self._probe_due(lookup_drafts, target_fit, catch_up):
            self.stats.probes += 1
            return 1, self._probe_seconds(catch_up if math.isfinite(catch_up) else 0.0), probe
        return 0, 0.0, []

    def _probe_seconds(self, catch_up: float) -> float:
        """Priced seconds of a probe: the catch-up, then one drafting forward for its one plan."""
        return catch_up + (self.model.draft_seconds(1, 1) or 0.0)

    def _probe_due(self, lookup_drafts: list[list[int]], target_fit: tuple[float, float] | None,
                   catch_up: float) -> bool:
        """Whether this step, where the model does not run, drafts one token anyway for one plan,
        `catch_up` seconds behind (module docstring): every PROBE_EVERY-th step from the first
        while a price is missing, else once the steps since the last probe have taken 1/share
        times what it costs, the share halving with each probe (down to MIN_PROBE_SHARE)."""
        if target_fit is None or not self._model_priced() or not math.isfinite(catch_up):
            return (self.stats.steps - 1) % PROBE_EVERY == 0
        self.unprobed_seconds += _lookup_step_seconds(target_fit, lookup_drafts)
        if self._probe_seconds(catch_up) > self.probe_share * self.unprobed_seconds:
            return False
        self.unprobed_seconds = 0.0
        self.probe_share = max(MIN_PROBE_SHARE, self.probe_share / 2)
        return True

    def _choose_d(self, plans: list[_SeqDraft], lookup_drafts: list[list[int]],
                  target_fit: tuple[float, float] | None, catch_up: float) -> tuple[int, float, float]:
        """The d in [0, D] that maximizes the step's expected committed tokens per second when the
        model writes for `plans` with `catch_up` seconds charged to it; that rate (lookup's alone,
        for d = 0: the model must beat it by MIN_GAIN); and the seconds the model's part is
        priced at (0 while the costs are not measured: then d counts the tokens likelier
        accepted than not, and the rate is 0)."""
        if not plans:
            return 0, 0.0, 0.0
        a_l, a_m = self.rates[LOOKUP].rate, self.rates[MODEL].rate
        if target_fit is None or not self._model_priced():
            return _likelier_than_not(a_m, self.max_draft), 0.0, 0.0
        a, b = target_fit
        base = sum(1 + expected_commits(a_l, len(dr)) for dr in lookup_drafts)
        base_fed = sum(1 + len(dr) for dr in lookup_drafts)
        best, base_rate, priced = 0, base / (a + b * base_fed), 0.0
        best_rate = MIN_GAIN * base_rate
        gains = [sum(column) for column in zip(*(p.gain_per_d for p in plans))]
        fed = [sum(column) for column in zip(*(p.fed_per_d for p in plans))]
        for d in range(1, self.max_draft + 1):
            model_seconds = self.model.draft_seconds(d, len(plans)) + catch_up
            seconds = a + b * (base_fed + fed[d]) + model_seconds
            if (base + gains[d]) / seconds > best_rate:
                best, best_rate, priced = d, (base + gains[d]) / seconds, model_seconds
        return best, (best_rate if best else base_rate), priced

    def reset(self) -> None:
        """Forget the acceptance and cost estimates (benchmarks start each configuration cold)."""
        self.rates = {LOOKUP: Acceptance(prior=0.5), MODEL: Acceptance(prior=0.6)}
        self.stats = HybridStats()
        self.unprobed_seconds = 0.0  # estimated seconds of the steps without the model since the last probe
        self.probe_share = PROBE_SHARE  # of those seconds the next probe may cost (halved by each probe)
        self.waited_seconds = 0.0  # estimated seconds of the steps that waited out the model's catch-up
        self.model.reset_costs()

    def observe(self, proposal: Proposal, fed: int, committed: list[int]) -> tuple[int, int]:
        """Update the acceptance estimates from one verified draft: its first `fed` tokens were
        verified, then `committed` (the accepted ones and the bonus) were committed; returns the
        draft model's tokens among those verified and among those accepted. Quotes and
        fills are not counted: the estimates decide between a short lookup draft and the model's.
        A lookup draft the model displaced is scored against what was committed, so lookup's
        estimate keeps learning while the model leads (exact for greedy requests, where any draft
        is accepted exactly as far as it matches what the target commits)."""
        accepted = len(committed) - 1
        self._score(proposal, fed, accepted)
        self._score_displaced(proposal.displaced, committed)
        return proposal.count(MODEL, fed), proposal.count(MODEL, accepted)

    def _score(self, proposal: Proposal, fed: int, accepted: int) -> None:
        offset = 0
        for kind, length in proposal.parts:
            length = min(length, fed - offset)
            if length <= 0 or accepted < offset:
                break
            got = min(length, accepted - offset)
            if kind in (LOOKUP, MODEL):
                self.rates[kind].observe(got, got < length)
            offset += length

    def _score_displaced(self, shadow: list[int], committed: list[int]) -> None:
        if not shadow:
            return
        n = 0
        while n < len(shadow) and n < len(committed) and shadow[n] == committed[n]:
            n += 1
        if n < len(shadow) and n < len(committed):
            self.rates[LOOKUP].observe(n, True)
        elif n == len(shadow):
            self.rates[LOOKUP].observe(n, False)
