"""Drafters on tiny literal token arrays: lookup (cursors, re-anchoring, priority, length) and baselines."""

import random

import numpy as np

import pytest

from engine.speculative.baselines import EarliestNgramDrafter, earliest_ngram_draft, index_first_ngrams
from engine.speculative.drafters import DRAFTER_KINDS, DraftConfig, NoDrafter, make_drafter
from engine.speculative.lookup import (
    IndexCache,
    LookupDrafter,
    SortedIndex,
    draft_length,
    find_anchor,
    follow,
    gram_hash,
    grow_matches,
    index_ngrams,
    nearest,
    ngram_hashes,
    sorted_indexes,
    window,
)

PROMPT = [100]  # a one-token prompt: no 2-gram, so the prompt source never matches


def lookup(**sources):
    return LookupDrafter(sources, prompt_len=len(PROMPT))


# ---- pure functions: the docstring examples --------------------------------------------------

def test_index_ngrams_example():
    assert index_ngrams([5, 6, 7, 5, 6], 2) == {(5, 6): [2, 5], (6, 7): [3], (7, 5): [4]}
    tokens = [5, 6, 7, 5, 6]
    index = index_ngrams(tokens[:3], 2)
    tokens_grown = tokens[:3] + tokens[3:]
    assert index_ngrams(tokens_grown, 2, index, start=4) == index_ngrams(tokens, 2)


def test_nearest_prefers_at_or_after_then_before():
    assert [nearest([3, 10, 17], ref) for ref in (11, 10, 20, 0)] == [17, 10, 17, 3]


def test_window_centres_on_ref_and_respects_limit():
    assert window([1, 4, 6, 9, 12, 15], ref=10, limit=15, size=2) == [9, 12]
    assert window([1, 4, 6, 9, 12, 15], ref=0, limit=16, size=3) == [1, 4, 6]
    assert window([1, 4, 6, 9, 12, 15], ref=99, limit=16, size=3) == [9, 12, 15]


def test_grow_matches_example():
    context, source = [4, 9, 1, 2], [9, 1, 2, 0, 8, 1, 2, 3, 9, 1, 2, 5]
    assert grow_matches(context, source, [3, 7, 11], 2, max_len=16) == (3, [3, 11])
    assert grow_matches(context, source, [3, 7, 11], 2, max_len=2) == (2, [3, 7, 11])


def test_follow_example():
    assert follow([1, 2, 3, 4], 1, [2, 3]) == 2
    assert follow([1, 2, 3, 4], 1, [2, 7]) == 1
    assert follow([1, 2, 3, 4], 3, [4, 5]) == 1  # runs off the end of the source


def test_find_anchor_example():
    source = [1, 2, 7, 3, 1, 2, 8, 3, 1, 2, 9]
    indexes = [(2, index_ngrams(source, 2))]
    assert find_anchor([0, 3, 1, 2], source, indexes, ref=7, max_match=16, max_candidates=64) == (10, 3)
    assert find_anchor([0, 3, 1, 2], source, indexes, ref=0, max_match=16, max_candidates=64) == (6, 3)
    assert find_anchor([0, 5, 6], source, indexes, ref=0, max_match=16, max_candidates=64) is None


def test_draft_length_example():
    assert [draft_length(run, 15, 2.0) for run in (0, 2, 3, 8, 40)] == [0, 4, 6, 15, 15]


# ---- lookup drafter scenarios ------------------------------------------------------------------

def test_empty_draft_without_a_match():
    d = lookup(original=[1, 2, 3, 4])
    assert d.propose(PROMPT + [7, 8], 15) == []
    assert d.propose(PROMPT + [7, 8, 3], 15) == []  # one token matches: below min_match
    assert d.propose(PROMPT + [7, 8, 3, 4], 15) == []  # (3, 4) matches, but nothing follows it
    assert d.last_source is None


def test_cursor_continues_after_acceptance():
    original = list(range(10, 40))
    d = lookup(original=original)
    ctx = PROMPT + [10, 11]
    assert d.propose(ctx, 15) == [12, 13, 14, 15]  # fresh 2-token match: a short draft
    searches = d.stats["searches"]["original"]
    ctx += [12, 13, 14, 15, 16]  # all 4 accepted plus the bonus 16
    assert d.propose(ctx, 15) == list(range(17, 31))  # run 7 -> 14 tokens, from the cursor
    ctx += list(range(17, 31)) + [31]
    assert d.propose(ctx, 15) == list(range(32, 40))  # to the end of the source
    assert d.stats["searches"]["original"] == searches  # the cursor held: no re-search
    assert d.stats["misses"] == {}


def test_cursor_is_checked_not_assumed():
    # The last draft was [12, 13, 14, 15] but only 12 was accepted, and 99 recovered.
    d = lookup(original=list(range(10, 40)))
    ctx = PROMPT + [10, 11]
    d.propose(ctx, 15)
    ctx += [12, 99]
    assert d.propose(ctx, 15) == []
    assert d.stats["misses"] == {"original": 1}
    ctx += [14, 15]  # the model skipped 13: re-anchors on (14, 15)
    assert d.propose(ctx, 15) == [16, 17, 18, 19]


def test_lookahead_bets_on_the_source_after_the_draft():
    """`lookahead` (Scheduler.plan_ahead's bet): the token after the draft, then the draft that
    would follow if all of it and that token were committed -- the same as `propose` then gives."""
    original = list(range(10, 60))
    d = lookup(original=original)
    ctx = PROMPT + [10, 11]
    draft = d.propose(ctx, 15)
    assert draft == [12, 13, 14, 15]
    bet = d.lookahead(ctx, draft, 15)
    assert bet == [16] + list(range(17, 31))  # run 2 + 4 + 1 = 7 -> 14 tokens
    assert d.propose(ctx + draft + [16], 15) == bet[1:]
    # After a step launched from a bet, the drafter has not seen its tokens: it catches up first.
    ctx += draft + [16]
    assert d.lookahead(ctx, bet[1:], 15) == [31] + list(range(32, 47))
    assert d.lookahead(ctx, [17, 99], 15) == []  # not this drafter's draft: no bet
    assert lookup(original=original).lookahead(PROMPT + [99], [], 15) == []  # no match: no bet
    end = lookup(original=[10, 11, 12, 13])
    assert end.lookahead(PROMPT + [10, 11], end.propose(PROMPT + [10, 11], 15), 15) == []  # the source ends


def test_repeated_code_reanchors_to_the_nearest_occurrence():
    # Three near-identical functions f, g, h: a header token each, then the same body 1..6.
    original = [50, 1, 2, 3, 4, 5, 6, 51, 1, 2, 3, 4, 5, 6, 52, 1, 2, 3, 4, 5, 6]
    d = lookup(original=original)
    ctx = PROMPT + [50, 1]
    assert d.propose(ctx, 15) == [2, 3, 4, 5]
    ctx += [2, 3, 4, 5, 6]
    assert d.propose(ctx, 15) == [51, 1, 2, 3, 4, 5, 6, 52, 1, 2, 3, 4, 5, 6]
    ctx += [51, 1, 2, 99]  # inside g the edit inserts 99 before 3: a miss at position 10
    assert d.propose(ctx, 15) == []
    ctx += [3]
    assert d.propose(ctx, 15) == []
    ctx += [4]  # (3, 4) occurs in f, g and h; g's is the first at or after the miss
    assert d.propose(ctx, 15) == [5, 6, 52, 1]  # earliest occurrence would give [5, 6, 51, 1]


def test_reanchors_before_the_cursor_when_nothing_follows_it():
    original = [1, 2, 3, 9, 1, 2, 4, 8, 8, 8]
    d = lookup(original=original)
    ctx = PROMPT + [8, 8]
    assert d.propose(ctx, 15) == [8]  # anchored near the end
    ctx += [5, 1, 2]  # a miss at the end; (1, 2) occurs only before it: take the nearest, at 6
    assert d.propose(ctx, 15) == [4, 8, 8, 8]


def test_a_longer_match_beats_a_nearer_one():
    original = [7, 1, 2, 3, 0, 0, 8, 2, 3, 5, 5]
    d = lookup(original=original)
    assert d.propose(PROMPT + [7, 1, 2, 3], 15) == [0, 0, 8, 2, 3, 5, 5]  # length 4 at 4, not (2, 3) at 9


def test_prediction_drafts_from_the_first_output_token():
    """The predicted output is aligned with the output: no suffix match needed to start."""
    d = lookup(prediction=list(range(100, 140)), original=list(range(100, 140)))
    assert d.propose(PROMPT, 15) == list(range(100, 115))
    assert d.last_source == "prediction"


def test_prediction_has_priority_on_equal_runs():
    d = lookup(prediction=[1, 2, 3, 4, 5, 6, 7, 8], original=[1, 2, 3, 4, 5, 9, 9, 9])
    ctx = PROMPT + [1, 2]
    assert d.propose(ctx, 15) == [3, 4, 5, 6, 7, 8]  # trusted from the start: the whole rest
    assert d.last_source == "prediction"
    ctx += [3, 4, 5, 6, 7]  # original misses at 6; prediction holds
    assert d.propose(ctx, 15) == [8]


def test_a_source_with_a_longer_run_beats_priority():
    d = lookup(prediction=[1, 2, 3, 4, 5, 6, 7, 8, 9], original=[1, 2, 3, 40, 41, 42, 43, 44, 45])
    ctx = PROMPT + [1, 2]
    assert d.propose(ctx, 15) == [3, 4, 5, 6, 7, 8, 9]
    ctx += [3, 40]  # 3 accepted, 40 recovered: the model follows the original, not the prediction
    assert d.propose(ctx, 15) == [41, 42, 43, 44, 45]
    assert d.last_source == "original"


def test_adaptive_draft_length():
    original = list(range(10, 60))
    assert lookup(original=original).propose(PROMPT + [99, 10, 11], 15) == [12, 13, 14, 15]
    assert lookup(original=original).propose(PROMPT + [10, 11, 12], 15) == list(range(13, 19))
    assert lookup(original=original).propose(PROMPT + list(range(10, 20)), 15) == list(range(20, 35))
    assert lookup(original=original).propose(PROMPT + list(range(10, 20)), 3) == [20, 21, 22]
    assert lookup(original=original).propose(PROMPT + list(range(10, 20)), 0) == []
    steady = LookupDrafter({"original": original}, len(PROMPT), growth=100.0)
    assert len(steady.propose(PROMPT + [99, 10, 11], 15)) == 15


def test_generated_tokens_are_a_source():
    d = lookup()
    assert d.propose(PROMPT + [5, 6, 7, 8, 9, 1], 15) == []
    ctx = PROMPT + [5, 6, 7, 8, 9, 1, 5, 6]  # the output repeats itself
    assert d.propose(ctx, 15) == [7, 8, 9, 1]
    assert d.last_source == "generated"


def test_generated_repetition_runs_past_its_end():
    # A period-2 repetition: the copy overlaps itself, like LZ77, instead of stopping at the end.
    d = lookup()
    assert d.propose(PROMPT + [3, 4, 3, 4, 3, 4], 6) == [3, 4, 3, 4, 3, 4]


def test_prompt_is_the_last_source():
    prompt = [100, 7, 8, 9, 10, 101]
    d = LookupDrafter({}, prompt_len=len(prompt))
    assert d.propose(prompt + [7, 8], 15) == [9, 10, 101]
    assert d.last_source == "prompt"
    off = LookupDrafter({}, prompt_len=len(prompt), prompt_as_source=False)
    assert off.propose(prompt + [7, 8], 15) == []


def test_context_grows_by_several_steps_at_once():
    original = list(range(10, 60))
    d = lookup(original=original)
    ctx = PROMPT + [10, 11]
    d.propose(ctx, 15)
    ctx += list(range(12, 30))  # three steps' worth of commits arrive in one call
    assert d.propose(ctx, 15) == list(range(30, 45))
    ctx += list(range(30, 35)) + [77, 78] + list(range(37, 40))  # with a substitution inside
    assert d.propose(ctx, 15) == list(range(40, 46))  # re-anchored on (37, 38, 39): run 3 -> 6


def test_reserved_source_names_are_refused():
    with pytest.raises(ValueError, match="reserved"):
        LookupDrafter({"generated": [1, 2]}, prompt_len=1)


def test_shrinking_context_is_refused():
    d = lookup(original=[1, 2, 3])
    d.propose(PROMPT + [1, 2, 3], 15)
    with pytest.raises(ValueError, match="shrank"):
        d.propose(PROMPT, 15)


def brute_force_anchor(context, source, ref, min_match, max_match):
    """Longest suffix match (capped), nearest ref among equals; O(len(source) * max_match)."""
    best_len, ends = 0, []
    for p in range(1, len(source)):  # p = position after the match; needs source[p]
        m = 0
        while m < min(max_match, p, len(context)) and source[p - 1 - m] == context[-1 - m]:
            m += 1
        if m > best_len:
            best_len, ends = m, [p]
        elif m == best_len and m:
            ends.append(p)
    if best_len < min_match:
        return None
    return nearest(ends, ref), best_len


def test_find_anchor_equals_brute_force_on_random_sources():
    rng = random.Random(0)
    for trial in range(400):
        alphabet = rng.choice([2, 3, 5, 20])
        source = [rng.randrange(alphabet) for _ in range(rng.randrange(1, 60))]
        context = [rng.randrange(alphabet) for _ in range(rng.randrange(1, 30))]
        if rng.random() < 0.5:  # make long matches common
            i = rng.randrange(len(source))
            context += source[max(0, i - rng.randrange(12)) : i]
        ref = rng.randrange(len(source) + 1)
        min_match, long_match, max_match = rng.choice([(1, 4, 8), (2, 8, 16), (2, 2, 5), (3, 6, 6)])
        indexes = [(n, index_ngrams(source, n)) for n in sorted({long_match, min_match}, reverse=True)]
        got = find_anchor(context, source, indexes, ref, max_match, max_candidates=10**6)
        assert got == brute_force_anchor(context, source, ref, min_match, max_match), (trial, source, context, ref)


def test_drafts_are_always_continuations_of_a_suffix_match():
    rng = random.Random(1)
    for _ in range(50):
        original = [rng.randrange(6) for _ in range(80)]
        # A "model" that copies the original with random edits; the drafter must only ever draft
        # source[p:p+n] where the context ends with source[p-2:p].
        output = []
        i = 0
        while i < len(original):
            r = rng.random()
            if r < 0.05:
                output.append(rng.randrange(6, 9))  # insertion
            elif r < 0.08:
                i += rng.randrange(1, 5)  # deletion
            else:
                output.append(original[i])
                i += 1
        d = lookup(original=original)
        ctx = list(PROMPT)
        for t in output:
            draft = d.propose(ctx, 15)
            if draft:
                # (A generated-source draft may run past the end, repeating itself: check the start.)
                src = {"original": original, "generated": ctx[1:]}[d.last_source]
                assert any(src[p - 2 : p] == ctx[-2:] and draft[: len(src) - p] == src[p : p + len(draft)]
                           for p in range(2, len(src)))
            ctx.append(t)


# ---- baselines -------------------------------------------------------------------------------

def test_ngram_earliest_vllm_docstring_example():
    context = [1, 2, 3, 4, 2, 3]
    first = {}
    index_first_ngrams(context, range(2, 4), first)
    assert earliest_ngram_draft(context, first, min_n=2, max_n=3, k=4) == [4, 2, 3]
    assert EarliestNgramDrafter(2, 3).propose(context, 4) == [4, 2, 3]


def test_ngram_earliest_takes_the_earliest_occurrence():
    # The same repeated functions as test_repeated_code_reanchors: vLLM goes back to f.
    context = [50, 1, 2, 3, 51, 1, 2, 3, 52, 1, 2]
    assert EarliestNgramDrafter(2, 3).propose(context, 4) == [3, 51, 1, 2]


def test_ngram_earliest_prefers_the_longest_n():
    context = [2, 3, 8, 1, 2, 3, 9, 5, 1, 2, 3]
    assert EarliestNgramDrafter(2, 3).propose(context, 3) == [9, 5, 1]  # (1, 2, 3), not (2, 3)
    assert EarliestNgramDrafter(2, 2).propose(context, 3) == [8, 1, 2]
    assert EarliestNgramDrafter(4, 5).propose(context, 3) == []  # nothing of length 4 or 5 recurs


def test_ngram_earliest_incremental_equals_from_scratch():
    rng = random.Random(2)
    context = [rng.randrange(4) for _ in range(200)]
    d = EarliestNgramDrafter(2, 4)
    for n in range(1, 200, 7):
        assert d.propose(context[:n], 15) == EarliestNgramDrafter(2, 4).propose(context[:n], 15)


def test_pld_first_match_and_fallback_to_unigrams():
    pld = make_drafter("pld", {}, 0, DraftConfig(pld_num_tokens=3))
    assert pld.propose([1, 2, 3, 1, 2, 4, 1, 2], 15) == [3, 1, 2]  # the first (1, 2)
    pld = make_drafter("pld", {}, 0, DraftConfig(pld_num_tokens=3))
    assert pld.propose([5, 6, 7, 9, 6], 15) == [7, 9, 6]  # (9, 6) never occurred: unigram 6
    assert make_drafter("pld", {}, 0).propose([5, 6, 7], 15) == []


def test_pld_matches_transformers_prompt_lookup():
    torch = pytest.importorskip("torch")
    generation = pytest.importorskip("transformers.generation.candidate_generator")
    rng = random.Random(3)
    for _ in range(100):
        context = [rng.randrange(5) for _ in range(rng.randrange(2, 40))]
        hf = generation.PromptLookupCandidateGenerator(num_output_tokens=10, max_matching_ngram_size=2, max_length=10**6)
        candidates, _ = hf.get_candidates(torch.tensor([context]))
        expected = candidates[0, len(context):].tolist()
        assert make_drafter("pld", {}, 0).propose(context, 15) == expected, context


# ---- factory and config ----------------------------------------------------------------------

@pytest.mark.parametrize("kind", DRAFTER_KINDS)
def test_make_drafter_builds_every_kind(kind):
    d = make_drafter(kind, {"original": [1, 2, 3, 4, 5]}, 1)
    draft = d.propose([100, 1, 2], 15)
    assert isinstance(draft, list)
    if kind == "none":
        assert isinstance(d, NoDrafter) and draft == []


def test_make_drafter_refuses_bad_arguments():
    with pytest.raises(ValueError, match="unknown drafter 'eagle'"):
        make_drafter("eagle", {}, 0)
    with pytest.raises(TypeError, match="prompt_len"):
        make_drafter("lookup", {}, [1, 2, 3])


@pytest.mark.parametrize("kwargs", [
    {"min_match": 0}, {"min_match": 5, "max_match": 4}, {"max_candidates": 0}, {"growth": 0},
    {"ngram_min_n": 3, "ngram_max_n": 2}, {"pld_num_tokens": 0},
])
def test_draft_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        DraftConfig(**kwargs)


# ---- shared indexes of long sources (a RAG document asked about again) -------------------------

def as_dict(index, tokens: list[int]) -> dict:
    """A SortedIndex (or GrowingIndex) read back gram by gram, to compare with index_ngrams' dict."""
    n = index.n
    grams = {tuple(tokens[i - n : i]) for i in range(n, len(tokens) + 1)}
    return {g: index.get(g) for g in grams}


def test_sorted_index_example():
    index = SortedIndex([5, 6, 7, 5, 6], 2)
    assert index.get((5, 6)) == [2, 5] and index.get((6, 7)) == [3]
    assert index.get((6, 5)) is None and SortedIndex([5], 2).get((5, 6)) is None
    assert gram_hash((1, 2, 3), base=10) == 123


def test_sorted_index_equals_the_dict_index_on_random_sources():
    rng = random.Random(3)
    for _ in range(200):
        tokens = [rng.randrange(rng.choice([2, 5, 200, 150_000])) for _ in range(rng.randrange(0, 300))]
        for n in (1, 2, 3, 8):
            index = SortedIndex(tokens, n)
            assert as_dict(index, tokens) == index_ngrams(tokens, n)
            assert index.get((10**6,) * n) is None  # a token no source holds


def test_sorted_index_tells_apart_hashes_that_share_a_bucket():
    """300,000 n-grams in 65,536 buckets: most buckets hold several hashes, and `find` answers
    only the key's own (in ascending positions), or None where its bucket holds others alone."""
    from engine.speculative.lookup import _buckets

    rng = random.Random(6)
    tokens = [rng.randrange(150_000) for _ in range(300_000)]
    index, truth = SortedIndex(tokens, 2), index_ngrams(tokens, 2)
    assert len(set(index.buckets.tolist())) < len(truth) // 4
    for gram in rng.sample(sorted(truth), 3000):
        assert index.get(gram) == truth[gram]

    def others_in_its_bucket(gram):
        bucket = _buckets(np.asarray([gram_hash(gram)], np.uint64))[0]
        return index.buckets.searchsorted(bucket, "right") - index.buckets.searchsorted(bucket)

    absent = [g for g in ((rng.randrange(150_000), rng.randrange(150_000)) for _ in range(3000)) if g not in truth]
    shared = [g for g in absent if others_in_its_bucket(g) > 0]
    assert len(shared) > 1000 and all(index.get(g) is None for g in shared)


def test_ngram_hashes_by_halves_equal_horners_rule():
    """The hashes built by halves (`ngram_hashes`) are gram_hash's, n-gram by n-gram, for lengths
    that share their halves and for one that shares none, and `sorted_indexes`' indexes equal the
    dict's."""
    rng = random.Random(5)
    for _ in range(50):
        tokens = [rng.randrange(rng.choice([3, 150_000, 1 << 40])) for _ in range(rng.randrange(0, 40))]
        hashes = ngram_hashes(np.asarray(tokens, dtype=np.uint64), (8, 2, 3, 5, 16))
        for n, h in hashes.items():
            assert h.tolist() == [gram_hash(tuple(tokens[i : i + n])) for i in range(len(tokens) - n + 1)]
        for n, index in zip((8, 2), sorted_indexes(tokens, (8, 2))):
            assert as_dict(index, tokens) == index_ngrams(tokens, n)


def test_find_anchor_with_colliding_hashes_equals_brute_force():
    """Base 0 hashes an n-gram to its last token, so every n-gram ending alike collides:
    find_anchor must keep only the real matches."""
    rng = random.Random(4)
    for trial in range(300):
        source = [rng.randrange(4) for _ in range(rng.randrange(1, 60))]
        context = [rng.randrange(4) for _ in range(rng.randrange(1, 30))]
        if rng.random() < 0.5:
            i = rng.randrange(len(source))
            context += source[max(0, i - rng.randrange(12)) : i]
        ref = rng.randrange(len(source) + 1)
        indexes = [(n, SortedIndex(source, n, base=0)) for n in (4, 2)]
        got = find_anchor(context, source, indexes, ref, 8, max_candidates=10**6)
        assert got == brute_force_anchor(context, source, ref, 2, 8), (trial, source, context, ref)


def test_index_cache_shares_the_index_of_an_identical_long_source():
    cache = IndexCache(max_entries=2, min_tokens=8)
    doc = [random.Random(0).randrange(50) for _ in range(40)]
    first = cache.get(doc, (4, 2))
    assert [as_dict(index, doc) for index in first] == [index_ngrams(doc, 4), index_ngrams(doc, 2)]
    assert cache.get(list(doc), (4, 2)) is first and cache.hits == 1  # equal tokens: the same indexes
    changed = doc[:-1] + [99]
    assert cache.get(changed, (4, 2)) is not first
    assert as_dict(cache.get(changed, (4, 2))[1], changed) == index_ngrams(changed, 2)
    assert as_dict(cache.get(doc, (3,))[0], doc) == index_ngrams(doc, 3)  # the n-gram lengths are part of the key
    assert cache.get(doc, (4, 2)) is not first  # the LRU held two entries: the first one was evicted


def test_index_cache_indexes_short_sources_afresh():
    cache = IndexCache(min_tokens=100)
    toks = [1, 2, 3, 1, 2]
    assert cache.get(toks, (2,))[0] is not cache.get(toks, (2,))[0] and cache.hits == cache.misses == 0


def test_drafts_from_a_cached_document_equal_drafts_from_a_fresh_index(monkeypatch):
    """Two requests on the same long document: the second reuses the first's index (never the
    generated source's, which grows) and proposes exactly what a fresh index would."""
    rng = random.Random(1)
    doc = [rng.randrange(200) for _ in range(3000)]
    context = [7, 7] + doc[1000:1010]
    cache = IndexCache(min_tokens=1024)
    monkeypatch.setattr("engine.speculative.lookup.SHARED_INDEXES", cache)
    drafts = []
    for _ in range(2):
        d = LookupDrafter({"document": doc}, prompt_len=2)
        drafts.append((d.propose(list(context), 15), d.propose(list(context) + doc[1010:1015], 15)))
    assert cache.hits >= 1 and drafts[0] == drafts[1] == (doc[1010:1025], doc[1015:1030])
    monkeypatch.setattr("engine.speculative.lookup.SHARED_INDEXES", IndexCache(min_tokens=10**9))
    fresh = LookupDrafter({"document": doc}, prompt_len=2)
    assert (fresh.propose(list(context), 15), fresh.propose(list(context) + doc[1010:1015], 15)) == drafts[0]


def test_sources_are_indexed_only_once_searched():
    """A right prediction is followed by its cursor: the file and the prompt are never indexed
    (a request's first step does not pay their indexes); a miss indexes what it searches, and the
    drafts equal those of a drafter whose indexes were all built up front."""
    rng = random.Random(2)
    file = [rng.randrange(300) for _ in range(400)]
    prediction = file[:200] + [999, 998] + file[200:]  # the edit inserts two tokens
    prompt = [7] + file

    def drafter(eager: bool) -> LookupDrafter:
        d = LookupDrafter({"prediction": prediction, "file": file}, prompt_len=len(prompt))
        d.propose(prompt, 15)  # the first call adds the prompt source
        for src in d._sources if eager else ():
            src.indexes
        return d

    d = drafter(eager=False)
    for step in range(0, 150, 15):
        assert d.propose(prompt + prediction[:step], 15) == prediction[step : step + 15]
    assert [s.name for s in d._sources if s._indexes is not None] == []
    truth = prediction[:200] + [555] + prediction[202:]  # the model writes another token
    lazy, eager = drafter(eager=False), drafter(eager=True)
    drafts = [(lazy.propose(prompt + truth[:n], 15), eager.propose(prompt + truth[:n], 15)) for n in range(0, 260, 5)]
    assert all(a == b for a, b in drafts)
    assert lazy._sources[1]._indexes is not None  # the miss at 200 searched the file


def test_the_generated_tokens_are_indexed_when_searched():
    """The generated tokens are indexed when their source is next searched, not as they arrive
    (at 64 requests indexing every step's tokens was the largest host cost of a step, H200,
    2026-12-05), a step's few in a dict and a long copy's many in one numpy build
    (GrowingIndex): after any mix of growth and searches, short and long, every n-gram's
    positions are those of an index built whole."""
    from engine.speculative.lookup import GrowingIndex, _Source

    rng = random.Random(3)
    src = _Source("generated", [], (8, 2), grows=True)
    for step in range(120):
        grow = rng.randrange(1, 17) if rng.random() < 0.8 else rng.randrange(200, 700)
        src.extend([rng.randrange(20) for _ in range(grow)])
        if step % 3 == 0 or step == 119:
            for n, index in src.indexes:
                assert isinstance(index, GrowingIndex)
                assert as_dict(index, src.tokens) == index_ngrams(src.tokens, n)
    assert len(src.indexes[1][1].runs) > 1  # long copies made runs, and runs joined
    assert src.indexes[1][1].get((99, 99)) is None
