"""The draft model and the hybrid drafter (engine/speculative/draft_model.py, engine/speculative/hybrid.py).

Through the whole engine, fp32 on the CPU, with the real CI model as the target and, as its draft
model, the CI model cut to its first DRAFT_LAYERS layers (real weights, the target's tokenizer:
a self-speculative "early exit" draft). It agrees with the target often but far from always, so
both caches are rolled back many times in every test. The pair the product ships,
qwen2.5-coder-0.5b drafting for the 1.5B, is measured in bench/RESULTS.md; CI does not pull it.
"""

from __future__ import annotations

import json
import math
import shutil
from types import SimpleNamespace

import pytest
from safetensors.torch import load_file, save_file

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.speculative.choose import default_draft_model
from engine.speculative.drafters import make_drafter
from engine.speculative.hybrid import FILL, LOOKUP, MODEL, QUOTE, Acceptance, HybridDrafting, Proposal, expected_commits
from engine.types import Request, RequestError, SamplingParams
from prompts.apply import build_apply_prompt
from tests.conftest import decode_both_ways, swap_tokens

DRAFT_LAYERS = 20
DEV = "bench/data/dev.jsonl"


def cut_model(src, dst, layers: int, swap: tuple[int, int] | None = None):
    """`src` with only its first `layers` layers; `swap` exchanges two token ids in the tokenizer."""
    dst.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(src / name, dst / name)
    config = json.loads((src / "config.json").read_text())
    config["num_hidden_layers"] = layers
    (dst / "config.json").write_text(json.dumps(config))
    weights = load_file(src / "model.safetensors")
    save_file({k: v for k, v in weights.items()
               if not (k.startswith("model.layers.") and int(k.split(".")[2]) >= layers)}, dst / "model.safetensors")
    if swap:
        vocab = json.loads((dst / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
        swap_tokens(dst, *(next(k for k, v in vocab.items() if v == i) for i in swap))
    return dst


@pytest.fixture(scope="module")
def draft_dir(ci_model_dir, tmp_path_factory):
    return cut_model(ci_model_dir, tmp_path_factory.mktemp("draft") / "cut", DRAFT_LAYERS)


@pytest.fixture(scope="module")
def engine(ci_model_dir, draft_dir):
    # Draft lengths from acceptance alone (adaptive_drafts off): with measured step costs, whether
    # the draft model pays on this CPU would depend on the machine's load, not on the code under test.
    # Blocks of 16: the tests' short outputs then take enough steps for plans ahead and model turns.
    return LLMEngine(EngineConfig(model=str(ci_model_dir), draft_model=str(draft_dir), max_model_len=4096,
                                  max_num_seqs=4, adaptive_drafts=False, verify_tokens=16))


@pytest.fixture(scope="module")
def plain(engine) -> dict[str, list[int]]:
    """Plain decoding's 96 tokens (no speculation, one token a step) of the chat and the apply
    prompt, decoded once: the greedy tests compare with them."""
    tok = engine.tokenizer
    params = SamplingParams(max_tokens=96)
    return {name: generate(engine, Request(ids, params, drafter="none", verify_tokens=1))[0]
            for name, ids in (("chat", tok.encode_chat(CHAT)), ("apply", apply_case(tok)[0]))}


def generate(engine, request):
    out, stats = [], None
    for ev in engine.generate(request):
        out.extend(ev.token_ids)
        stats = ev.stats
    return out, stats


def apply_case(tok):
    row = min((json.loads(line) for line in open(DEV)), key=lambda r: len(r["original"]))
    prompt = build_apply_prompt(row["original"], row["update_snippet"], row["instruction"], row["language"])
    return prompt.prompt_ids(tok), {"original": tok.encode(row["original"]), "snippet": tok.encode(row["update_snippet"])}


CHAT = [{"role": "user", "content": "Write a Python function that checks whether a number is prime, and explain it."}]


def run_mixed_batch(engine, jobs: list[tuple[str, str]], max_tokens: int = 64):
    """Run one batch of requests, each (prompt, drafter) with prompt "chat" (CHAT) or "apply"
    (apply_case, with its lookup sources), to the end. Returns each job's Sequence and each
    prompt's plain output (no speculation), to compare with."""
    tok = engine.tokenizer
    ids, sources = apply_case(tok)
    prompts = {"chat": (tok.encode_chat(CHAT), {}), "apply": (ids, sources)}
    params = SamplingParams(max_tokens=max_tokens)
    expected = {name: generate(engine, Request(p, params, drafter="none", verify_tokens=1))[0]
                for name, (p, _) in prompts.items()}
    seqs = {(name, drafter): engine.add_request(Request(prompts[name][0], params, sources=prompts[name][1],
                                                        drafter=drafter))
            for name, drafter in jobs}
    while engine.has_work():
        engine.step()
    return seqs, expected


def test_expected_commits_and_acceptance():
    assert expected_commits(0.5, 3) == pytest.approx(0.875)
    assert expected_commits(1.0, 4) == 4 and expected_commits(0.9, 0) == 0
    rate = Acceptance(prior=0.5)
    assert rate.rate == 0.5
    for _ in range(50):
        rate.observe(9, True)  # 9 accepted, then a rejection: alpha about 0.9
    assert rate.rate == pytest.approx(0.9, abs=0.01)


def test_observe_counts_each_source_up_to_the_rejection():
    hybrid = HybridDrafting(stub_model(lambda: 0.0))  # the rule alone: no model runs
    p = Proposal()
    p.add(LOOKUP, [1, 2])
    p.add(MODEL, [3, 4, 5])
    p.add(FILL, [6, 7])
    assert p.count(MODEL, 4) == 2 and p.count(MODEL, 10) == 3 and p.count(LOOKUP, 1) == 1
    before = {k: (r.accepted, r.rejections) for k, r in hybrid.rates.items()}
    hybrid.observe(p, fed=7, committed=[1, 2, 3, 9])  # lookup 2/2, the model 1 of 3 then a rejection, fill unseen
    lookup, model = hybrid.rates[LOOKUP], hybrid.rates[MODEL]
    assert (lookup.accepted, lookup.rejections) == (before[LOOKUP][0] * lookup.decay + 2, before[LOOKUP][1] * lookup.decay)
    assert (model.accepted, model.rejections) == (before[MODEL][0] * model.decay + 1, before[MODEL][1] * model.decay + 1)
    quote = Proposal()
    quote.add(QUOTE, list(range(15)))
    hybrid.observe(quote, fed=15, committed=list(range(16)))  # a quote is not what the estimates decide
    assert hybrid.rates[LOOKUP].accepted == lookup.accepted
    led = Proposal(displaced=[5, 6, 7])
    led.add(MODEL, [5, 8])
    was = (lookup.accepted, lookup.rejections)
    hybrid.observe(led, fed=2, committed=[5, 9])  # the model 1/2; lookup's displaced draft 1 then a miss
    assert (lookup.accepted, lookup.rejections) == pytest.approx((was[0] * lookup.decay + 1, was[1] * lookup.decay + 1))


def test_peek_continues_an_extended_context_without_moving_cursors():
    source = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    d = make_drafter("hybrid", {"original": source}, prompt_len=3)
    context = [1, 2, 3]
    assert d.propose(context, 8) == []
    assert d.peek(context + [12, 13], 8) == [14, 15, 16, 17]  # a 2-token match drafts 4
    assert d.peek(context + [12, 13], 2) == [14, 15]
    # Nothing moved: the committed context still has no match.
    assert d.propose(context + [99], 8) == [] and d.peek(context + [99], 8) == []


@pytest.mark.parametrize("drafter", ["hybrid", "draft"])
def test_greedy_output_is_plain_decoding_with_the_draft_model(engine, plain, drafter):
    """Chat (the model's text) and an apply prompt (quotes plus new lines): the same tokens as
    plain decoding, the draft model's tokens both accepted and rejected (its cache rolled back),
    and every draft-cache block given back when the requests end."""
    tok = engine.tokenizer
    prompts = {"chat": (tok.encode_chat(CHAT), {}), "apply": apply_case(tok)}
    drafted = accepted = 0
    # The model's estimate pinned high, so that it drafts in every step it is in sync for (left
    # to learn, one early rejection stops this weak draft until a probe).
    engine.hybrid.rates[MODEL] = Acceptance(prior=0.9, weight=1e6)
    try:
        for name, (ids, sources) in prompts.items():
            out, stats = generate(engine, Request(ids, SamplingParams(max_tokens=96), sources=sources, drafter=drafter))
            assert out == plain[name]
            drafted, accepted = drafted + stats.model_drafted, accepted + stats.model_accepted
            assert stats.model_accepted <= stats.model_drafted <= stats.drafted
    finally:
        engine.hybrid.reset()
    assert 0 < accepted < drafted
    draft = engine.hybrid.model
    assert draft.states == {} and draft.blocks.num_free == draft.blocks.num_blocks


def test_chained_draft_tokens_are_the_step_by_step_greedy_tokens(engine):
    """ModelRunner.decode_greedy feeds each row's tokens back on the device (DecodeChain, run
    eagerly here; the H200 replays it as a CUDA graph, tests/kernels/test_decode_chain.py): two
    rows fed 3 and 1 tokens after prompts of different lengths, 5 tokens each, equal one forward
    per token, and the K/V the chain wrote is what the next forward reads."""
    runner = engine.hybrid.model.runner
    prompts, feeds = [list(range(100, 140)), list(range(300, 317))], [[7, 8, 9], [11]]
    assert decode_both_ways(runner, prompts, feeds, 5, chained=True) == decode_both_ways(runner, prompts, feeds, 5, chained=False)


def test_quotes_are_planned_ahead(engine, plain):
    """While lookup quotes for a hybrid request (its draft fills the block, so the model does not
    run), the next step is planned ahead as for lookup alone (Scheduler.plan_ahead); where the
    prediction ends the model's turn comes back, and the output is plain decoding's throughout."""
    ids, sources = apply_case(engine.tokenizer)
    want = plain["apply"]
    before = engine.step_times.ahead
    out, _ = generate(engine, Request(ids, SamplingParams(max_tokens=96), sources={"prediction": want[:64], **sources},
                                      drafter="hybrid"))
    assert out == want
    assert engine.step_times.ahead - before >= 2


def test_the_model_drafts_ahead_and_its_bets_are_verified(engine, plain, monkeypatch):
    """Drafting ahead (EDITAPPLY_DRAFT_AHEAD; on the CPU one after the other): the model bets on
    the next step while this one is verified, the steps whose bet held are launched from it, and
    the output is plain decoding's, the bets that failed dropped with both caches rolled back."""
    tok = engine.tokenizer
    held = []  # plans made ahead with the model's tokens in them, launched because their bet held
    take = engine.scheduler.next_from_ahead

    def counted(ahead):
        nxt = take(ahead)
        if nxt is ahead and any(p.count(MODEL, len(p.tokens)) for p in ahead.proposals.values()):
            held.append(ahead)
        return nxt

    monkeypatch.setattr(engine.scheduler, "next_from_ahead", counted)
    # Pinned so that the model writes one token a step (0.6^2 < 1/2), as a bet then holds often.
    engine.hybrid.rates[MODEL] = Acceptance(prior=0.6, weight=1e6)
    engine.scheduler.draft_ahead = True
    bets, drafted, accepted = engine.hybrid.stats.ahead, 0, 0
    try:
        for name, (ids, sources) in {"chat": (tok.encode_chat(CHAT), {}), "apply": apply_case(tok)}.items():
            out, stats = generate(engine, Request(ids, SamplingParams(max_tokens=96), sources=sources, drafter="hybrid"))
            assert out == plain[name]
            drafted, accepted = drafted + stats.model_drafted, accepted + stats.model_accepted
        assert 0 < len(held) < engine.hybrid.stats.ahead - bets and 0 < accepted < drafted
    finally:
        engine.scheduler.draft_ahead = False
        engine.hybrid.reset()
    draft = engine.hybrid.model
    assert draft.states == {} and draft.blocks.num_free == draft.blocks.num_blocks


def test_sampled_output_is_the_same_text_with_the_draft_model(engine):
    """Coupled verification keys its noise by seed and position: a seed gives the same text with
    the hybrid drafter as without speculation, rejections and all."""
    ids = engine.tokenizer.encode_chat(CHAT)
    for seed in (1, 2):
        params = SamplingParams(temperature=0.8, top_p=0.95, seed=seed, max_tokens=64)
        plain, _ = generate(engine, Request(ids, params, drafter="none", verify_tokens=1))
        out, stats = generate(engine, Request(ids, params, drafter="hybrid"))
        assert out == plain and stats.model_drafted > 0


def test_concurrent_requests_of_mixed_drafters_and_the_draft_prefix_cache(engine):
    """Three requests in one batch (hybrid, lookup, draft), each its plain output; a second hybrid
    request with the same prompt shares the first one's draft-cache blocks."""
    seqs, expected = run_mixed_batch(engine, [("chat", "hybrid"), ("apply", "lookup"), ("apply", "draft")])
    for (name, drafter), seq in seqs.items():
        assert seq.output_ids == expected[name], drafter
    assert seqs[("chat", "hybrid")].stats.model_drafted > 0 and seqs[("apply", "lookup")].stats.model_drafted == 0
    hits = engine.hybrid.model.blocks.hits
    chat = engine.tokenizer.encode_chat(CHAT)
    generate(engine, Request(chat, SamplingParams(max_tokens=64), drafter="hybrid"))
    assert engine.hybrid.model.blocks.hits - hits >= len(chat) // 16 - 1


def test_a_full_draft_cache_falls_back_to_lookup(engine):
    """With no room in the draft model's cache (its blocks held, as other sequences' caches would
    hold them), a hybrid request whose model drafts otherwise drafts from lookup alone: plain
    output, no model drafts, fewer steps than tokens."""
    engine.reset_estimates()  # earlier tests may have taught the engine that the model rarely pays
    ids = engine.tokenizer.encode_chat(CHAT)
    params = SamplingParams(max_tokens=48)
    plain, _ = generate(engine, Request(ids, params, drafter="none", verify_tokens=1))
    # Lookup quotes a prediction of the answer that goes wrong at token 12; the model drafts past it.
    request = Request(ids, params, sources={"prediction": plain[:12] + [plain[12] ^ 1] + plain[13:]}, drafter="hybrid")
    out, stats = generate(engine, request)
    assert out == plain and stats.model_drafted > 0
    blocks = engine.hybrid.model.blocks
    held = blocks.allocate(blocks.num_free - 2)
    try:
        out, stats = generate(engine, request)
    finally:
        blocks.release(held)
    assert out == plain and stats.model_drafted == 0 and 0 < stats.accepted and stats.steps < len(plain)


def test_catch_up_is_priced_from_the_measured_prefill_cost(engine):
    """A step that would make the draft model read a sequence it has not seen is priced by the
    prefill fit. Without CUDA graphs (here) the catch-up rides in the drafting forward: its tokens
    at the fitted slope, plus a forward's fixed cost for each chunk past the first. With graphs a
    long catch-up is eager forwards of its own: the fixed cost (on a GPU the launches of an eager
    forward) per chunk plus the slope. A sequence the model is in sync with costs nothing."""
    from engine.step_cost import StepCost

    model, K, chunk = engine.hybrid.model, engine.cfg.verify_tokens, engine.cfg.max_batch_tokens
    measured, model.prefill_cost = model.prefill_cost, StepCost(min_samples=2)
    try:
        for n in (100, 1000):  # 12 ms a forward plus 10 us a token
            model.prefill_cost.observe(n, 0.012 + n * 1e-5)
        unseen = SimpleNamespace(id="unseen", tokens=list(range(300)))
        assert model.catch_up_seconds([(unseen, 4)]) == pytest.approx((300 + 4 - K) * 1e-5)
        long = SimpleNamespace(id="long", tokens=list(range(chunk + 100)))
        assert model.catch_up_seconds([(long, 0)]) == pytest.approx(0.012 + (chunk + 100 - K) * 1e-5)
        model.runner.graphs, graphs = object(), model.runner.graphs  # priced as on a GPU; nothing runs
        try:
            assert model.catch_up_seconds([(unseen, 4)]) == pytest.approx(0.012 + (300 + 4 - K) * 1e-5)
        finally:
            model.runner.graphs = graphs
        model.propose([(unseen, [], 1)])  # now it has read them
        assert model.catch_up_seconds([(unseen, 0)]) == 0.0
    finally:
        model.release("unseen")
        model.prefill_cost = measured


def test_the_default_draft_model_follows_the_dtype_and_the_heads():
    """EDITAPPLY_DRAFT_MODEL empty: trained heads where a few tokens verify for the price of one
    (a GPU, a CPU in bf16), else the preset's pair."""
    assert default_draft_model("qwen2.5-coder-0.5b", heads_trained=True, flat_verify=True) == "heads"
    assert default_draft_model("qwen2.5-coder-0.5b", heads_trained=False, flat_verify=True) == "qwen2.5-coder-0.5b"
    assert default_draft_model("qwen2.5-coder-0.5b", heads_trained=True, flat_verify=False) == "qwen2.5-coder-0.5b"
    assert default_draft_model("", heads_trained=False, flat_verify=False) == ""


def test_bad_setups_get_clear_errors(ci_model_dir, draft_dir, tmp_path, engine):
    plain = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=1024, max_num_seqs=2))
    assert plain.hybrid is None
    with pytest.raises(RequestError, match="needs the engine's draft model"):
        plain.add_request(Request([1, 2, 3], drafter="hybrid"))
    with pytest.raises(ValueError, match="EDITAPPLY_DRAFT_MODEL"):
        LLMEngine(EngineConfig(model=str(ci_model_dir), drafter="hybrid", max_model_len=1024))
    probe = engine.tokenizer.encode("def f(x):")
    other = cut_model(ci_model_dir, tmp_path / "other", 2, swap=(probe[0], probe[1]))
    with pytest.raises(ValueError, match="another tokenizer"):
        LLMEngine(EngineConfig(model=str(ci_model_dir), draft_model=str(other), max_model_len=1024))
    with pytest.raises(ValueError, match="draft_tokens"):
        EngineConfig(draft_tokens=64)


def stub_model(catch_up=lambda: 0.0, lag=None, **fields):
    """What the rule reads of a DraftModel: its costs (priced by DraftModel.draft_seconds; no
    chained step measured, so each is priced as a drafting forward), and a catch-up of
    `catch_up()` seconds (0: in sync) for any sequence, or `lag` and `catch_up_seconds` given."""
    from engine.speculative.draft_model import DraftModel
    from engine.step_cost import StepCost

    fields = {"catch_up_seconds": lambda jobs: catch_up(), **fields}
    model = SimpleNamespace(cost=None, chain_cost=StepCost(), reset_costs=lambda: None,
                            continues_lead=DraftModel.continues_lead, max_tokens=DraftModel.max_tokens,
                            lag=lag or (lambda seq, lead: 1 if catch_up() else 0), **fields)
    model.draft_seconds = lambda d, rows: DraftModel.draft_seconds(model, d, rows)
    return model


def test_draft_length_follows_costs_and_acceptance():
    """The rule alone (engine/speculative/hybrid.py): on a GPU-like cost (the target's step barely grows
    with fed tokens, a draft forward costs a tenth of a step) a well-accepted draft model writes
    all D tokens; on a small CPU (each fed token costs 40% of a step) with the same acceptance
    it writes fewer; a draft model that is rarely right does not run, nor one that must first
    catch up on more than the step's gain is worth."""
    from engine.speculative.hybrid import _SeqDraft
    from engine.step_cost import StepCost

    def d_for(a, b, a_d, b_d, alpha, catch_up=0.0):
        hybrid = HybridDrafting(stub_model(lambda: catch_up), draft_tokens=5)
        hybrid.model.cost = cost = StepCost(min_samples=2)
        for n in (1, 4, 9):
            cost.observe(n, a_d + b_d * n)
        hybrid.rates[MODEL] = Acceptance(prior=alpha, weight=1e6)
        gains = [expected_commits(alpha, d) for d in range(6)]
        return hybrid._choose_d([_SeqDraft(None, 15, [], gains, [MODEL] * 6)], [[]], (a, b), catch_up)[0]

    assert d_for(a=0.004, b=0.00002, a_d=0.0004, b_d=0.00001, alpha=0.85) == 5
    assert 0 < d_for(a=0.12, b=0.05, a_d=0.01, b_d=0.005, alpha=0.85) < 5
    assert d_for(a=0.004, b=0.00002, a_d=0.0004, b_d=0.00001, alpha=0.05) == 0
    # The same well-accepted model, but it must first read a 2k-token quote (20 ms): not this step.
    assert d_for(a=0.004, b=0.00002, a_d=0.0004, b_d=0.00001, alpha=0.85, catch_up=0.02) == 0


def test_probes_spend_a_bounded_share_of_the_time():
    """When the rule declines the model, a probe still drafts one token now and then; with the
    costs measured, the steps until the next probe take 1/share times what it costs, the share
    halving from PROBE_SHARE to MIN_PROBE_SHARE with each probe while the model stays declined:
    one that must first read a long quote (an eager prefill, 20 verify steps' worth) waits far
    longer than one in sync. Once the rule runs the model, the share is PROBE_SHARE again. While
    a price is missing (the draft's step, or a catch-up of a kind not seen yet), every
    PROBE_EVERY-th step probes, from the first."""
    from engine.speculative.hybrid import MIN_PROBE_SHARE, PROBE_EVERY, PROBE_SHARE
    from engine.step_cost import StepCost

    def measured(catch_up: float, sizes=(1, 4)) -> HybridDrafting:
        hybrid = HybridDrafting(stub_model(lambda: catch_up))
        hybrid.model.cost = cost = StepCost(min_samples=2)
        for n in sizes:
            cost.observe(n, 0.001 + 1e-5 * n)  # a draft forward: half a verify step
        return hybrid

    def probes(catch_up: float, steps: int = 2000, hybrid=None) -> list[int]:
        hybrid = hybrid or measured(catch_up)
        due = []
        for step in range(steps):
            hybrid.stats.steps += 1  # as propose() counts them
            due += [step] if hybrid._probe_due([[1, 2]], (0.002, 1e-5), catch_up) else []
        return due

    def expected(probe: float, seconds: float) -> int:
        """Probes in `seconds` of steps, each after 1/share times `probe` seconds."""
        share, n = PROBE_SHARE, 0
        while (seconds := seconds - probe / share) >= 0:
            n, share = n + 1, max(MIN_PROBE_SHARE, share / 2)
        return n

    step = 0.002 + 3e-5
    assert len(probes(0.0)) == pytest.approx(expected(0.00101, 2000 * step), abs=1)
    assert len(probes(0.04)) == pytest.approx(expected(0.04101, 2000 * step), abs=1)
    assert len(probes(0.04)) < len(probes(0.0)) / 10
    hybrid = measured(0.0)
    probes(0.0, 2000, hybrid)
    assert hybrid.probe_share == MIN_PROBE_SHARE
    # The rule runs the model (a well-accepted one, in sync): the full share again.
    hybrid.rates[MODEL] = Acceptance(prior=0.95, weight=1e6)
    hybrid.model.propose = lambda jobs: [[1] * n for _, _, n in jobs]
    hybrid.model.caught_up = 0
    hybrid.propose([SimpleNamespace(id="s", tokens=[1, 2], lookup_fills=False, drafter=None)], [[]], [15], (0.002, 1e-5))
    assert hybrid.stats.model_steps == 1 and hybrid.stats.probes == 0 and hybrid.probe_share == PROBE_SHARE
    assert probes(0.0, 64, measured(0.0, sizes=())) == list(range(0, 64, PROBE_EVERY))
    assert probes(math.inf, 64) == list(range(0, 64, PROBE_EVERY))


def test_steps_wait_out_a_catch_up_then_pay_it():
    """A well-accepted model 40 ms behind (an eager prefill after a long quote): no one step's
    gain covers the catch-up, so the steps that would use the model wait until they have taken
    as long as it (ski rental), then the model runs; a quote resuming (a step without plans) ends
    the wait. A model in sync runs at once."""
    from engine.speculative.hybrid import _SeqDraft
    from engine.step_cost import StepCost

    lag = {"seconds": 0.04}
    hybrid = HybridDrafting(stub_model(lambda: lag["seconds"]), draft_tokens=5)
    hybrid.model.cost = cost = StepCost(min_samples=2)
    for n in (1, 4, 9):
        cost.observe(n, 0.0004 + 0.00001 * n)
    hybrid.rates[MODEL] = Acceptance(prior=0.85, weight=1e6)
    hybrid.rates[LOOKUP] = Acceptance(prior=0.3, weight=1e6)
    plans = [_SeqDraft(None, 15, [], [expected_commits(0.85, d) for d in range(6)], [MODEL] * 6)]
    fit = (0.004, 0.00002)  # a 4 ms verify step: the wait lasts about ten steps
    waited = 0
    while (decision := hybrid._decide(plans, [[]], fit))[0] == 0:
        waited += 1
    assert 8 <= waited <= 10 and decision[1] >= 0.04 and hybrid.stats.after_wait == 1
    lag["seconds"] = 0.0  # in sync now: the model runs at once
    assert hybrid._decide(plans, [[]], fit)[0] == 5
    lag["seconds"] = 0.04  # behind again; halfway through the wait a quote resumes
    for _ in range(5):
        assert hybrid._decide(plans, [[]], fit)[0] == 0
    assert hybrid._decide([], [[1] * 15], fit) == (0, 0.0, [])
    assert sum(hybrid._decide(plans, [[]], fit)[0] == 0 for _ in range(waited)) == waited  # from the start


def test_a_flat_cost_is_priced_by_its_mean():
    from engine.step_cost import StepCost

    cost = StepCost(min_samples=2)
    assert cost.fit_or_flat() is None
    for n in (100, 2000, 700):
        cost.observe(n, 0.012)  # launch-bound: the same 12 ms at any size, no slope to fit
    assert cost.fit() is None and cost.fit_or_flat() == pytest.approx((0.012, 0.0))
    cost.observe(4000, 0.03)
    a, b = cost.fit_or_flat()
    assert b > 0 and a > 0


def test_a_sequence_behind_does_not_hold_back_those_in_sync():
    """Two sequences where a well-accepted model pays: `synced` (it has read all it needs) and
    `new` (its 2k-token prompt unread: a 40 ms catch-up). The model runs for `synced` at once,
    while `new` waits out its catch-up (ski rental) and then joins. Cold (costs not measured):
    `synced` drafts and `new` waits for a probe, and a probe reads for one sequence only, the one
    with least to read (before, a cold engine caught up every prompt of a batch at once)."""
    from engine.speculative.hybrid import _SeqDraft
    from engine.step_cost import StepCost

    lags = {"synced": 0, "new": 2000, "newer": 3000}
    model = stub_model(lag=lambda seq, lead: lags[seq.id],
                       catch_up_seconds=lambda jobs: sum(0.04 * lags[s.id] / 2000 for s, _ in jobs))
    hybrid = HybridDrafting(model, draft_tokens=5)
    model.cost = StepCost(min_samples=2)
    hybrid.rates[MODEL] = Acceptance(prior=0.85, weight=1e6)
    hybrid.rates[LOOKUP] = Acceptance(prior=0.3, weight=1e6)

    def plan(name):
        return _SeqDraft(SimpleNamespace(id=name), 15, [], [expected_commits(0.85, d) for d in range(6)], [MODEL] * 6)

    synced, new = plan("synced"), plan("new")
    fit = (0.004, 0.00002)
    # Cold: no draft cost measured yet.
    d, _, chosen = hybrid._decide([new, synced], [[], []], fit)
    assert d >= 1 and chosen == [synced]
    hybrid.stats.steps = 1  # the first step with plans probes: for `new`, the least behind of two
    d, _, chosen = hybrid._decide([plan("newer"), new], [[], []], None)
    assert (d, chosen[0].seq.id) == (1, "new") and hybrid.stats.probes == 1
    # Measured: `synced` runs every step, `new` joins after about ten 4 ms steps.
    for n in (1, 4, 9):
        model.cost.observe(n, 0.0004 + 0.00001 * n)
    hybrid.stats.steps = 2
    waited = 0
    while len((decision := hybrid._decide([synced, new], [[], []], fit))[2]) == 1 and waited < 100:
        assert decision[0] >= 1 and decision[2] == [synced]
        waited += 1
    assert 8 <= waited <= 11 and decision[2] == [synced, new] and decision[1] >= 0.04
    assert hybrid.stats.probes == 1
