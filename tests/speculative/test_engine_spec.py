"""Speculative decoding through the whole engine: exactness on the real CI model, and the
distribution of sampled output on a small model (a real model with random weights; its shape is
tiny so that thousands of samples run in seconds)."""

import json
import math

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.types import SamplingParams
from engine.types import Request
from prompts.apply import build_apply_prompt

transformers = pytest.importorskip("transformers")

DEV = "bench/data/dev.jsonl"


def generate(engine, request):
    out = []
    for ev in engine.generate(request):
        out.extend(ev.token_ids)
        stats = ev.stats
    return out, stats


@pytest.fixture(scope="module")
def engine(ci_model_dir):
    return LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=4096, max_num_seqs=4))


def smallest_cases(n):
    rows = [json.loads(line) for line in open(DEV)]
    return sorted(rows, key=lambda r: len(r["original"]))[:n]


@pytest.mark.parametrize("case", smallest_cases(2), ids=lambda r: r["id"].split(":")[-1])
def test_greedy_speculation_is_identical_on_apply_prompts(engine, case):
    tok = engine.tokenizer
    prompt = build_apply_prompt(case["original"], case["update_snippet"], case["instruction"], case["language"])
    ids = prompt.prompt_ids(tok)
    sources = {"original": tok.encode(case["original"]), "snippet": tok.encode(case["update_snippet"])}
    params = SamplingParams(max_tokens=80)
    plain, _ = generate(engine, Request(ids, params, drafter="none", verify_tokens=1))
    for drafter in ("lookup", "ngram-earliest", "pld"):
        spec, stats = generate(engine, Request(ids, params, sources=sources, drafter=drafter, verify_tokens=16))
        assert spec == plain, drafter
        assert stats.steps < len(plain) or drafter != "lookup"
        assert sum(stats.accepted_per_step_hist.values()) == stats.steps
    # The engine's default blocks (64), plain's own output as the predicted merge: long blocks, the same text.
    spec, stats = generate(engine, Request(ids, params, sources={"prediction": plain, **sources}, drafter="lookup"))
    assert spec == plain and max(stats.accepted_per_step_hist) > 16


def test_greedy_speculation_is_identical_on_a_rag_prompt(engine):
    tok = engine.tokenizer
    doc = open("engine/kv_cache.py").read()[:2500]
    text = f"<document>\n{doc}\n</document>\nQuote the docstring of the class LayerKV exactly."
    ids = tok.encode_chat([{"role": "user", "content": text}])
    params = SamplingParams(max_tokens=64)
    plain, _ = generate(engine, Request(ids, params, drafter="none", verify_tokens=1))
    spec, stats = generate(engine, Request(ids, params, sources={"documents": tok.encode(doc)}, drafter="lookup"))
    assert spec == plain
    assert stats.drafted > 0


def test_greedy_speculation_is_identical_under_int4_kv(ci_model_dir):
    """int4 KV quantizes a block's keys over all its tokens, and verify blocks write drafts across
    block boundaries that are then rolled back: still the same tokens as one at a time. In fp32:
    batch-invariant mode (bf16 on the CPU) does not cover int4's full-precision window."""
    engine = LLMEngine(EngineConfig(model=str(ci_model_dir), dtype="fp32", max_model_len=2048, kv_dtype="int4"))
    tok = engine.tokenizer
    doc = open("engine/block_manager.py").read()[:1500]
    ids = tok.encode_chat([{"role": "user", "content": f"<document>\n{doc}\n</document>\nQuote chain_hash exactly."}])
    params = SamplingParams(max_tokens=48)
    plain, _ = generate(engine, Request(ids, params, drafter="none", verify_tokens=1))
    spec, stats = generate(engine, Request(ids, params, sources={"documents": tok.encode(doc)}, drafter="lookup"))
    assert spec == plain
    assert stats.drafted > 0 and stats.steps < len(plain)


def test_cancel_mid_generation_frees_every_block(engine):
    free = engine.kv.allocator.num_free
    ids = engine.tokenizer.encode_chat([{"role": "user", "content": "Count from 1 to 100."}])
    stream = engine.generate(Request(ids, SamplingParams(max_tokens=200)))
    next(stream)
    next(stream)
    stream.close()  # the caller walks away: the generator's cleanup cancels the request
    assert engine.kv.allocator.num_free == free
    assert not engine.has_work()


# ---- sampling distribution on a small model -------------------------------------------------

VOCAB = 8


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """A 2-layer llama over 8 tokens, random weights; lm_head scaled so that sampled continuations
    are neither uniform nor deterministic (a few hundred distinct 4-token outputs)."""
    from tokenizers import Tokenizer, models

    folder = tmp_path_factory.mktemp("small")
    torch.manual_seed(3)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   bos_token_id=0, eos_token_id=7)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(8)
    model.save_pretrained(folder)
    Tokenizer(models.WordLevel({chr(97 + i): i for i in range(VOCAB)}, unk_token="a")).save(str(folder / "tokenizer.json"))
    return folder


def small_engine_with(folder, sampled_verify):
    # Fixed draft lengths: adaptive sizing follows measured step times, and on a loaded machine it
    # can cut every draft to its first token -- which this model rarely accepts -- so whether any
    # draft is accepted would depend on the machine's load, not on the rule under test. fp32: in
    # bf16 the CPU runs batch-invariant, whose attention goes one sequence at a time (256 here).
    return LLMEngine(EngineConfig(model=str(folder), device="cpu", dtype="fp32", max_model_len=64, max_num_seqs=256,
                                  kv_cache_tokens=256 * 32, max_batch_tokens=4096, sampled_verify=sampled_verify,
                                  adaptive_drafts=False))


PROMPT = [1, 2, 3, 4, 5, 6, 1, 2, 3]


def sample_continuations(engine, n, speculative: bool, length=4, same_seeds=False):
    # The lookup source is the prompt plus the greedy continuation: drafts that sampling often
    # follows and sometimes leaves, so both acceptance and rejection are exercised.
    greedy = [t for ev in engine.generate(Request(PROMPT, SamplingParams(max_tokens=8, ignore_eos=True),
                                                  drafter="none")) for t in ev.token_ids]
    # Disjoint seeds for the two arms, so that the samples compared are independent.
    first = n if speculative and not same_seeds else 0
    seqs = [engine.add_request(Request(
        PROMPT, SamplingParams(temperature=0.8, top_p=0.9, max_tokens=length, seed=first + i, ignore_eos=True),
        sources={"prediction": PROMPT + greedy}, drafter="lookup" if speculative else "none", verify_tokens=4))
        for i in range(n)]
    while engine.has_work():
        engine.step()
    return [tuple(s.output_ids) for s in seqs], sum(s.stats.drafted for s in seqs), sum(s.stats.accepted for s in seqs)


def homogeneity_pvalue(a: list[tuple], b: list[tuple], min_count: int = 10) -> float:
    """Chi-square test that two samples come from one distribution; outcomes seen fewer than
    `min_count` times in both samples together are pooled into one bin."""
    counts: dict = {}
    for i, sample in enumerate((a, b)):
        for x in sample:
            counts.setdefault(x, [0, 0])[i] += 1
    bins = [c for c in counts.values() if sum(c) >= min_count]
    rare = [sum(c[i] for c in counts.values() if sum(c) < min_count) for i in (0, 1)]
    if sum(rare) >= min_count:
        bins.append(rare)
    na, nb = len(a), len(b)
    stat = 0.0
    for ca, cb in bins:
        for obs, n in ((ca, na), (cb, nb)):
            exp = (ca + cb) * n / (na + nb)
            stat += (obs - exp) ** 2 / exp
    df = torch.tensor((len(bins) - 1) / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(df, torch.tensor(stat / 2, dtype=torch.float64)))


def always_accept(probs, draft, generator=None):
    """A deliberately wrong rule: every draft token is accepted, the bonus sampled after it."""
    from engine.sampling import sample
    from engine.speculative.verify import PADDING

    B, K, _ = probs.shape
    out = torch.full((B, K), PADDING, dtype=torch.long)
    for b in range(B):
        d = [int(t) for t in draft[b] if t >= 0]
        out[b, : len(d)] = torch.tensor(d, dtype=torch.long)
        out[b, len(d)] = sample(probs[b, len(d)][None], generator)[0]
    return out


N_SAMPLES = 2000


@pytest.fixture(scope="module")
def plain_samples(small_model):
    return sample_continuations(small_engine_with(small_model, "coupled"), N_SAMPLES, speculative=False)[0]


def always_accept_coupled(probs, draft, noise):
    """A deliberately wrong rule for the coupled verifier: accept every draft token."""
    from engine.speculative.verify import verify_coupled

    return verify_coupled(probs, draft, noise) if draft.numel() == 0 else always_accept(probs, draft)


@pytest.mark.parametrize("rule", ["coupled", "rejection", "always-accept"])
def test_sampled_speculation_matches_plain_distribution(small_model, plain_samples, rule, monkeypatch):
    mode = "rejection" if rule == "rejection" else "coupled"
    if rule == "always-accept":
        monkeypatch.setattr("engine.engine.verify_coupled", always_accept_coupled)
    spec, drafted, accepted = sample_continuations(small_engine_with(small_model, mode), N_SAMPLES, speculative=True)
    assert drafted > N_SAMPLES // 4  # drafts were proposed
    p = homogeneity_pvalue(plain_samples, spec)
    assert not math.isnan(p)
    if rule == "always-accept":
        assert p < 1e-6, f"the test cannot tell a wrong acceptance rule apart (p={p})"
    else:
        assert 0 < accepted < drafted  # some drafts accepted, some rejected
        assert p > 1e-3, p


def test_coupled_sampling_gives_the_same_text_with_and_without_speculation(small_model):
    """With the noise keyed by (seed, position), a seed fixes the sample whatever was drafted."""
    engine = small_engine_with(small_model, "coupled")
    plain = sample_continuations(engine, 300, speculative=False, same_seeds=True)[0]
    spec = sample_continuations(engine, 300, speculative=True, same_seeds=True)[0]
    assert spec == plain
