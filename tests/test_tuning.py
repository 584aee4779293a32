"""The draft-length cost model, with made-up costs (hand-computed expectations)."""
import pytest

from edgespec.tuning import CostModel, DraftLength


def model(verify, draft_s, accept):
    """verify: {m: seconds}; accept: a_i for each position (fixed: evidence so strong the prior is irrelevant)."""
    c = CostModel(prior_weight=1e-9)
    c.verify_s = dict(verify)
    c.draft_s = draft_s
    c.reached = [1e9] * len(accept)
    c.accepted = [a * 1e9 for a in accept]
    c.n_observed = 1000
    return c


def test_expected_tokens_is_one_plus_the_sum_of_acceptance_chains():
    c = model({1: 1.0}, 0.0, [0.8, 0.5, 0.5])
    assert c.expected_tokens(0) == 1.0
    assert c.expected_tokens(1) == pytest.approx(1.8)
    assert c.expected_tokens(3) == pytest.approx(1 + 0.8 + 0.4 + 0.2)


def test_acceptance_is_estimated_given_the_earlier_positions_passed():
    c = CostModel(prior_weight=1e-9, decay=1.0)
    c.observe_acceptance(4, 4)  # all four passed
    c.observe_acceptance(4, 1)  # 1st passed, 2nd failed (3rd, 4th never tested)
    c.observe_acceptance(2, 0)  # 1st failed
    assert [c.acceptance(i) for i in range(4)] == pytest.approx([2 / 3, 0.5, 1.0, 1.0])


def test_best_k_minimises_time_per_token():
    # verify 100 ms + 10 ms per extra row, draft 20 ms/token, a = 0.8 everywhere
    c = model({m: 0.1 + 0.01 * (m - 1) for m in range(1, 18)}, 0.02, [0.8] * 16)
    costs = {k: (0.1 + 0.01 * k + 0.02 * k) / sum(0.8 ** j for j in range(k + 1)) for k in range(1, 17)}
    best = min(costs, key=costs.get)
    assert c.best_k(16) == (best, pytest.approx(costs[best]))
    assert best == 3  # K=4 would add 30 ms for 0.41 tokens (73 ms/token), more than the 64 ms/token at K=3


def test_a_jump_in_verify_cost_is_not_landed_just_past():
    # verify costs 100 ms up to 4 rows, then jumps to 200 ms: K=3 (4 rows) beats K=4 (5 rows)
    verify = {m: (0.1 if m <= 4 else 0.2) for m in range(1, 18)}
    c = model(verify, 0.005, [0.9] * 16)
    assert c.best_k(16)[0] == 3


def test_unmeasured_batch_sizes_are_interpolated():
    c = CostModel()
    c.verify_s = {1: 0.1, 5: 0.14, 9: 0.3}
    assert c.t_verify(3) == pytest.approx(0.12)
    assert c.t_verify(13) == pytest.approx(0.46)  # extrapolated with the last slope


def test_fallback_when_even_the_best_k_loses_to_plain_and_probe_later():
    # compute-bound: verify of m rows costs m * 60% of a step, draft 40% of a step, acceptance 0.3
    c = model({m: 0.1 * (1 + 0.6 * (m - 1)) for m in range(1, 18)}, 0.04, [0.3] * 16)
    d = DraftLength(8, adaptive=True, cost=c, fallback_rounds=32)
    first = d.decide(100)
    # best is K=1: (0.16 + 0.04) / 1.3 = 0.154 s/token, 1.54x plain: far behind, so the longest wait
    assert (first.k, first.reason) == (0, "fallback") and "153.8 ms/token" in first.why and "32 rounds" in first.why
    reasons = [d.decide(100) for _ in range(32)]
    assert [r.reason for r in reasons] == ["fallback"] * 31 + ["probe"]
    assert reasons[-1].k == 4  # a probe drafts enough to learn acceptance beyond position 1
    assert d.fallbacks == 1
    d.decide(100)
    d.new_text()  # a new prompt gets a fresh decision, not the rest of the old wait
    assert d.decide(100).reason == "fallback" and d.fallbacks == 3


def test_fallback_near_break_even_is_short():
    # K=1 at a = 0.6 costs (0.1 * 1.49 + 0) / 1.6 = 0.0931 s/token: 0.93x plain, just short of the 0.92 margin
    c = model({m: 0.1 * (1 + 0.49 * (m - 1)) for m in range(1, 18)}, 0.0, [0.6] * 16)
    d = DraftLength(1, adaptive=True, cost=c, fallback_rounds=32)
    assert "plain decoding for 4 rounds" in d.decide(100).why


def test_no_fallback_when_speculation_pays():
    c = model({m: 0.1 * (1 + 0.03 * (m - 1)) for m in range(1, 18)}, 0.01, [0.8] * 16)
    d = DraftLength(8, adaptive=True, cost=c)
    decisions = [d.decide(100) for _ in range(48)]
    assert all(x.k >= 4 for x in decisions) and d.fallbacks == 0
    # every 8th round drafts one more than the best, to keep measuring past it
    assert [x.reason for x in decisions].count("explore") == 6
    assert {x.k for x in decisions if x.reason == "explore"} == {decisions[0].k + 1}


def test_cap_and_fixed_length():
    c = model({m: 0.1 for m in range(1, 18)}, 0.0, [0.9] * 16)
    assert DraftLength(8, adaptive=True, cost=c).decide(3).k == 3
    assert DraftLength(5, adaptive=False).decide(100).k == 5
    assert DraftLength(5, adaptive=False).decide(0).k == 0


def test_warm_up_drafts_probe_k_until_there_is_evidence():
    d = DraftLength(8, adaptive=True)
    assert (d.decide(100).k, d.decide(100).reason) == (4, "warm-up")
    d.cost.observe_verify(1, 0.1)
    for _ in range(3):
        assert d.decide(100).reason == "warm-up"
        d.observe(4, 4, 2, 0.04, 0.12)
    assert d.decide(100).reason == "cost"
