"""Draft sizing under load: the step-cost fit and the expected-throughput rule."""

from engine.step_cost import StepCost, acceptance_rate, plan_drafts


def test_fit_recovers_a_linear_cost():
    cost = StepCost()
    for n in [1, 16, 4, 9, 16, 2, 12, 7, 16, 3]:
        cost.observe(n, 0.25 + 0.05 * n)
    a, b = cost.fit()
    assert abs(a - 0.25) < 1e-6 and abs(b - 0.05) < 1e-6


def test_no_fit_before_enough_varied_steps():
    cost = StepCost()
    for _ in range(20):
        cost.observe(16, 0.003)  # CUDA graphs: every step the same size
    assert cost.fit() is None


def test_one_odd_step_does_not_decide_the_slope():
    """Steps of one token, and one of two that happened to be slow: no slope from that (it would
    price a draft token at 60 ms and cut every draft, so the steps that could correct it never
    come); the mean step as a flat cost instead. Sizes that really vary give the fit back."""
    cost = StepCost()
    for n in [1] * 6 + [2] + [1] * 6:
        cost.observe(n, 0.076 if n == 2 else 0.016)
    assert cost.fit() is None and cost.fit_or_flat()[1] == 0.0
    for n in [16, 4, 9, 16]:
        cost.observe(n, 0.016 + 0.001 * n)
    assert cost.fit() is not None


def test_confident_sequences_draft_the_whole_block_on_a_cpu():
    assert plan_drafts([15, 15], [0.99, 0.99], a=0.24, b=0.06) == [15, 15]


def test_the_plan_maximizes_expected_throughput():
    """At alpha 0.95 on this CPU cost, 10 draft tokens beat 15 (9.6 vs 9.35 tokens/s)."""
    def rate(d, alpha=0.95, a=0.24, b=0.06):
        return (1 + sum(alpha**k for k in range(1, d + 1))) / (a + b * (d + 1))

    best = max(range(16), key=rate)
    assert plan_drafts([15], [0.95], a=0.24, b=0.06) == [best]


def test_unreliable_drafts_are_cut_first():
    lengths = plan_drafts([15, 15], [0.95, 0.5], a=0.24, b=0.06)
    assert lengths[0] > lengths[1] and lengths[1] <= 1


def test_crowded_compute_bound_step_drafts_less():
    alone = plan_drafts([15], [0.8], a=0.24, b=0.06)
    crowded = plan_drafts([15] * 64, [0.8] * 64, a=0.24, b=0.06)
    assert max(crowded) < alone[0]


def test_free_tokens_draft_everything_within_the_cap():
    assert plan_drafts([15, 3, 0], [0.9, 0.9, 0.9], a=0.003, b=0.0) == [15, 3, 0]
    assert sum(plan_drafts([15, 15], [0.9, 0.9], a=1.0, b=0.0, budget=12)) == 10


def test_acceptance_rate_prior_and_data():
    assert acceptance_rate(0, 0) == 0.8
    assert acceptance_rate(140, 2) > 0.95
    assert acceptance_rate(2, 10) < 0.4
