"""Verification: fixed-shape output, greedy equals plain greedy, sampling keeps the target distribution."""

import pytest
import torch

from engine.sampling import sample, target_probs
from engine.types import SamplingParams
from engine.speculative import verify
from engine.speculative.drafters import make_drafter
from engine.speculative.verify import PADDING, accept_greedy, pad_drafts, parse_output, verify_greedy, verify_sampled


def logits_with_argmax(targets, vocab=10):
    """[B, K] target tokens -> [B, K, V] logits whose argmax is the target."""
    targets = torch.tensor(targets)
    noise = torch.rand(*targets.shape, vocab, generator=torch.Generator().manual_seed(0))
    return noise.scatter(2, targets[..., None], 5.0)


def draft(rows):
    return torch.tensor(rows, dtype=torch.int64)


# ---- greedy, literal scenarios ---------------------------------------------------------------

def test_all_accepted():
    out = verify_greedy(logits_with_argmax([[7, 8, 9, 2]]), draft([[7, 8, 9]]))
    assert out.tolist() == [[7, 8, 9, 2]]  # three accepted plus the bonus


def test_early_mismatch():
    out = verify_greedy(logits_with_argmax([[7, 8, 9, 2]]), draft([[6, 8, 9]]))
    assert out.tolist() == [[7, PADDING, PADDING, PADDING]]  # nothing accepted, 7 recovered


def test_mismatch_mid_draft():
    out = verify_greedy(logits_with_argmax([[7, 8, 9, 2]]), draft([[7, 8, 5]]))
    assert out.tolist() == [[7, 8, 9, PADDING]]


def test_empty_draft():
    out = verify_greedy(logits_with_argmax([[7, 8, 9, 2]]), draft([[PADDING] * 3]))
    assert out.tolist() == [[7, PADDING, PADDING, PADDING]]
    out = verify_greedy(logits_with_argmax([[7]]), torch.zeros((1, 0), dtype=torch.int64))  # K = 1
    assert out.tolist() == [[7]]


def test_ragged_batch_is_padded():
    logits = logits_with_argmax([[1, 2, 3, 4], [5, 6, 7, 8], [9, 0, 1, 2]])
    drafts = pad_drafts([[1, 2, 3], [5], []], width=3)
    assert drafts.tolist() == [[1, 2, 3], [5, -1, -1], [-1, -1, -1]]
    out = verify_greedy(logits, drafts)
    assert out.tolist() == [[1, 2, 3, 4], [5, 6, -1, -1], [9, -1, -1, -1]]
    assert out.shape == (3, 4) and out.dtype == torch.int64
    assert parse_output(out) == [[1, 2, 3, 4], [5, 6], [9]]


def test_token_after_padding_is_ignored():
    # A token after a pad never counts: acceptance stops at the first pad.
    out = verify_greedy(logits_with_argmax([[1, 2, 3, 4]]), draft([[1, PADDING, 3]]))
    assert out.tolist() == [[1, 2, -1, -1]]


def test_host_greedy_commits_what_the_tensor_form_commits():
    """accept_greedy (the engine's path: argmax rows on the host) == parse_output(verify_greedy)."""
    g = torch.Generator().manual_seed(3)
    for _ in range(300):
        n = int(torch.randint(0, 8, (1,), generator=g))
        target = torch.randint(0, 4, (n + 1,), generator=g).tolist()  # a small vocabulary: many matches
        d = torch.randint(0, 4, (n,), generator=g).tolist()
        expected = parse_output(verify_greedy(logits_with_argmax([target], vocab=4), draft([d]).reshape(1, n)))[0]
        assert accept_greedy(target, d) == expected
    assert accept_greedy([7, 8, 5, 2], [7, 8, 9]) == [7, 8, 5]
    assert accept_greedy([7, 8, 9, 2], [7, 8, 9]) == [7, 8, 9, 2]
    assert accept_greedy([4], []) == [4]
    with pytest.raises(ValueError, match="one target token per draft token"):
        accept_greedy([1, 2], [1, 2])


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="the draft needs"):
        verify_greedy(torch.zeros(1, 4, 10), draft([[1, 2]]))
    with pytest.raises(ValueError, match="int64"):
        verify_greedy(torch.zeros(1, 3, 10), torch.zeros(1, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match="allows 2"):
        pad_drafts([[1, 2, 3]], width=2)


# ---- greedy speculation equals plain greedy decoding -----------------------------------------

class ToyModel:
    """Logits depend on the last two tokens and the position: a stand-in for a causal LM."""

    def __init__(self, vocab=24, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.w1, self.w2 = torch.randn(vocab, vocab, generator=g), torch.randn(vocab, vocab, generator=g)
        self.pos = torch.randn(5, vocab, generator=g)

    def logits(self, tokens):  # [V], predicting the token after `tokens`
        return 2 * self.w1[tokens[-1]] + self.w2[tokens[-2]] + self.pos[len(tokens) % 5]


def plain_greedy(model, prompt, n):
    tokens = list(prompt)
    for _ in range(n):
        tokens.append(int(model.logits(tokens).argmax()))
    return tokens[len(prompt) :]


def speculative(model, prompts, drafters, n, k=16, sampled=False):
    """Batched spec decode: pad the drafts, garbage logits in padded positions, verify, commit."""
    contexts = [list(p) for p in prompts]
    steps = 0
    while any(len(c) - len(p) < n for c, p in zip(contexts, prompts)):
        drafts = [d.propose(c, k - 1) for d, c in zip(drafters, contexts)]
        logits = torch.randn(len(prompts), k, model.w1.shape[0]) * 100  # padded positions: garbage
        for b, (c, dr) in enumerate(zip(contexts, drafts)):
            for j in range(len(dr) + 1):
                logits[b, j] = model.logits(c + dr[:j])
        padded = pad_drafts(drafts, k - 1)
        if sampled:
            probs = target_probs(logits.reshape(-1, logits.shape[-1]), SamplingParams(temperature=0))
            out = verify_sampled(probs.reshape(logits.shape), padded, torch.Generator().manual_seed(steps))
        else:
            out = verify_greedy(logits, padded)
        for c, new in zip(contexts, parse_output(out)):
            c.extend(new)
        steps += 1
    return [c[len(p) : len(p) + n] for c, p in zip(contexts, prompts)], steps


@pytest.mark.parametrize("sampled", [False, True], ids=["verify_greedy", "verify_sampled_temperature_0"])
def test_greedy_speculation_equals_plain_greedy(sampled):
    model = ToyModel()
    prompts = [[1, 2], [3, 4], [5, 6], [7, 8]]
    n = 120
    expected = [plain_greedy(model, p, n) for p in prompts]
    # The "open file" is the expected output with edits, so drafts are mostly, not always, right.
    edited = [e[:30] + [23, 22] + e[30:70] + e[75:] for e in expected]
    drafters = [make_drafter("lookup", {"original": edited[0]}, 2), make_drafter("ngram-earliest", {}, 2),
                make_drafter("pld", {}, 2), make_drafter("lookup", {"original": edited[3]}, 2)]
    got, steps = speculative(model, prompts, drafters, n, sampled=sampled)
    assert got == expected
    assert steps < n // 2  # the lookup rows really did commit several tokens per step


# ---- sampled verification ------------------------------------------------------------------

def test_sampled_accepts_certain_and_rejects_impossible_drafts():
    probs = torch.zeros(2000, 3, 5)
    probs[:, 0] = torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0])  # the draft token 0 is impossible
    probs[:, 1:] = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])
    out = verify_sampled(probs, draft([[0, 0]] * 2000), torch.Generator().manual_seed(0))
    assert (out[:, 0] != 0).all() and (out[:, 1:] == PADDING).all()
    probs[:, 0] = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])  # now certain: always accepted
    probs[:, 2] = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0])
    out = verify_sampled(probs, draft([[0, 0]] * 2000), torch.Generator().manual_seed(0))
    assert (out == torch.tensor([0, 0, 4])).all()  # and the bonus comes from the last position


def test_recovered_token_is_never_the_rejected_draft():
    probs = torch.tensor([0.6, 0.3, 0.1]).expand(5000, 2, 3).contiguous()
    out = verify_sampled(probs, draft([[0]] * 5000), torch.Generator().manual_seed(1))
    rejected = out[:, 1] == PADDING
    assert 0.35 < rejected.float().mean() < 0.45  # accepted with probability p(0) = 0.6
    assert (out[rejected, 0] != 0).all()
    recovered = out[rejected, 0]
    assert 0.7 < (recovered == 1).float().mean() < 0.8  # 0.3 / (0.3 + 0.1)


def test_sampled_output_shape_and_padding():
    probs = torch.softmax(torch.randn(3, 5, 7), -1)
    out = verify_sampled(probs, pad_drafts([[1, 2, 3, 4], [5], []], 4), torch.Generator().manual_seed(2))
    assert out.shape == (3, 5) and out.dtype == torch.int64
    for row, n_draft in zip(parse_output(out), (4, 1, 0)):
        assert 1 <= len(row) <= n_draft + 1


# ---- statistical test: speculation leaves the sampled distribution unchanged ---------------

VOCAB, K, N, START = 8, 4, 40_000, 0
SEQ_PARAMS = SamplingParams(temperature=0.8, top_p=0.9)


def chi_square_pvalue(observed, expected_probs):
    """Pearson goodness of fit; bins expected below 5 are pooled (an observation in an impossible
    bin gives p = 0). The p-value is the chi-square survival function, gammaincc(df/2, stat/2)."""
    observed = observed.double()
    expected = expected_probs.double() * observed.sum()
    big = expected >= 5
    obs = torch.cat([observed[big], observed[~big].sum(0, keepdim=True)])
    exp = torch.cat([expected[big], expected[~big].sum(0, keepdim=True)])
    if exp[-1] == 0:
        if obs[-1] > 0:
            return 0.0
        obs, exp = obs[:-1], exp[:-1]
    stat = ((obs - exp) ** 2 / exp).sum()
    df = torch.tensor((len(obs) - 1) / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(df, stat / 2))


def test_chi_square_pvalue_matches_tabulated_quantiles():
    # chi2 quantiles: df 1 at p = 0.05 is 3.841; df 10 at p = 0.01 is 23.209.
    df10 = torch.special.gammaincc(torch.tensor(5.0, dtype=torch.float64), torch.tensor(23.209 / 2, dtype=torch.float64))
    df1 = torch.special.gammaincc(torch.tensor(0.5, dtype=torch.float64), torch.tensor(3.841 / 2, dtype=torch.float64))
    assert float(df10) == pytest.approx(0.01, abs=1e-4) and float(df1) == pytest.approx(0.05, abs=1e-4)


def markov_chain():
    """A random 8-token Markov chain seen through temperature 0.8 and top-p 0.9, and its drafts."""
    logits = torch.randn(VOCAB, VOCAB, generator=torch.Generator().manual_seed(0)) * 1.5
    trans = target_probs(logits, SEQ_PARAMS)  # [V, V]: row = previous token
    order = trans.argsort(-1, descending=True)
    # Deliberately imperfect point-mass guesses: the likeliest, the second likeliest, or an
    # impossible (truncated away) token, depending on the state.
    choice = torch.tensor([0, 1, VOCAB - 1])[torch.arange(VOCAB) % 3]
    guess = order.gather(1, choice[:, None]).squeeze(1)  # [V]
    assert (trans[torch.arange(VOCAB), guess] == 0).any() and (trans > 0.25).any()
    return trans, guess


def exact_distribution(trans):
    """P(a, b, c) = p(a | START) p(b | a) p(c | b), flattened as a*V*V + b*V + c."""
    return (trans[START][:, None, None] * trans[:, :, None] * trans[None, :, :]).flatten()


def encode(seqs):
    return torch.bincount(seqs[:, 0] * VOCAB**2 + seqs[:, 1] * VOCAB + seqs[:, 2], minlength=VOCAB**3)


def sample_plain(trans, gen):
    token, seqs = torch.full((N,), START), []
    for _ in range(3):
        token = sample(trans[token], gen)
        seqs.append(token)
    return torch.stack(seqs, 1)


def sample_speculative(trans, guess, gen):
    out = torch.full((N, 3), -1)
    count = torch.zeros(N, dtype=torch.int64)
    rows = torch.arange(N)
    draft_len = rows % K  # 0 to K-1 drafted tokens, so padding is exercised too
    while (count < 3).any():
        last = torch.where(count == 0, START, out[rows, (count - 1).clamp_min(0)])
        tokens, t = [], last
        for _ in range(K - 1):
            t = guess[t]
            tokens.append(t)
        drafts = torch.stack(tokens, 1)  # [N, K-1]
        drafts = torch.where(torch.arange(K - 1) < draft_len[:, None], drafts, PADDING)
        condition = torch.cat([last[:, None], drafts.clamp_min(0)], 1)  # [N, K] token each position follows
        result = verify_sampled(trans[condition], drafts, gen)  # [N, K]
        for c in range(K):
            take = (result[:, c] != PADDING) & (count < 3)
            out[rows[take], count[take]] = result[take, c]
            count += take.long()
    return out


def test_plain_sampling_matches_the_exact_distribution():
    trans, _ = markov_chain()
    seqs = sample_plain(trans, torch.Generator().manual_seed(1))
    assert chi_square_pvalue(encode(seqs), exact_distribution(trans)) > 1e-3


@pytest.mark.parametrize("rule", ["exact", "always_accept", "recovered_keeps_draft_token"])
def test_speculative_sampling_matches_plain_sampling(rule, monkeypatch):
    """With speculation, 3-token continuations follow the same distribution as plain sampling;
    a wrong acceptance rule, patched into verify_sampled, must fail the same check."""
    if rule == "always_accept":
        monkeypatch.setattr(verify, "accept_mask", lambda p_x, u: torch.ones_like(p_x, dtype=torch.bool))
    if rule == "recovered_keeps_draft_token":
        monkeypatch.setattr(verify, "residual_probs", lambda p, x, rejected: p)
    trans, guess = markov_chain()
    seqs = sample_speculative(trans, guess, torch.Generator().manual_seed(2))
    pvalue = chi_square_pvalue(encode(seqs), exact_distribution(trans))
    if rule == "exact":
        assert pvalue > 1e-3
    else:
        assert pvalue < 1e-6, f"the test has no power against {rule}: p = {pvalue}"
