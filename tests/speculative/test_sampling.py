"""Sampler: SamplingParams validation, target_probs against sort-based references, sample()."""

import math

import pytest
import torch

from engine.sampling import (
    apply_top_k,
    apply_top_p,
    sample,
    target_probs,
    top_p_threshold,
)
from engine.types import SamplingParams


def ref_top_k(logits, k):
    """HF TopKLogitsWarper: remove logits below the k-th largest (ties with it stay)."""
    kth = torch.sort(logits, descending=True).values[:, k - 1 : k]
    return logits.masked_fill(logits < kth, -math.inf)


def ref_top_p(probs, top_p):
    """HF TopPLogitsWarper on probabilities, in float64, made tie-inclusive; renormalized.

    Sort ascending, remove tokens whose cumulative mass is <= 1 - top_p (keeping the largest);
    then keep every token >= the smallest kept one, since a sort keeps an arbitrary subset of ties.
    """
    p64 = probs.double()
    top_p = torch.as_tensor(top_p, dtype=torch.float64).reshape(-1, 1)
    sorted_p, idx = torch.sort(p64, dim=-1)
    remove_sorted = sorted_p.cumsum(-1) <= 1 - top_p
    remove_sorted[:, -1] = False
    remove = remove_sorted.scatter(1, idx, remove_sorted)
    smallest_kept = p64.masked_fill(remove, math.inf).amin(-1, keepdim=True)
    kept = torch.where(p64 >= smallest_kept, p64, 0.0)
    return (kept / kept.sum(-1, keepdim=True)).float()


def test_params_defaults_are_greedy():
    p = SamplingParams()
    assert p.greedy and p.top_k == 0 and p.top_p == 1.0 and p.stop == () and not p.ignore_eos


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": math.inf}, "temperature"),
    ({"temperature": math.nan}, "temperature"),
    ({"top_k": -1}, "top_k"),
    ({"top_k": 2.5}, "top_k"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"seed": -1}, "seed"),
    ({"seed": 1.0}, "seed"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"stop": ["ok", ""]}, "stop"),
])
def test_params_rejects_bad_values(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        SamplingParams(**kwargs)


def test_params_wraps_a_single_stop_string():
    assert SamplingParams(stop="\n\n").stop == ("\n\n",)
    assert SamplingParams(stop=["a", "b"]).stop == ("a", "b")


def test_greedy_is_one_hot_at_the_first_argmax():
    logits = torch.tensor([[0.0, 3.0, 3.0, 1.0], [5.0, 0.0, 0.0, 0.0]])
    probs = target_probs(logits, SamplingParams(temperature=0))
    assert probs.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]


def test_temperature_only_is_softmax():
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    probs = target_probs(logits, SamplingParams(temperature=0.7))
    torch.testing.assert_close(probs, torch.softmax(logits / 0.7, -1))


@pytest.mark.parametrize("k", [1, 3, 17, 63, 64, 100])
def test_top_k_matches_reference(k):
    logits = torch.randn(8, 64, generator=torch.Generator().manual_seed(k))
    logits[0, :10] = 2.0  # ties at the top
    logits[1] = logits[1].round()  # ties everywhere
    expected = ref_top_k(logits, min(k, 64))
    assert torch.equal(apply_top_k(logits, k), expected)


def test_top_k_keeps_all_ties_with_the_kth_value():
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0]])
    assert apply_top_k(logits, 2).tolist() == [[3.0, -math.inf, 2.0, 2.0]]


@pytest.mark.parametrize("scale", [0.3, 1.0, 4.0, 20.0])  # flat to peaked
@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.99])
def test_top_p_matches_sort_reference(scale, top_p):
    gen = torch.Generator().manual_seed(int(scale * 100 + top_p * 1000))
    probs = torch.softmax(torch.randn(32, 500, generator=gen) * scale, -1)
    torch.testing.assert_close(apply_top_p(probs, top_p), ref_top_p(probs, top_p), rtol=1e-5, atol=1e-7)


def test_top_p_with_ties_keeps_the_whole_tied_group():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randint(0, 4, (64, 40), generator=gen).float()  # probabilities in 4 tied groups
    probs = torch.softmax(logits, -1)
    for top_p in (0.3, 0.6, 0.9):
        torch.testing.assert_close(apply_top_p(probs, top_p), ref_top_p(probs, top_p))
    uniform = torch.full((1, 8), 1 / 8)
    assert apply_top_p(uniform, 0.5).tolist() == uniform.tolist()  # 4 needed, all 8 tied: all kept


def test_top_p_keeps_at_least_the_most_likely_token():
    probs = torch.tensor([[0.5, 0.3, 0.2]])
    assert apply_top_p(probs, 0.01).tolist() == [[1.0, 0.0, 0.0]]


def test_top_p_threshold_example():
    probs = torch.tensor([[0.5, 0.1, 0.3, 0.1]])
    assert top_p_threshold(probs, torch.tensor([0.7])).tolist() == [pytest.approx(0.3)]


def test_top_p_bisection_fallback_matches_reference():
    # Flat rows: the top-4096 mass never reaches top_p, so the bisection decides. Per-row
    # top_p sits midway between two cumulative sums, so the boundary is far above float32 rounding.
    gen = torch.Generator().manual_seed(2)
    probs = torch.softmax(torch.randn(16, 6000, generator=gen) * 0.05, -1)
    cum = torch.sort(probs.double(), descending=True).values.cumsum(-1)
    j = torch.randint(4200, 5900, (16, 1), generator=gen)
    top_p = ((cum.gather(1, j) + cum.gather(1, j + 1)) / 2).squeeze(1)
    torch.testing.assert_close(apply_top_p(probs, top_p.tolist()), ref_top_p(probs, top_p), rtol=1e-5, atol=1e-8)


def test_top_p_threshold_is_the_same_through_topk_and_bisection():
    gen = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(32, 200, generator=gen) * 2, -1)
    top_p = torch.rand(32, generator=gen) * 0.98 + 0.01
    exact = top_p_threshold(probs, top_p, caps=(200,))
    for caps in [(2,), (2, 20), (1, 4, 16), ()]:  # more and more rows reach the bisection
        assert torch.equal(top_p_threshold(probs, top_p, caps=caps), exact)


def test_flat_distribution_keeps_everything():
    probs = target_probs(torch.zeros(2, 1000), SamplingParams(temperature=1.0, top_p=0.9))
    torch.testing.assert_close(probs, torch.full((2, 1000), 1e-3))


def test_temperature_then_top_k_then_top_p():
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(16, 300, generator=gen) * 3
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.9)
    expected = ref_top_p(torch.softmax(ref_top_k(logits / 0.8, 40), -1), 0.9)
    torch.testing.assert_close(target_probs(logits, params), expected, rtol=1e-5, atol=1e-7)


def test_per_row_params_equal_row_by_row():
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(4, 100, generator=gen) * 2
    rows = [SamplingParams(temperature=0), SamplingParams(temperature=1.3, top_k=5),
            SamplingParams(temperature=0.7, top_p=0.8), SamplingParams(temperature=1.0)]
    together = target_probs(logits, rows)
    for i, params in enumerate(rows):
        torch.testing.assert_close(together[i : i + 1], target_probs(logits[i : i + 1], params))
    with pytest.raises(ValueError, match="3 SamplingParams for 4 rows"):
        target_probs(logits, rows[:3])


def test_no_sort_of_the_vocabulary(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the sampler sorted the vocabulary")

    monkeypatch.setattr(torch, "sort", forbidden)
    monkeypatch.setattr(torch, "argsort", forbidden)
    monkeypatch.setattr(torch.Tensor, "sort", forbidden)
    monkeypatch.setattr(torch.Tensor, "argsort", forbidden)
    logits = torch.randn(4, 5000, generator=torch.Generator().manual_seed(6)) * 0.01
    for params in (SamplingParams(temperature=0.9, top_k=3000, top_p=0.95),  # top-k, then top-p by topk
                   SamplingParams(temperature=0.9, top_p=0.95)):  # flat: top-p by bisection
        probs = target_probs(logits, params)
        assert torch.allclose(probs.sum(-1), torch.ones(4))


def test_sample_follows_probs_and_never_picks_zero_mass():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3]]).expand(40_000, 4)
    ids = sample(probs, torch.Generator().manual_seed(7))
    freq = torch.bincount(ids, minlength=4).double() / len(ids)
    assert freq[1] == 0
    torch.testing.assert_close(freq, probs[0].double(), atol=0.01, rtol=0)


def test_sample_is_reproducible_with_a_seeded_generator():
    probs = torch.softmax(torch.randn(8, 100, generator=torch.Generator().manual_seed(8)), -1)
    a = sample(probs, torch.Generator().manual_seed(42))
    b = sample(probs, torch.Generator().manual_seed(42))
    assert torch.equal(a, b)


def test_sample_accepts_unnormalized_rows():
    ids = sample(torch.tensor([[0.0, 0.0, 3.0], [2.0, 0.0, 0.0]]), torch.Generator().manual_seed(9))
    assert ids.tolist() == [2, 0]
