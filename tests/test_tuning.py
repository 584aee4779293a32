"""The draft-length cost model, with made-up costs (hand-computed expectations)."""
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_extrapolation_never_reaches_zero():
    """Found by the SmolLM2 soak: two noisy timings whose line crosses zero below them made a plain step cost
    0 s, and deciding divided by it."""
    c = CostModel()
    c.verify_s = {4: 0.02, 6: 0.2}  # steep: the line through them is below zero at m = 1
    assert c.t_verify(1) == pytest.approx(0.02) and c.t_verify(2) == pytest.approx(0.02)
    c.verify_s = {4: 0.2, 6: 0.1}  # falling (noise): past the last, never below the smaller of the two
    assert c.t_verify(16) == pytest.approx(0.1)
    d = DraftLength(8, adaptive=True, cost=model({4: 0.02, 6: 0.2}, 0.001, [0.9] * 8))
    assert d.decide(100).k >= 0  # decides, does not divide by zero


def test_fallback_when_even_the_best_k_loses_to_plain_and_probe_later():
    # each extra verify row costs 30% of a step, a draft 40% of a step, acceptance 0.3: behind plain, but a text the
    # draft suits could pay (at full acceptance K=8 would cost 0.073 s/token against 0.1)
    c = model({m: 0.1 * (1 + 0.3 * (m - 1)) for m in range(1, 18)}, 0.04, [0.3] * 16)
    d = DraftLength(8, adaptive=True, cost=c, fallback_rounds=32)
    d.probe_rounds = 1  # a verdict after each probe round (two by default: below)
    first = d.decide(100)
    # best is K=1: (0.13 + 0.04) / 1.3 = 0.131 s/token, 1.31x plain: far behind, so the longest wait
    assert (first.k, first.reason) == (0, "fallback") and "130.8 ms/token" in first.why and "32 rounds" in first.why
    assert not d.hopeless()
    reasons = [d.decide(100) for _ in range(32)]
    assert [r.reason for r in reasons] == ["fallback"] * 31 + ["probe"]
    assert reasons[-1].k == 1  # a probe drafts the best K: it costs as little as a draft can
    assert d.decide(100).reason == "probe"  # not carried out yet (in a chain another part may have filled the round)
    d.observe(1, 0, 0.04)  # rejected
    # the probe did not change the verdict: wait twice as long, and again after the next one
    again = d.decide(100)
    assert again.reason == "fallback" and "64 rounds" in again.why and "1 in a row" in again.why
    waits = [d.decide(100).reason for _ in range(64)]
    d.observe(1, 0, 0.04)
    assert waits == ["fallback"] * 63 + ["probe"] and "128 rounds" in d.decide(100).why
    assert d.decide(100).reason == "fallback"
    left = d._plain_left
    # Verify rows get dearer (80% of a step each): even if every drafted token passed, K=8 would cost T_v(9) + T_d(8)
    # = 0.74 + (0.04 + 7 * 0.02) s for 9 tokens, 0.102 s/token against plain's 0.1
    c.verify_s = {m: 0.1 * (1 + 0.8 * (m - 1)) for m in range(1, 18)}
    assert d.hopeless()
    d.new_text()  # so the wait goes on across texts ...
    assert d.standing_aside() and not d.standing_aside(adaptive=False)  # ... with no prompt to read
    assert d.decide(100).reason == "fallback" and d._plain_left == left - 1
    for _ in range(left - 2):
        d.decide(100)
    # ... and where it ends, a probe would only pay to hear so again: the wait doubles instead, up to max_wait,
    # which ends in a probe (to re-time the costs now and then)
    rest = [d.decide(100) for _ in range(1 + 256 + 512)]  # the round that ends the wait of 128, then the doubled waits
    assert {x.reason for x in rest[:-1]} == {"fallback"} and rest[-1].reason == "probe" and d._failed_probes == 4
    d.observe(1, 0, 0.04)
    assert "512 rounds" in d.decide(100).why and d.fallbacks == 4  # ... and the backoff carries over


def test_warm_ups_a_confidence_floor_ended_at_their_first_token_end_in_a_short_wait_then_a_probe():
    """--draft-p-min: a warm-up round whose first token fell under the floor drafted nothing, so it timed and tested
    nothing; once warm_up_rounds of them have, more warm-ups would each be a draft step for nothing (the tiny pair
    under a floor of 0.95, replayed: 22 in the first text). The policy waits the shortest wait, then probes."""
    d = DraftLength(8, adaptive=True, cost=CostModel(verify_s={1: 0.1, 2: 0.11, 3: 0.12, 4: 0.13, 5: 0.14}))
    for _ in range(d.warm_up_rounds):
        assert d.decide(100).reason == "warm-up"
        d.floored(True, warm_up=True)
    wait = d.decide(100)
    assert (wait.k, wait.reason) == (0, "fallback") and "confidence floor" in wait.why
    reasons = [d.decide(100).reason for _ in range(4)]
    assert reasons == ["fallback"] * 3 + ["probe"]


def test_a_new_text_is_probed_at_once_after_a_fallback_near_break_even():
    # best K=1 at (0.1 + 0.02) / 1.2 = 0.1 s/token: 1.0x plain, just short of the 8% margin
    d = DraftLength(8, adaptive=True, cost=model({m: 0.1 for m in range(1, 18)}, 0.02, [0.2] + [0.0] * 15))
    d.probe_rounds = 1  # a verdict after each probe round (two by default: below)
    assert d.decide(100).reason == "fallback" and d.standing_aside()
    d.new_text()  # the draft model reads the new prompt and drafts at once: the new text may suit it
    assert not d.standing_aside() and d.decide(100).reason == "probe"
    d.observe(1, 0, 0.02)
    assert d.decide(100).reason == "fallback" and d._failed_probes == 1
    d.new_text()  # ... even after probes confirmed the verdict on the last text: code may follow prose
    assert not d.hopeless() and not d.standing_aside() and d.decide(100).reason == "probe"


def _near_perfect_draft(rounds: int) -> DraftLength:
    """A draft that passes 97% of its tokens (the target's own model, quantised) over `rounds` rounds of 8, each
    step 80% of a target step, each verify row 10%: at full acceptance K=8 would cost (0.17 + 0.64) / 9 = 0.090
    s/token (not hopeless: 0.90x plain), at 0.97 drafting is behind the 8% margin."""
    c = CostModel(verify_s={m: 0.1 * (1 + 0.1 * (m - 1)) for m in range(1, 18)}, draft_s=0.08)
    c.reached, c.accepted = [float(rounds)] * 8, [0.97 * rounds] * 8
    c.base_reached, c.base_accepted, c.n_observed = list(c.reached), list(c.accepted), 100
    return DraftLength(8, adaptive=True, cost=c)


def test_a_new_text_is_not_probed_where_no_probe_could_change_the_verdict():
    d = _near_perfect_draft(40)
    assert d.decide(100).reason == "fallback" and not d.hopeless()
    # even a probe whose 16 tokens all passed leaves the estimate (at a new text, the rates over many texts worth
    # two rounds) where drafting does not pay: the wait goes on across texts, no prompt read, no probe
    d.new_text()
    assert d.futile() and d.standing_aside() and d.decide(100).reason == "fallback"
    d.defer_probe()  # ... and a probe put off to the next text does not come there either: it could not tell
    d.new_text()
    assert d.standing_aside() and d.decide(100).reason == "fallback"
    # the verdict is still tested now and then: that wait (max_wait rounds) ends in a probe
    reasons = [d.decide(100).reason for _ in range(d.max_wait - 1)]
    assert reasons[-1] == "probe" and set(reasons[:-1]) == {"fallback"}
    # on a text or two of evidence the same rates are not trusted that far: the new text is probed at once
    d = _near_perfect_draft(10)
    assert d.decide(100).reason == "fallback"
    d.new_text()
    assert not d.futile() and d.decide(100).reason == "probe"
    # behind a free part (a chain) a probe's verdict is the plan's, which falls back only where drafting is clearly
    # behind (decide(planned=True)): the same probe could change that verdict
    d = _near_perfect_draft(40)
    d._plain_left = 5
    assert d.decide(100, planned=True).reason == "fallback"
    d.new_text()
    assert not d.futile() and d.decide(100, planned=True).reason == "probe"


def test_behind_a_free_part_only_a_proposer_clearly_behind_plain_falls_back():
    # best K=1 at (0.1 + 0.02) / 1.2 = 0.1 s/token: 1.0x plain. Alone: a fallback (the 8% margin). Planned behind
    # prompt lookup: the plan weighs it round by round against lookup alone and plain, so no fallback ...
    near = model({m: 0.1 for m in range(1, 18)}, 0.02, [0.2] + [0.0] * 15)
    assert DraftLength(8, adaptive=True, cost=near).decide(100).reason == "fallback"
    assert DraftLength(8, adaptive=True, cost=near).decide(100, planned=True).reason == "cost"
    # ... unless it is clearly behind (here 1.5x plain), when even reading prompts is not worth it
    far = model({m: 0.1 for m in range(1, 18)}, 0.05, [0.0] * 16)
    assert DraftLength(8, adaptive=True, cost=far).decide(100, planned=True).reason == "fallback"


def test_a_short_draft_near_the_end_is_a_plain_round_not_a_fallback():
    # K=4 at a = 0.9: (0.1 + 4 * 0.02) / 4.1 = 0.044 s/token pays; with 1 token left to write K=1 costs
    # (0.1 + 0.02) / 1.9 = 0.063 s/token: that pays too. With a dear first draft step it does not, this once.
    c = model({m: 0.1 for m in range(1, 18)}, 0.02, [0.9] * 16)
    c.draft_round_s = {1: 0.12, 4: 0.18}
    d = DraftLength(8, adaptive=True, cost=c)
    assert d.decide(100).reason == "cost"
    assert (d.decide(1).k, d.decide(1).reason) == (0, "cost") and d.fallbacks == 0 and not d.standing_aside()
    assert d.decide(100).reason == "cost"


def test_a_probe_lasts_two_drafted_rounds_and_a_new_text_does_not_drown_in_the_last_ones():
    c = model({m: 0.1 * (1 + 0.3 * (m - 1)) for m in range(1, 18)}, 0.04, [0.3] * 16)
    d = DraftLength(8, adaptive=True, cost=c)
    d._plain_left = 1
    assert d.decide(100).reason == "probe"
    d.observe(1, 1, 0.04)
    assert d.decide(100).reason == "probe"  # one round is too thin a verdict
    d.observe(1, 1, 0.04)
    assert d.decide(100).reason == "fallback"  # two rounds of evidence against 1e9 for a = 0.3: still behind
    c = CostModel(decay=1.0)
    for _ in range(40):
        c.observe_acceptance(1, 0)  # forty rejections on the last text
    d = DraftLength(8, adaptive=True, cost=c)
    d.new_text()
    assert c.reached[0] == pytest.approx(d.text_memory)  # not 20 rounds' worth: the new text can outweigh it


def test_a_probe_put_off_comes_at_the_start_of_the_next_text():
    d = DraftLength(8, adaptive=True, cost=model({m: 0.1 for m in range(1, 18)}, 0.05, [0.0] * 16))
    d._failed_probes, d._plain_left = 2, 1
    assert d.decide(100).reason == "probe"
    d.defer_probe()  # its draft model would first read the whole text it stood aside from
    assert d.standing_aside() and {d.decide(100).reason for _ in range(100)} == {"fallback"}
    d.new_text()  # ... the prompt is read anyway: probe now
    assert not d.standing_aside() and d.decide(100).reason == "probe"


def test_a_probe_put_off_waits_for_a_text_where_drafting_could_pay():
    # drafting costs 0.5 s a step: even if every token passed it would not pay (a small target over a slow draft)
    d = DraftLength(8, adaptive=True, cost=model({m: 0.1 for m in range(1, 18)}, 0.5, [0.9] * 16))
    d._failed_probes, d._plain_left, d._waited = 1, 1, d.max_wait  # the longest wait ends in a probe even so
    assert d.decide(100).reason == "probe" and d.hopeless()
    d.defer_probe()
    for _ in range(3):  # short answers one after another: no prompt read, no probe
        d.new_text()
        assert d.standing_aside() and d.decide(100).reason == "fallback"
    d.cost.draft_round_s, d.cost.draft_s = {}, 0.01  # drafting got cheap (say the machine was busy before)
    d.new_text()
    assert not d.standing_aside() and d.decide(100).reason == "probe"


def test_a_profile_that_says_drafting_does_not_pay_starts_in_a_fallback():
    verify = {m: 0.1 * (1 + 0.6 * (m - 1)) for m in range(1, 18)}  # compute-bound
    poor = {"draft_round_s": {1: 0.04, 4: 0.16}, "reached": [20.0, 6.0], "accepted": [6.0, 2.0]}
    d = DraftLength(8, adaptive=True, cost=model(verify, None, []))
    d.cost.reached, d.cost.accepted, d.cost.n_observed = [], [], 0
    d.seed(poor)
    assert d.standing_aside() and d.decide(100).reason == "fallback"  # no draft work in a fresh process
    good = {"draft_round_s": {1: 0.01, 4: 0.04}, "reached": [20.0, 18.0, 16.0, 14.0], "accepted": [18.0, 16.0, 14.0, 12.0]}
    d = DraftLength(8, adaptive=True, cost=CostModel(verify_s={m: 0.1 for m in range(1, 18)}))
    d.seed(good)
    assert not d.standing_aside() and d.decide(100).reason == "cost"


def test_a_new_text_starts_from_the_rate_over_many_texts_worth_a_few_rounds():
    d = DraftLength(8, adaptive=True, cost=CostModel(prior_weight=2.0, decay=1.0, base_decay=1.0))
    for _ in range(6):
        d.observe(1, 0, 0.01)  # six rejections: a_1 = (0 + 0.6 * 2) / (6 + 2) = 0.15
    assert d.cost.acceptance(0) == pytest.approx(0.15)
    d.observe(1, 1, 0.01, key="lookup:3")  # counted for its kind and in the whole
    d.new_text()  # what was seen (1 of 7 passed) counts as text_memory = 2 rounds, shrunk towards the rate over
    # many texts (those 7 rounds, themselves shrunk towards the prior), not towards the prior for an unknown pair
    over_texts = (1 + 0.6 * 2) / (7 + 2)
    assert d.cost.acceptance(0) == pytest.approx((2 / 7 + over_texts * 2) / (2 + 2))
    assert d.keyed("lookup:3").reached == [1.0] and d.keyed("lookup:3").accepted == [1.0]
    # ... a kind of proposal (a lookup match length) starts halfway to the prior, not from its rate over many texts
    assert d.keyed("lookup:3").acceptance(0) == pytest.approx((1 + 0.6 * 2) / (1 + 2))
    # many texts the draft suited, then one it did not: the next text starts near the rate over all of them, not
    # from the last one alone (which would make a poor estimate the next text may never get to correct)
    d = DraftLength(8, adaptive=True)
    for _ in range(10):
        d.new_text()
        for _ in range(20):
            d.observe(4, 4, 0.01)
    d.new_text()
    for _ in range(20):
        d.observe(4, 0, 0.01)
    assert d.cost.acceptance(0) < 0.2  # that text's own rounds
    d.new_text()
    assert 0.6 < d.cost.acceptance(0) < 0.9 and d.cost.reached[0] == pytest.approx(d.text_memory)


def test_a_draft_that_passed_nearly_everything_starts_a_new_text_drafting():
    # a step half a verify row's worth dearer than the row (SmolLM2 and its own Q4_1 over a link): drafting pays at
    # 95% (K=4: 0.34 s for 4.5 tokens) and not at 78%, where shrinking a new text halfway to the prior put it
    d = DraftLength(8, adaptive=True, cost=CostModel(verify_s={m: 0.1 * (1 + 0.1 * (m - 1)) for m in range(1, 18)},
                                                     draft_s=0.05))
    c = d.cost
    c.reached, c.accepted = [200.0] * 8, [190.0] * 8  # many texts, 95% of the tokens passed at every position
    c.base_reached, c.base_accepted, c.n_observed = list(c.reached), list(c.accepted), 200
    d.new_text()
    assert c.reached[0] == pytest.approx(d.text_memory) and c.acceptance(0) == pytest.approx(0.95, abs=0.01)
    assert d.decide(100).reason == "cost"
    for _ in range(4):
        d.observe(4, 0, 0.2)  # ... and this text's own rounds still outweigh them at once
    assert c.acceptance(0) < 0.5


def test_a_probe_that_pays_ends_the_backoff():
    c = model({m: 0.1 * (1 + 0.3 * (m - 1)) for m in range(1, 18)}, 0.04, [0.3] * 16)
    d = DraftLength(8, adaptive=True, cost=c, fallback_rounds=32)
    d.probe_rounds = 1  # a verdict after each probe round (two by default: below)
    for _ in range(33):
        d.decide(100)
    d.observe(1, 1, 0.01)
    c.accepted = [0.95e9] * 16  # the probe found a text the draft suits, and drafted cheaply
    assert d.decide(100).reason == "cost"
    c.accepted, c.draft_round_s = [0.3e9] * 16, {}
    assert "32 rounds" in d.decide(100).why  # a fresh fallback, not a doubled one


def test_fallback_near_break_even_is_short():
    # K=1 at a = 0.6 costs (0.1 * 1.49 + 0.003) / 1.6 = 0.095 s/token: 0.95x plain, just short of the 0.92 margin
    c = model({m: 0.1 * (1 + 0.49 * (m - 1)) for m in range(1, 18)}, 0.003, [0.6] * 16)
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
        d.observe(4, 2, 0.04)
    assert d.decide(100).reason == "cost"


def test_a_warm_up_that_times_a_draft_which_cannot_pay_stops_there():
    """A draft step as dear as a target step (SmolLM2 F16 and its Q4_1 copy on an AVX-512 host): once the first
    warm-up round has timed it, drafting could not pay even if every token passed, so the warm-up's other rounds
    are not drafted and no new text is probed while that holds; a draft that can pay warms up in full."""
    def policy() -> DraftLength:
        d = DraftLength(8, adaptive=True)
        for m in range(1, 18):
            d.cost.observe_verify(m, 0.012 * (1 + 0.35 * (m - 1)))  # a verify of 5: 2.4 steps
        return d

    dear = policy()
    assert dear.decide(100).reason == "warm-up"
    dear.observe(4, 4, 4 * 0.012)  # every token passed, and still
    decision = dear.decide(100)
    assert (decision.k, decision.reason) == (0, "fallback") and "even if every" in decision.why
    for _ in range(3):
        dear.new_text()
        assert dear.decide(100).reason == "fallback" and dear.standing_aside()
    cheap = policy()
    for _ in range(3):
        assert cheap.decide(100).reason == "warm-up"
        cheap.observe(4, 4, 4 * 0.001)
    assert cheap.decide(100).reason == "cost"


def test_a_free_proposer_is_asked_for_all_it_has_and_never_falls_back():
    # compute-bound verify, acceptance 0.3 (a draft model would fall back here), but proposing costs 1% of a step
    c = model({m: 0.1 * (1 + 0.6 * (m - 1)) for m in range(1, 18)}, 0.001, [0.3] * 16)
    d = DraftLength(8, adaptive=True, cost=c)
    assert d.free and [d.decide(100).reason for _ in range(40)] == ["free"] * 40 and d.fallbacks == 0
    assert d.decide(5).k == 5
    c.draft_s = 0.003  # 3% of a step: not free, so the fallback rules apply
    assert not d.free and d.decide(100).reason == "fallback"
    assert not DraftLength(8, adaptive=False, cost=c).free


def test_keep_verifies_the_length_that_pays_for_that_kind_of_proposal():
    # verify of m rows: 1 + 0.5 (m - 1) steps. Kind "long": a = 0.9 everywhere; kind "short": a = 0.3.
    d = DraftLength(16, adaptive=True, cost=model({m: 1 + 0.5 * (m - 1) for m in range(1, 18)}, 0.0, [0.5] * 16))
    d.keyed("long").reached, d.keyed("long").accepted = [1e9] * 16, [0.9e9] * 16
    d.keyed("short").reached, d.keyed("short").accepted = [1e9] * 16, [0.3e9] * 16
    for m in (d.keyed("long"), d.keyed("short")):
        m.prior_weight = 1e-9
    # long: per-token cost (1 + 0.5 k) / sum(0.9^j, j <= k): 0.789, 0.738, 0.727 (k = 3), 0.733, ...
    costs = {k: (1 + 0.5 * k) / sum(0.9 ** j for j in range(k + 1)) for k in range(0, 17)}
    assert d.keep(16, "long") == min(costs, key=costs.get) == 3
    assert d.keep(2, "long") == 2  # only 2 on offer: both worth it
    # short: one token costs 1.5 for 1.3 expected tokens (1.15 > 1 plain): declined, but every 16th is checked
    kept = [d.keep(8, "short") for _ in range(32)]
    assert kept.count(0) == 30 and kept[15] == kept[31] == 1
    assert d.keep(0, "short") == 0


def test_a_text_whose_lookup_proposals_keep_failing_has_fewer_of_them_verified():
    """Splits.text_factor: this text's first-token outcomes, every kind of proposal together, scale the kind's a_0
    down (never up), starting from TEXT_WEIGHT proposals' worth of "as expected"; a new text starts again. Verify of
    m rows: 1 + 0.5 (m - 1) steps; a = 0.9 everywhere, so 3 tokens are kept, as above."""
    from edgespec.splits import TEXT_WEIGHT

    c = model({m: 1 + 0.5 * (m - 1) for m in range(1, 18)}, 0.0, [0.5] * 16)
    d = DraftLength(16, adaptive=True, cost=c)
    assert d.free
    for kind in ("lookup:2", "lookup:3"):
        d.keyed(kind).reached, d.keyed(kind).accepted = [1e9] * 16, [0.9e9] * 16
        d.keyed(kind).prior_weight = 1e-9
    assert d.text_factor() == 1.0 and d.keep(16, "lookup:2") == 3
    for _ in range(5):  # five proposals of the other kind failed at their first token in this text
        d.observe(4, 0, 0.0, key="lookup:3")
    assert d.text_factor() == pytest.approx(TEXT_WEIGHT / (TEXT_WEIGHT + 5 * 0.9), rel=0.01)
    assert d.keep(16, "lookup:2") < 3  # a_0 about 0.42: one row's cost for 1.4 tokens does not pay
    d.new_text()
    assert d.text_factor() == 1.0 and d.keep(16, "lookup:2") == 3
    for _ in range(5):  # every proposal passing: as expected at most, the kinds' rates are not raised
        d.observe(4, 4, 0.0, key="lookup:2")
    assert d.text_factor() == 1.0
    dear = DraftLength(16, adaptive=True, cost=model({m: 1.0 for m in range(1, 18)}, 0.5, [0.5] * 16))
    dear.observe(4, 0, 2.0, key="lookup:2")
    assert not dear.free and dear.text_factor() == 1.0  # a proposer that costs time is not tallied


def test_acceptance_is_kept_per_kind_and_together():
    d = DraftLength(8, adaptive=True, cost=CostModel(prior_weight=1e-9, decay=1.0))
    d.observe(4, 4, 0.0, key="a")
    d.observe(4, 0, 0.0, key="b")
    d.observe(2, None, 0.0, key="b")  # never tested: an earlier part's token failed first
    assert d.keyed("a").acceptance(0) == pytest.approx(1.0) and d.keyed("b").acceptance(0) == pytest.approx(0.0, abs=1e-6)
    assert d.cost.acceptance(0) == pytest.approx(0.5) and d.cost.n_observed == 2


def _round_cost(d, lead, j, f):
    c = d.cost
    return (c.t_verify(j + f + 1) + c.t_draft(f)) / (lead.expected_tokens(j) + lead.all_pass(j) * (c.expected_tokens(f) - 1))


def test_a_chain_part_drafts_alone_follows_or_stands_aside_by_expected_cost():
    # memory-bound: any verify up to 17 rows costs one step; the draft model: 0.2 of a step per token, a = 0.8
    d = DraftLength(8, adaptive=True, cost=model({m: 1.0 for m in range(1, 18)}, 0.2, [0.8] * 16))
    # drafting alone, the best K (4: (1 + 0.8) / 3.3616 = 0.5355 s/token) ...
    assert d.plan(8, model({1: 1.0}, 0.0, [0.5] * 16), 0) == (0, 4)
    # ... loses to 4 sure lookup tokens (1 / 5 = 0.2 s/token)
    sure = model({1: 1.0}, 0.0, [1.0] * 16)
    assert d.plan(8, sure, 4) == (4, 0)  # 4 drafted after them: (1 + 0.8) / (5 + 2.3616) = 0.2445 > 0.2
    # ... unless this text has failed such proposals (its text factor 0.1 on a_0: 4 of them yield 1.4 tokens, 0.714)
    assert d.plan(8, sure, 4, first=0.1) == (0, 4)
    cheap = DraftLength(8, adaptive=True, cost=model({m: 1.0 for m in range(1, 18)}, 0.05, [0.8] * 16))
    assert cheap.plan(8, sure, 4) == (4, 4)  # a cheaper draft model: (1 + 0.2) / 7.3616 = 0.163 < 0.2
    assert cheap.plan(4, sure, 4) == (4, 0)  # no room for it: the lead alone
    # ... unless it must first read 20 tokens it missed (and the 4 kept), paid once and spread over the next 16
    # tokens: (1 + 0.2) / 7.3616 + 24 * 0.05 / 16 = 0.238 > 0.2
    assert cheap.plan(8, sure, 4, behind=20, read_s=0.05) == (4, 0)
    # a short catch-up spread so pays (0.163 + 6 * 0.05 / 16 = 0.182, under the margin's 0.92 * 0.2; charged to this
    # round's tokens alone it would not: (1.2 + 0.3) / 7.3616 = 0.204), unless the text ends within 2 tokens
    assert cheap.plan(8, sure, 4, behind=2, read_s=0.05) == (4, 4)
    assert cheap.plan(8, sure, 4, behind=2, read_s=0.05, horizon=2) == (4, 0)
    # lookup tokens at a = 0.4 are not worth following: the draft model alone
    assert d.plan(8, model({1: 1.0}, 0.0, [0.4] * 16), 4) == (0, 4)
    # learning rounds draft at least `least`, within k
    j, f = d.plan(4, sure, 4, least=1)
    assert f >= 1 and j + f <= 4
    # a compute-bound target where the draft model costs as much as it gains: the lead alone, or plain
    slow = DraftLength(8, adaptive=True, cost=model({m: 0.7 + 0.3 * m for m in range(1, 18)}, 0.9, [0.5] * 16))
    assert slow.plan(8, model({1: 1.0}, 0.0, [0.9] * 16), 3) == (3, 0)
    assert slow.plan(8, model({1: 1.0}, 0.0, [0.2] * 16), 3) == (0, 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.5, 3.0), min_size=9, max_size=9), st.floats(0.0, 1.0),
       st.lists(st.floats(0.0, 1.0), min_size=8, max_size=8), st.lists(st.floats(0.0, 1.0), min_size=8, max_size=8),
       st.integers(0, 8), st.integers(1, 8))
def test_the_chosen_split_is_never_expected_slower_than_either_part_alone_or_plain(rel, draft_s, own_a, lead_a, n,
                                                                                    k):
    """... and it has the draft model work only for a gain beyond the margin."""
    verify = {1: 1.0}
    for m, r in enumerate(rel, 2):
        verify[m] = max(verify[m - 1], r * (m - 1) ** 0.5)  # growing with the rows, any shape
    d = DraftLength(8, adaptive=True, cost=model(verify, draft_s, own_a))
    lead = model({1: 1.0}, 0.0, lead_a)
    n = min(n, k)
    j, f = d.plan(k, lead, n)
    assert 0 <= j <= n and 0 <= f and j + f <= k
    chosen = _round_cost(d, lead, j, f)
    without = min(_round_cost(d, lead, jj, 0) for jj in range(n + 1))  # plain (0, 0), the lead alone (n, 0)
    drafting = min([_round_cost(d, lead, jj, ff) for jj in range(n + 1) for ff in range(1, k - jj + 1)])
    if f == 0:
        assert chosen <= without + 1e-12 and drafting >= d.margin * without - 1e-12
    else:  # the draft model alone (0, f) or after the lead's tokens
        assert chosen <= drafting + 1e-12 and chosen < d.margin * without


TEXT = list(range(100, 400))  # the target's text, for the fake proposers below


class _Lookup:
    """Offers the next five tokens of TEXT, free."""
    def begin(self, seq):
        pass

    def accepted(self, n):
        pass

    def propose(self, seq, k, sampling, rng, guide=None):
        from edgespec.proposers import Proposal
        n = min(k, 5)
        return Proposal(TEXT[len(seq):len(seq) + n], None, ["lookup"] * n)


class _Draft(_Lookup):
    """Takes `step` seconds a token; every other token it drafts is wrong."""
    def __init__(self, step=0.002):
        self.step, self.asked = step, 0

    def propose(self, seq, k, sampling, rng, guide=None):
        from edgespec.proposers import Proposal
        self.asked += 1
        time.sleep(self.step * k)
        return Proposal([t if i % 2 == 0 else -1 for i, t in enumerate(TEXT[len(seq):len(seq) + k])], None,
                        ["draft"] * k)


class _Hybrid:
    def __init__(self, *parts):
        self.parts = parts


class _Silent(_Lookup):
    """A lookup that never finds a match."""
    def propose(self, seq, k, sampling, rng, guide=None):
        from edgespec.proposers import Proposal
        return Proposal([], None, [])


class _Right(_Draft):
    """A draft model whose every token passes, at `step` seconds a token."""
    def propose(self, seq, k, sampling, rng, guide=None):
        from edgespec.proposers import Proposal
        self.asked += 1
        time.sleep(self.step * k)
        return Proposal(TEXT[len(seq):len(seq) + k], None, ["draft"] * k)


def run_chain(drafting, proposer, rounds, verify_s=0.0, drafted=None):
    """Rounds of a chain on TEXT, as the engine runs them (a verify taking verify_s); the rounds' reasons (and, in
    `drafted`, how many tokens each round verified)."""
    import numpy as np

    from edgespec.sampling import SamplingConfig
    from edgespec.stats import GenerationStats

    chain = drafting.chain(proposer, None, None)
    seq, rng, stats, reasons = TEXT[:10], np.random.default_rng(0), GenerationStats(), []
    chain.begin(seq)
    for _ in range(rounds):
        prop, why = chain.propose(list(seq), 64, SamplingConfig(temperature=0.0), rng, stats)
        reasons.append(why)
        if drafted is not None:
            drafted.append(len(prop.tokens))
        time.sleep(verify_s)
        n = next((i for i, t in enumerate(prop.tokens) if t != TEXT[len(seq) + i]), len(prop.tokens))
        chain.accepted(n, TEXT[len(seq):len(seq) + n + 1])
        seq = TEXT[:len(seq) + n + 1]
    return reasons


def test_an_explore_round_behind_lookup_drafts_only_where_the_plan_drafts():
    # Lookup offers five tokens that all pass; the draft model (a fifth of a step per token, half its tokens pass)
    # can only add cost after them. Every 8th round is an explore round for its policy: it must not force the
    # draft model in (which on copied text cost the hybrid more than it gained), only lengthen a draft the plan
    # chose.
    from edgespec.drafting import Drafting

    cost = CostModel()
    cost.verify_s = {m: 0.01 for m in range(1, 18)}
    drafting = Drafting(8, True, cost)
    lookup, draft = _Lookup(), _Draft()
    drafting.policy(lookup).cost.draft_s = 1e-6  # free
    drafting.policy(draft).seed({"draft_round_s": {1: 0.002, 4: 0.008}, "reached": [8.0, 4.0, 2.0],
                                 "accepted": [4.0, 2.0, 1.0]})
    reasons = run_chain(drafting, _Hybrid(lookup, draft), 24)
    assert sum("explore" in r for r in reasons) >= 2
    assert draft.asked == 0
    # nor does a probe: it waits for a round where lookup offers nothing
    drafting.policy(draft)._plain_left = 1
    reasons = run_chain(drafting, _Hybrid(lookup, draft), 8)
    assert all(r == "free+probe" for r in reasons[1:]) and draft.asked == 0


def test_a_draft_model_the_plan_keeps_declining_behind_lookup_is_probed():
    # Lookup finds nothing; the draft model's estimate (a = 0.45 at the new text, from texts it did not suit) says it
    # would just miss paying for itself (0.97 of a plain token at K=1), so the plan declines it round after round, and
    # its estimate would never be tested again. Taken as a fallback's verdict: a probe on this text (where every
    # token it drafts passes), after which it drafts by cost.
    from edgespec.drafting import Drafting

    cost = CostModel()
    cost.verify_s = {m: 0.1 for m in range(1, 18)}
    drafting = Drafting(8, True, cost)
    lookup, draft = _Silent(), _Right(step=0.04)
    drafting.policy(lookup).cost.draft_s = 1e-6  # free
    drafting.policy(draft).seed({"draft_round_s": {1: 0.04, 2: 0.08}, "reached": [20.0, 6.0], "accepted": [6.0, 2.0]})
    reasons = run_chain(drafting, _Hybrid(lookup, draft), 12)
    assert reasons[0] == "free+cost" and reasons[1] == reasons[2] == "free+probe"
    assert any("cost" in r for r in reasons[3:]) and drafting.policy(draft).cost.acceptance(0) > 0.7


def test_a_declined_part_is_probed_then_falls_back_with_a_doubling_wait():
    d = DraftLength(8, adaptive=True, cost=model({m: 0.1 for m in range(1, 18)}, 0.02, [0.5] * 16))
    d.new_text()
    assert d.declined() == "" and d.decide(100, planned=True).reason == "probe"  # nothing of this text tested yet
    for _ in range(d.probe_rounds):
        d.observe(2, 1, 0.04)
    assert d.decide(100, planned=True).reason == "cost"  # the probe's verdict goes to the plan ...
    first = d.declined()  # ... which declined it again: a fallback whose wait doubles, as after a failed probe
    assert "the plan found drafting not worth" in first and "1 in a row" in first and d.standing_aside()
    wait = d._plain_left
    while d.decide(100, planned=True).reason == "fallback":
        pass
    for _ in range(d.probe_rounds):
        d.observe(2, 2, 0.04)
    d.decide(100, planned=True)
    assert "2 in a row" in d.declined() and d._plain_left >= 2 * wait - 1
    while d.decide(100, planned=True).reason == "fallback":
        pass
    for _ in range(d.probe_rounds):
        d.observe(2, 2, 0.04)
    d.decide(100, planned=True)
    d.drafting_planned()  # the plan drafted with it after this probe: the backoff ends
    assert "in a row" not in d.declined()


def test_a_free_proposer_learns_from_what_it_declined():
    # Each verify row costs 0.8 of a step, so lookup's tokens are worth verifying only if more than 0.8 of them pass;
    # its estimate (0.1, from earlier texts) says they are not. Every round its match is declined, but the tokens the
    # target chose show that it would have passed: the estimate recovers and lookup is verified again within the
    # text (not only by a recheck every 16th declined match).
    from edgespec.drafting import Drafting

    cost = CostModel()
    cost.verify_s = {m: 0.1 * (1 + 0.8 * (m - 1)) for m in range(1, 18)}
    drafting = Drafting(8, True, cost)
    lookup = _Lookup()
    policy = drafting.policy(lookup)
    policy.cost.draft_s = 1e-6
    policy.cost.reached, policy.cost.accepted = [20.0], [2.0]
    drafted = []
    run_chain(drafting, lookup, 30, drafted=drafted)
    assert drafted[0] == 0 and drafted[-1] > 0 and policy.cost.acceptance(0) > 0.8


def test_a_chain_tells_the_drafting_policy_how_its_rounds_turned_out():
    # The verify curve says 10 ms a decode; the engine's decodes take 30 (as over a network, timed apart from a
    # generation): the draft model's policy learns that its rounds cost more than expected, and falls back.
    from edgespec.drafting import Drafting

    cost = CostModel()
    cost.verify_s = {m: 0.01 for m in range(1, 18)}
    drafting = Drafting(4, True, cost)
    draft = _Draft(step=0.001)
    policy = drafting.policy(draft)
    policy.seed({"draft_round_s": {1: 0.001, 4: 0.004}, "reached": [8.0, 8.0, 8.0, 8.0],
                 "accepted": [8.0, 8.0, 8.0, 8.0]})
    reasons = run_chain(drafting, draft, 30, verify_s=0.03)
    assert policy.outcomes.rounds > 0 and policy.outcomes.time_factor() > 1.5
    assert "fallback" in reasons[-1]



def test_outcomes_start_as_expected_and_follow_what_rounds_cost():
    from edgespec.costs import Outcomes

    o = Outcomes()
    assert o.optimism() == o.time_factor() == 1.0
    o.observe(0.1, 2.0, 0.1, 2)
    assert o.optimism() == pytest.approx(1.0)
    for _ in range(60):  # each round takes twice as long as expected and yields half the tokens
        o.observe(0.1, 2.0, 0.2, 1)
    assert o.time_factor() == pytest.approx(2.0, rel=0.05)
    assert o.optimism() == pytest.approx(3.0)  # 4x, bounded
    for _ in range(200):  # better than expected: not counted on
        o.observe(0.1, 2.0, 0.05, 4)
    assert o.optimism() == o.time_factor() == 1.0


def test_rounds_that_cost_more_than_expected_make_drafting_fall_back():
    # by the model, K=3 drafts at 0.61 of a plain token's cost: it drafts; rounds that have cost 1.6x per token what
    # the model expected put it behind plain: a fallback that says why
    verify = {m: 1.0 for m in range(1, 18)}
    d = DraftLength(4, True, model(verify, 0.05, [0.5] * 8))
    assert d.decide(64).reason == "cost"
    d = DraftLength(4, True, model(verify, 0.05, [0.5] * 8))
    for _ in range(40):
        d.outcomes.observe(1.0, 2.0, 1.6, 2)
    decision = d.decide(64)
    assert decision.reason == "fallback" and "drafted rounds cost 1.5" in decision.why  # (the prior fades)


def test_a_plan_behind_lookup_drafts_only_where_outcomes_still_say_it_pays():
    verify = {m: 1.0 + 0.1 * (m - 1) for m in range(1, 18)}
    lead = model(verify, 0.0, [0.5] * 8)
    d = DraftLength(8, True, model(verify, 0.05, [0.7] * 8))
    j, f = d.plan(8, lead, 0)
    assert f > 0  # the draft model alone is expected to beat plain by well over the margin
    for _ in range(40):
        d.outcomes.observe(1.0, 2.0, 2.5, 2)
    assert d.plan(8, lead, 0) == (0, 0)  # at 2.5x what was expected it does not: a plain round


def test_drafting_past_the_longest_length_timed_costs_a_draft_step_a_token():
    """Found over a loopback rpc-server (SmolLM2 F16 and its Q4_1, the hybrid on a code edit at 0.5x of plain):
    draft rounds of 3 tokens timed at 117 ms (noise) and of 4 at 45 ms, a line through them running downhill, so 8
    tokens cost 45 ms too; with a second verify row dearer than a step the plan drafted 8 by cost, round after
    round, and the draft's confidence refused its first token each time. Each further token is a draft decode."""
    verify = {1: 0.0216, 2: 0.0451, 3: 0.047, 4: 0.0532, 5: 0.0547, 6: 0.0582, 7: 0.0655, 8: 0.0692, 9: 0.0772}
    lead = model(verify, 0.0, [0.5] * 8)
    accept = [0.95, 0.84, 0.93, 0.96, 0.96, 0.96, 0.96, 0.96]
    d = DraftLength(8, True, model(verify, 0.011, accept))
    d.cost.draft_round_s = {1: 0.0119, 2: 0.0644, 3: 0.1169, 4: 0.0453}
    assert d.cost.t_draft(8) == pytest.approx(0.0453)  # (no step timed yet: the line, never below its lower end)
    assert d.plan(8, lead, 0) == (0, 8)  # as it was: 8 drafted tokens priced as 4 pay
    d.step_s = 0.0099  # the draft model's own timing of a one-row decode
    assert d.cost.step_s == 0.0099
    assert d.cost.t_draft(8) == pytest.approx(0.0453 + 4 * 0.0099)
    assert d.cost.t_draft(4) == pytest.approx(0.0453) and d.cost.t_draft(1) == pytest.approx(0.0119)  # as timed
    assert d.cost.t_draft(2) == d.cost.t_draft(3) == pytest.approx(0.0453)  # never dearer than a longer draft
    assert d.plan(8, lead, 0) == (0, 0)  # no length pays: a plain round
    d.cost.draft_round_s = {1: 0.0119, 2: 0.0218, 3: 0.0317, 4: 0.0416}  # a line at the step: extrapolated as before
    assert d.cost.t_draft(8) == pytest.approx(0.0416 + 4 * 0.0099)


def test_hopeless_counts_what_drafted_rounds_took():
    # verify of m rows costs 1 + 0.2 (m - 1), a draft step 0.1: at full acceptance K=8 costs 0.3 a token, not
    # hopeless; rounds that took 3x their expected time make it 0.9 > the margin
    verify = {m: 1.0 + 0.2 * (m - 1) for m in range(1, 18)}
    d = DraftLength(8, True, model(verify, 0.1, [0.1] * 8))
    assert not d.hopeless()
    for _ in range(80):
        d.outcomes.observe(1.0, 1.0, 3.0, 1)
    assert d.outcomes.time_factor() == pytest.approx(3.0, rel=0.02)
    assert d.hopeless() == (min((1 + 0.2 * k + 0.1 * k) / (k + 1) for k in range(1, 9)) * 3.0 >= 0.92)


def test_a_wait_that_ends_where_drafting_could_not_pay_at_all_doubles_instead_of_probing():
    # verify of m rows costs m steps, a draft step half of one: hopeless at any acceptance. Waits double (no probe,
    # no drafted round) until one of max_wait rounds, which ends in a probe to re-time the costs.
    verify = {m: float(m) for m in range(1, 18)}
    d = DraftLength(4, True, model(verify, 0.5, [0.9] * 8))
    assert d.hopeless()
    decisions = [d.decide(64) for _ in range(2000)]
    probes = [i for i, x in enumerate(decisions) if x.reason == "probe"]
    assert probes and all(x.k == 0 for x in decisions[:probes[0]])
    assert probes[0] > d.max_wait  # after waits of 32, 64, ... up to one of max_wait
    # behind plain but not hopeless: a wait ends in a probe as before
    near = DraftLength(4, True, model({m: 1.0 + 0.3 * (m - 1) for m in range(1, 18)}, 0.05, [0.4] * 8))
    assert not near.hopeless()
    decisions = [near.decide(64) for _ in range(40)]
    assert decisions[0].reason == "fallback" and "probe" in {x.reason for x in decisions}


def test_calibration_learns_how_often_tokens_of_each_confidence_pass():
    from edgespec.confidence import Calibration

    c = Calibration(decay=1.0)
    assert c.chance(0.35) == pytest.approx(0.35)  # before any evidence: the confidence itself
    for _ in range(20):
        c.observe([0.95, 0.35, 0.35], 1)  # a sure token passes, the unsure one after it fails, the last is untested
    assert c.chance(0.95) == pytest.approx((20 + 0.95 * 2) / 22)
    assert c.chance(0.35) == pytest.approx((0 + 0.35 * 2) / 22)  # tested 20 times (not 40: the third never was)


def test_calibration_counts_a_refused_token_where_every_drafted_token_before_it_passed():
    from edgespec.confidence import Calibration

    def bins(confidence, n_accepted, refused):
        c = Calibration(decay=1.0)
        c.observe(confidence, n_accepted, refused)
        return [round(t) for t in c.tested], [round(p) for p in c.passed]

    # two drafted tokens (bins 9 and 8) passed; the refused one at 0.15 (bin 1) was the target's token there
    assert bins([0.95, 0.85], 2, (0.15, True)) == ([0, 1, 0, 0, 0, 0, 0, 0, 1, 1], [0, 1, 0, 0, 0, 0, 0, 0, 1, 1])
    # ... or was not: tested, failed
    assert bins([0.95, 0.85], 2, (0.15, False)) == ([0, 1, 0, 0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0, 1, 1])
    # a drafted token failed first: the refused one was never reached
    assert bins([0.95, 0.85], 1, (0.15, True)) == ([0, 0, 0, 0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0, 0, 1])
    # the first token refused (behind nothing, or behind an earlier part's tokens that all passed)
    assert bins([], 0, (0.15, True)) == ([0, 1, 0, 0, 0, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0, 0, 0, 0, 0])
    assert bins([0.95], 1, None) == ([0] * 9 + [1], [0] * 9 + [1])  # nothing refused (or sampled)


def test_a_confidence_stop_keeps_a_token_while_its_chance_pays_for_its_row():
    from edgespec.confidence import Calibration, ConfidenceStop

    def stop(row_s, step_s=0.1, active=True):
        return ConfidenceStop(Calibration(), lambda m: 1.0 + row_s * (m - 1), rows=1, value=1.0, step_s=step_s,
                              accept=[0.6] * 8, active=active)

    s = stop(0.3)  # each verify row costs 0.3 of a token's worth
    assert s.keep(0, 0.9)  # 0.9 >= 0.3
    assert s.further(0)  # the next, at the average 0.6: 0.9 * 0.6 = 0.54 >= 0.3 + a draft step of 0.1
    assert not s.keep(1, 0.3)  # 0.9 * 0.3 = 0.27 < 0.3: it hesitates here, the round ends
    assert s.confidence == [0.9]
    assert not stop(1.0).keep(0, 0.9)  # where a row costs a whole token, not even a sure one is worth it
    flat = stop(0.05)  # where rows are nearly free, a doubtful token is still worth trying
    assert flat.keep(0, 0.9) and flat.keep(1, 0.3) and flat.further(1)
    learning = stop(1.0, active=False)  # a learning round drafts its whole length and only notes confidences
    assert learning.keep(0, 0.2) and learning.further(0) and learning.confidence == [0.2]


def test_a_first_token_pays_for_its_row_with_the_tokens_it_opens_the_way_to():
    # A step-shaped verify curve (a second row's logits crossing a network, an F16 target here): the second row
    # costs 1.5 of a token's worth, each after it 0.02. Alone, a sure first token (0.9 x 1.0 < 1.5) never paid
    # for its row and the draft drafted nothing; with four more at the average 0.9 behind it, the five bring
    # 0.9 + 0.81 + 0.729 + 0.656 + 0.59 = 3.69 for rows and steps of 1.5 + 4 x 0.02 + 4 x 0.05 = 1.78.
    from edgespec.confidence import Calibration, ConfidenceStop

    def verify(m):
        return 1.0 if m == 1 else 2.5 + 0.02 * (m - 2)

    def stop(most):
        s = ConfidenceStop(Calibration(prior_weight=1e9), verify, rows=1, value=1.0, step_s=0.05, accept=[0.9] * 8)
        s.most = most
        return s

    s = stop(5)
    assert s.keep(0, 0.9) and s.further(0)  # the next: 0.81 for a row of 0.02 and a step of 0.05
    assert s.keep(1, 0.9) and s.reach == pytest.approx(0.81)
    assert not stop(1).keep(0, 0.9)  # where the round may draft one token, that token alone must pay: it does not
    assert not stop(5).keep(0, 0.3)  # nor a doubtful one: 0.3 + 0.27 + ... = 1.23 at most, under its rows
    # where rows rise evenly, what comes after a token cannot pay for it (each brings less than the one before)
    even = ConfidenceStop(Calibration(prior_weight=1e9), lambda m: 1.0 + 0.95 * (m - 1), rows=1, value=1.0,
                          step_s=0.0, accept=[0.9] * 8)
    assert not even.keep(0, 0.9)


def test_a_confidence_stop_hands_the_round_on_where_its_caller_says_lookup_continues_for_less():
    from edgespec.confidence import Calibration, ConfidenceStop

    asked = []
    s = ConfidenceStop(Calibration(), lambda m: 1.0 + 0.05 * (m - 1), rows=1, value=1.0, step_s=0.1, accept=[0.9] * 8)
    assert s.keep(0, 0.95) and s.further(0, [7])  # no hand-off set: as before
    s.hand_off = lambda drafted: asked.append(list(drafted)) or drafted[-1] == 9
    assert s.further(0, [7]) and not s.further(1, [7, 9])  # after 9 lookup takes the round on
    assert asked == [[7], [7, 9]]
    assert s.further(0)  # (no tokens given: nothing to hand on)
    learning = ConfidenceStop(Calibration(), lambda m: 1.0, rows=1, value=1.0, step_s=0.1, accept=[0.9] * 8,
                              active=False)
    learning.hand_off = lambda drafted: True
    assert learning.further(0, [9])  # a learning round drafts its whole length


def test_a_hand_off_weighs_the_whole_round_with_its_verify_not_the_next_token_alone():
    from edgespec.splits import least_per_token

    def verify(m: int) -> float:  # a memory-bound target: a row is 2% of a step
        return 1.0 + 0.02 * (m - 1)

    # a round of 2 rows so far: its verify T_v(3) = 1.04 and 0.1 s of drafting, 2.7 tokens expected, all passing
    # with chance 0.8; lookup's continuation passes at 0.5 a token (a row and 0.01 s of later reading each), the
    # draft model's at 0.9 (a row and a 0.05 s step each)
    (e_tail, tail), (e_mine, mine) = (least_per_token(verify, 2, 1.14, 2.7, 0.8, [0.5, 0.5], 0.01),
                                      least_per_token(verify, 2, 1.14, 2.7, 0.8, [0.9, 0.9, 0.9], 0.05))
    assert (e_tail, e_mine) == (2, 3)
    assert tail == pytest.approx((0.1 + 1.08 + 0.02) / (2.7 + 0.4 + 0.2))  # its best: both tokens, 0.364 a token
    assert mine == pytest.approx((0.1 + 1.10 + 0.15) / (2.7 + 0.72 + 0.648 + 0.5832))  # all three, 0.290 a token
    assert mine < tail  # drafting on: the round yields more for its verify
    # token against token the copy looked the cheaper: 0.03 s for 0.5 of a token against 0.07 s for 0.9
    assert 0.03 / 0.5 < 0.07 / 0.9
    assert least_per_token(verify, 2, 1.14, 2.7, 0.8, [], 0.01) == (0, float("inf"))  # nothing to go on with


def test_a_checked_hand_off_drafts_one_token_more_and_hands_on_only_where_that_token_is_lookups():
    from edgespec.chain import Chain
    from edgespec.confidence import Calibration, ConfidenceStop

    s = ConfidenceStop(Calibration(), lambda m: 1.0 + 0.05 * (m - 1), rows=1, value=1.0, step_s=0.1, accept=[0.9] * 8)
    s.most = 4
    s.hand_off = lambda drafted: setattr(s, "check", 42) or True  # lookup continues with 42, checked
    assert s.further(0, [7])  # the hand-off waits: one token more, to check it
    assert s.agrees(42) and s.check is None  # lookup's next token: the round stops after it, lookup goes on
    assert s.further(0, [7]) and not s.agrees(41)  # another: the draft model drafts on
    assert not s.agrees(42)  # (a check is spent once asked)
    assert not s.further(3, [7, 8, 9, 10]) and s.check is None  # no room for one more: handed on unchecked
    # Priced: checked where the rows a wrong continuation wastes cost more than the checking step, less the reading
    # it spares (the replay's costs: a memory-bound target's next four rows, a flat curve's, the draft's step and read)
    assert Chain._checked(0.6, rows_s=4 * 0.0114, step_s=0.0216, read_s=0.0093)  # 18 ms against 12
    assert not Chain._checked(0.6, rows_s=4 * 0.0021, step_s=0.0216, read_s=0.0093)  # 3 ms
    assert not Chain._checked(0.95, rows_s=4 * 0.0114, step_s=0.0216, read_s=0.0093)  # a continuation that passes


def test_a_confidence_stop_prices_a_draft_step_as_the_proposer_timed_it():
    # Round costs by length mix rounds that first read the last round's tokens and rounds that ended in a step whose
    # token was not kept: here T_d(2) - T_d(1) reads as 0.5 of a plain step where a step costs 0.1. Priced so, a
    # sure draft model stopped after one token each round (the hybrid at 1.33x where the draft model alone made
    # 1.43x, memory-bound replay of the held-out set); priced as timed, it goes on.
    c = model({m: 1.0 + 0.05 * (m - 1) for m in range(1, 18)}, 0.1, [0.9] * 9)
    c.draft_round_s = {1: 0.2, 2: 0.7, 8: 1.0}
    d = DraftLength(8, True, c)
    mixed = d.confidence_stop(1)  # without a timed step: from the round costs; the round ends after a sure token
    assert mixed.step_s == pytest.approx(0.5) and mixed.keep(0, 0.95) and not mixed.further(0)
    d.step_s = 0.1  # as the draft model timed it (the chain passes it on)
    stop = d.confidence_stop(1)
    assert stop.step_s == pytest.approx(0.1)
    assert stop.keep(0, 0.95) and stop.further(0)


def test_the_way_back_to_plain_steps_is_priced_from_where_the_target_stands():
    """Over a link the plain step after a verify resends its graph (1 Gbit/s: 13-22 ms more than after another plain
    step, bench/results/rpc-rows-smollm.log). Drafting pays that way back once, whenever it stops: after a plain
    step a round of m rows costs its decode and its share of the way back (how often a round of several rows was
    followed by a plain step), so a draft that pays without it may not pay with it; after a round of several rows a
    plain step costs the way back in full and a verify nothing more. Between timed sizes the way back is
    interpolated, past them it is the nearest one's (two noisy timings of a small difference extrapolate anywhere)."""
    from edgespec.way_back import WayBack

    c = CostModel(verify_s={1: 0.010, 2: 0.012, 5: 0.020}, draft_s=0.001)
    c.reached, c.accepted = [100.0] * 4, [80.0] * 4
    assert c.t_verify(2) == 0.012 and c.cost_per_token(1) < c.t_verify(1)  # pays
    c.back.observe(1, 0.5)  # (a one-row decode after a one-row one: nothing to learn)
    c.back.observe(2, 0.008)
    c.back.observe(5, 0.010)
    assert c.back.seconds == {2: 0.008, 5: 0.010} and c.back.ends == 1.0 and c.t_verify(1) == 0.010
    assert c.t_verify(2) == pytest.approx(0.020) and c.t_verify(5) == pytest.approx(0.030)
    assert c.t_verify(3) == pytest.approx(0.012 + 0.008 / 3 + 0.008 + 0.002 / 3)
    assert c.t_verify(8) == pytest.approx(0.028 + 0.010)  # the decode along its line, the way back flat
    assert c.cost_per_token(1) > c.t_verify(1)  # no longer pays
    c.back.decoded(5, None)  # a round of 5 rows: from here a plain step pays the way back, a verify nothing more
    assert c.t_verify(1) == pytest.approx(0.020) and c.t_verify(2) == 0.012 and c.cost_per_token(1) < c.t_verify(1)
    c.back.decoded(3, None)  # drafting went on: rounds share the way back
    assert c.back.ends == pytest.approx(0.8)
    c.back.decoded(1, 0.011)  # ... and back to plain steps: timed
    assert c.back.seconds[3] == 0.011 and c.back.ends == pytest.approx(0.84)
    assert c.t_verify(1) == 0.010 and c.t_verify(5) == pytest.approx(0.020 + 0.84 * 0.010)
    c.back.decoded(1, 0.5)  # a plain step after a plain step teaches the way back nothing
    assert c.back.seconds == {2: 0.008, 3: 0.011, 5: 0.010} and c.back.ends == pytest.approx(0.84)
    shared = CostModel(verify_s=c.verify_s, back=c.back)  # another proposer's policy: the same target
    assert shared.t_verify(5) == c.t_verify(5) and WayBack().price(4) == 0.0


def test_over_an_rpc_server_each_size_is_decoded_once_before_it_is_timed():
    """The first decode of each batch size over an rpc-server is slow, the next not (10 ms away:
    a first two-row decode took 5.1x a one-row one, 1.3x the next time): timed so, the verify curve rose in a step
    that was not there in generation. There each size is decoded once before it is timed; locally one warm-up row.
    And over a link a decode of another shape than the last resends the graph (1 Gbit/s: a one-row decode 5 ms
    dearer after a five-row one than after another one-row one, bench/rpc_rows.py): a plain step is timed after a
    one-row decode, as plain decoding pays it, each longer decode after a shorter one, as a verify pays it, and a
    one-row decode after the longer ones, the way back to plain steps that a round of that many rows costs."""
    from types import SimpleNamespace

    from edgespec.drafting import Drafting

    class Target:
        def __init__(self, rpc):
            self.model, self.tokens, self.room, self.shapes = SimpleNamespace(rpc=rpc, bos=1), [5, 6], 100, []

        def decode(self, tokens, rows):
            self.tokens += tokens
            self.shapes.append(len(tokens))

        def truncate(self, n):
            del self.tokens[n:]

    for rpc, warm, passes in (([("127.0.0.1", 50052)], [1, 2, 4], [1, 1, 2, 1, 4, 1] * 3), ([], [1], [1, 2, 4])):
        target, cost = Target(rpc), CostModel()
        curve = Drafting(4, True, cost).calibrate(target, [1, 2, 4])
        assert target.shapes == warm + passes and sorted(curve) == [1, 2, 4] and target.tokens == [5, 6]
        assert sorted(cost.back.seconds) == ([2, 4] if rpc else [])


def test_over_an_rpc_server_the_curve_is_the_median_of_three_passes(monkeypatch):
    """Over a network one timing can stray (a one-row decode at 99 ms where the others took 16-22): there each
    size is timed three times, in passes, and the median kept, so one stray timing does not become the curve."""
    from types import SimpleNamespace

    from edgespec import drafting

    clock = [0.0]
    stray = {(1, 1): 0.099}  # (rows, nth decode of that size) -> seconds; else 0.02 per row (a one-row timing
    # is the second of two one-row decodes: the first pass's)

    class Target:
        def __init__(self):
            self.model, self.tokens, self.room, self.passes = SimpleNamespace(rpc=["127.0.0.1:1"], bos=1), [5], 100, {}

        def decode(self, tokens, rows):
            m = len(tokens)
            n = self.passes[m] = self.passes.get(m, -2) + 1  # (-1: the decode before timing)
            clock[0] += stray.get((m, n), 0.02 * m)

        def truncate(self, n):
            pass

    monkeypatch.setattr(drafting.time, "perf_counter", lambda: clock[0])
    curve = drafting.Drafting(4, True, CostModel()).calibrate(Target(), [1, 2])
    assert curve == pytest.approx({1: 0.02, 2: 0.04})



class _Quote(_Silent):
    """A lookup that finds nothing in the text alone, but continues a quote the draft's tokens began (`right`: with
    TEXT's next tokens, else with wrong ones)."""
    def __init__(self, right=True):
        self.right, self.asked = right, 0

    def match_after(self, seq, extra, k):
        self.asked += 1
        at = len(seq) + len(extra)
        return (TEXT[at:at + min(k, 6)] if self.right else [-1] * min(k, 6)), "lookup:3"


def test_lookup_continues_a_quote_the_draft_model_began_where_it_pays():
    # Memory-bound (a verify row costs 2% of a step), the draft model right at a tenth of a step per token, and
    # lookup able to continue from where the draft stopped: the round verifies the draft's tokens and lookup's
    # after them, and lookup's kind for such matches ("lookup:3:tail") is learned apart from its own matches.
    from edgespec.drafting import Drafting

    cost = CostModel()
    cost.verify_s = {m: 0.01 * (1 + 0.02 * (m - 1)) for m in range(1, 18)}
    drafting = Drafting(8, True, cost)
    lookup, draft = _Quote(), _Right(step=0.001)
    drafting.policy(lookup).cost.draft_s = 1e-6  # free
    drafting.policy(draft).k_max = 4  # (a round of 8: room for lookup's tokens after the draft's)
    drafting.policy(draft).seed({"draft_round_s": {1: 0.001, 4: 0.004}, "reached": [8.0] * 4,
                                 "accepted": [8.0] * 4})
    drafted = []
    reasons = run_chain(drafting, _Hybrid(lookup, draft), 12, drafted=drafted)
    assert sum("tail" in r.split("+") for r in reasons) >= 6 and 4 < max(drafted) <= 8  # past the draft, not K
    tail = drafting.policy(lookup).by_key["lookup:3:tail"]
    assert tail.acceptance(0) > 0.8 and "lookup:3" not in drafting.policy(lookup).by_key


def test_a_quote_that_fails_is_soon_not_verified_and_a_fixed_chain_has_none():
    from edgespec.drafting import Drafting

    def setup(right, adaptive=True):
        cost = CostModel()
        cost.verify_s = {m: 0.01 * (1 + 0.3 * (m - 1)) for m in range(1, 18)}  # a row: 30% of a step
        drafting = Drafting(8, adaptive, cost)
        lookup, draft = _Quote(right), _Right(step=0.001)
        drafting.policy(lookup).cost.draft_s = 1e-6
        drafting.policy(draft).k_max = 4
        drafting.policy(draft).seed({"draft_round_s": {1: 0.001, 4: 0.004}, "reached": [8.0] * 4,
                                     "accepted": [8.0] * 4})
        return drafting, lookup, draft

    drafting, lookup, draft = setup(right=False)
    reasons = run_chain(drafting, _Hybrid(lookup, draft), 30)
    assert "tail" in reasons[0].split("+")  # tried at the prior's rate
    assert not any("tail" in r.split("+") for r in reasons[-10:])  # then its kind's estimate declines it
    assert drafting.policy(lookup).by_key["lookup:3:tail"].acceptance(0) < 0.3
    drafting, lookup, draft = setup(right=True, adaptive=False)
    reasons = run_chain(drafting, _Hybrid(lookup, draft), 5)
    assert lookup.asked == 0 and not any("tail" in r for r in reasons)


def test_a_probe_that_must_first_read_more_than_the_tokens_left_can_repay_waits_for_the_next_text():
    """A probe mid-text first has the draft model read what it skipped; late in a short answer that reading costs
    more than testing the draft on what is left can win back (Chain._probe_too_dear)."""
    from edgespec.chain import Chain, Link
    from edgespec.chain_reading import CATCH_UP_LIMIT, PROBE_READ_SHARE
    from edgespec.proposers import DraftModelProposer

    class Behind(DraftModelProposer):  # a draft model this many tokens behind, reading at read_s a token
        def __init__(self, n: int, read_s: float) -> None:
            self.n, self.read_s = n, read_s

        def behind(self, seq) -> int:
            return self.n

    policy = DraftLength(8, True)
    policy.cost.observe_verify(1, 0.070)
    link = Link(Behind(20, 0.008), policy)
    chain = Chain([link], None, None)
    assert PROBE_READ_SHARE * 64 * 0.070 > 20 * 0.008  # 160 ms of reading against 5% of 64 plain steps: it probes
    assert not chain._probe_too_dear(link, [], 64)
    assert chain._probe_too_dear(link, [], 24)  # 24 tokens left (84 ms): it waits
    assert not chain._probe_too_dear(link, [], 4000)
    link.part.n = CATCH_UP_LIMIT + 1  # more than a probe ever reads first, however much is left
    assert chain._probe_too_dear(link, [], 4000)
    link.part.n, link.part.read_s = 20, None  # a reading not timed yet: only the limit holds
    assert not chain._probe_too_dear(link, [], 24)
    # over a link, right after a verify: the tokens left are priced at a plain step, not a step plus the way back
    # (which only the first of them pays)
    link.part.read_s = 0.008
    policy.cost.back.observe(5, 0.200)
    policy.cost.back.decoded(5, None)
    assert policy.cost.t_verify(1) == pytest.approx(0.270)
    assert chain._probe_too_dear(link, [], 24) and not chain._probe_too_dear(link, [], 64)


def test_a_held_up_timing_moves_a_running_cost_as_one_of_twice_the_cost_would():
    """A machine's timings have a tail of hold-ups (another process's turn, a page fault: SmolLM2 steps of 17-20 ms,
    one in ten 30-72 ms over a proxied link). One of them, taken whole, left a cost high for the timings after it
    (or for good, where its price kept the policy from drafting that length again). A timing over HOLD_UP times the
    running average moves it as one of HOLD_UP times it would; a lasting change is still followed, and a faster
    timing counts whole. Replayed with hold-ups, `bench/replay_matrix.sh hiccups`; without them nothing changes."""
    from edgespec.costs import HOLD_UP, Outcomes, running
    from edgespec.drafting import Drafting

    assert HOLD_UP == 2.0
    assert running(None, 0.5) == 0.5
    assert running(0.010, 0.200) == pytest.approx(0.010 + 0.2 * 0.010)  # a 20x hold-up: as a 2x timing
    assert running(0.010, 0.004) == pytest.approx(0.010 - 0.2 * 0.006)  # faster: whole
    t = 0.010
    for _ in range(20):  # the machine got 3x slower and stays so: followed, capped only at first
        t = running(t, 0.030)
    assert t == pytest.approx(0.030, rel=0.03)
    c = CostModel(verify_s={1: 0.010}, draft_round_s={2: 0.020}, draft_s=0.010)
    c.observe_verify(1, 0.500)
    c.observe_draft(2, 1.0)
    assert c.verify_s[1] == pytest.approx(0.012) and c.draft_round_s[2] == pytest.approx(0.024)
    assert c.draft_s == pytest.approx(0.012)
    # a drafted round that took 10x what was expected counts as one of 2x what rounds have taken so far
    o = Outcomes()
    o.observe(1.0, 2.0, 1.0, 2)
    o.observe(1.0, 2.0, 10.0, 2)
    assert o.time_factor() == pytest.approx((0.95 * 4.8 + 2) / (0.95 * 4.8 + 1))  # (4 prior rounds, faded once)
    # over a link, a plain step held up after a verify: its way back counts as a timing of 2x (a step and the
    # way back known) would
    drafting = Drafting(4, True, CostModel(verify_s={1: 0.010}))
    back = drafting.cost.back
    back.observe(5, 0.004)
    drafting.decoded(5, 0.030, True)
    drafting.decoded(1, 0.300, True)
    assert back.seconds[5] == pytest.approx(0.004 + 0.2 * (2 * (0.010 + 0.004) - 0.010 - 0.004))


def test_a_prompt_is_read_only_where_drafting_can_repay_the_reading():
    """Reading: a new text's prompt costs the draft model n x prompt_read_s before it can draft; over the tokens the
    text may get, drafting must be expected to save more than that, else the text goes without it (one fallback
    that says why, standing aside: no reading, no probe) until the next text. Made-up costs: a plain token 100 ms,
    the best K expected at under 50 ms a token, so some 50 ms saved per token."""
    cost = model({m: 0.1 + 0.01 * (m - 1) for m in range(1, 18)}, 0.005, [0.8] * 16)
    d = DraftLength(8, adaptive=True, cost=cost)
    k, per_token = cost.best_k(8)
    saving = 0.1 - per_token
    assert 0.045 < saving < 0.06
    assert d.reading_pays(1000, 64)  # the rate unknown: read, and so measure it
    d.prompt_read_s = 0.01
    n = int(64 * saving / 0.01)  # what 64 tokens would save, in tokens read
    assert d.reading_pays(n - 5, 64) and not d.standing_aside()
    assert d.reading_pays(1000, 1000)  # a long answer repays a long prompt
    assert d.reading_pays(1000, 64, adaptive=False)  # a fixed length is the user's: read
    assert not d.reading_pays(n + 5, 64)
    assert d.standing_aside()
    first = d.decide(64)
    assert first.reason == "fallback" and first.k == 0 and "reading the prompt" in first.why
    assert d.decide(63) == type(first)(0, "fallback", "")  # said once
    d.new_text()
    assert not d.standing_aside() and d.decide(64).reason in ("cost", "explore")
    assert d.reading_pays(0, 64)  # nothing to read (a conversation's next turn, held already)
    behind = DraftLength(8, adaptive=True, cost=model({m: 0.1 for m in range(1, 18)}, 0.2, [0.5] * 16))
    behind.prompt_read_s = 0.001
    # drafting not expected to pay at all: left to the fallback and its probes, which read a prompt to learn again
    # (skipped, such a policy would never test a text again)
    assert behind.reading_pays(50, 64) and not behind.standing_aside()


def test_a_draft_model_reads_a_skipped_kind_of_prompt_again_now_and_then(monkeypatch):
    """Reading.read_again: the verdict that a prompt is not worth reading rests on acceptance that only drafting
    updates, so a draft model alone reads one all the same after 1, 2, 4 .. READ_AGAIN_MOST texts in a row without,
    where the reading costs at most READ_AGAIN_SHARE of the text's tokens taken plainly; in a chain (alone=False,
    behind prompt lookup) after READ_AGAIN_CHAIN, then twice as many; a dearer prompt is not counted; a verdict that
    pays starts the count again. Made-up costs: a plain token 100 ms, 5 ms saved per token, a prompt token read in
    10 ms: over 64 tokens 31 are repaid, 64 cheap enough."""
    from edgespec.reading import READ_AGAIN_CHAIN, READ_AGAIN_MOST, READ_AGAIN_SHARE

    cost = model({m: 0.1 + 0.01 * (m - 1) for m in range(1, 18)}, 0.005, [0.8] * 16)
    monkeypatch.setattr(cost, "best_k", lambda k: (2, 0.095))
    d = DraftLength(8, adaptive=True, cost=cost)
    d.prompt_read_s = 0.01
    assert READ_AGAIN_SHARE * 64 * 0.1 / 0.01 == pytest.approx(64) and READ_AGAIN_MOST == 16
    read = []
    for _ in range(60):
        d.new_text()
        read.append(d.reading_pays(40, 64, alone=True))
    assert [i for i, r in enumerate(read) if r] == [1, 4, 9, 18, 35, 52]  # after 1, 2, 4, 8, 16, 16 without
    assert d.unread  # (a text without: the fallback says why, as before)
    for _ in range(40):
        d.new_text()
        assert not d.reading_pays(100, 64, alone=True)  # dear: never, and not counted
    d.new_text()
    assert d.reading_pays(30, 64, alone=True)  # a verdict that pays starts the count again
    d.new_text()
    assert not d.reading_pays(40, 64, alone=True)
    d.new_text()
    assert d.reading_pays(40, 64, alone=True)
    chain = DraftLength(8, adaptive=True, cost=cost)
    chain.prompt_read_s = 0.01
    read = []
    for _ in range(50):
        chain.new_text()
        read.append(chain.reading_pays(40, 64))
    assert READ_AGAIN_CHAIN == 4 and [i for i, r in enumerate(read) if r] == [4, 13, 30, 47]  # 4, 8, 16, 16 without
    chain.new_text()
    assert chain.reading_pays(30, 64)  # a verdict that pays: the next wait is READ_AGAIN_CHAIN again
    read = []
    for _ in range(6):
        chain.new_text()
        read.append(chain.reading_pays(40, 64))
    assert [i for i, r in enumerate(read) if r] == [4]


def test_a_prompt_is_weighed_over_the_answers_expected_length_and_read_late_where_the_text_runs_on():
    """Reading: max_tokens is only the most a text may get (chat's 1,024, a server's context); the reading is weighed
    over what answers have taken (their running mean, ANSWER_FLOOR tokens at least), and a text that runs past it is
    expected to run on as long again, so a prompt skipped at the start is read once what is left repays it
    (read_late). Made-up costs as above: some 50 ms saved per token, a prompt token read in 10 ms."""
    from edgespec.reading import ANSWER_FLOOR

    cost = model({m: 0.1 + 0.01 * (m - 1) for m in range(1, 18)}, 0.005, [0.8] * 16)
    d = DraftLength(8, adaptive=True, cost=cost)
    d.prompt_read_s = 0.01
    saving = 0.1 - cost.best_k(8)[1]
    assert d.answer_tokens == ANSWER_FLOOR and d.expected_left(0, 1024) == ANSWER_FLOOR
    assert d.expected_left(0, 40) == 40 and d.expected_left(40, 1024) == ANSWER_FLOOR - 40
    assert d.expected_left(300, 1024) == 300 and d.expected_left(300, 50) == 50  # run past it: as long again
    n = int(ANSWER_FLOOR * saving / 0.01) + 50  # more than the expected answer repays; less than 1,024 tokens
    assert d.reading_pays(n, 1024)  # (weighed over max_tokens, as before)
    assert not d.reading_pays(n, d.expected_left(0, 1024)) and d.unread and d.standing_aside()
    assert "unless the text runs on" in d.decide(1024).why
    assert not d.read_late(n, 0, 1024) and not d.read_late(n + 60, 60, 964)  # not yet repaid
    assert not d.read_late(n + 400, 400, 50)  # ... nor with few tokens left, however long it ran
    made = next(p for p in range(1, 1024) if (n + p) * 0.01 < p * saving)
    assert d.read_late(n + made, made, 1024 - made)
    assert not d.unread and not d.standing_aside() and d.decide(900).reason in ("cost", "explore")
    assert not d.read_late(n + made + 1, made + 1, 900)  # (once: it reads with the rounds from now on)
    for length in (20, 30, 25):  # short answers: heard, but the horizon stays at the floor
        d.answered(length)
    assert 20 < d.answer_tokens < ANSWER_FLOOR and d.expected_left(0, 1024) == ANSWER_FLOOR
    for _ in range(20):  # long ones lengthen it
        d.answered(900)
    d.answered(0)  # (a text that got nothing says nothing of lengths)
    assert d.expected_left(0, 1024) == round(d.answer_tokens) > 700 and d.reading_pays(n, d.expected_left(0, 1024))
    behind = DraftLength(8, adaptive=True, cost=model({m: 0.1 for m in range(1, 18)}, 0.2, [0.5] * 16))
    behind.prompt_read_s, behind._skip = 0.001, ""
    assert not behind.read_late(10, 500, 500)  # drafting not expected to pay: nothing read for it mid-text
