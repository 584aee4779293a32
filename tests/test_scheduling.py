"""The batch's drafting rule on made-up costs: speculation where verify rows are nearly free, none where they cost
what they hold, fading as the batch fills; the draft's catch-up paid off over what a sequence has left; probes
bounded by their share of the time."""
from edgespec.scheduling import Option, StepPlanner
from edgespec.tuning import CostModel


def planner(verify, draft_step=0.01, draft_token=0.002, accept=0.8):
    cost = CostModel()
    for m in (1, 2, 4, 8, 16, 32, 64):
        cost.observe_verify(m, verify(m))
    p = StepPlanner(cost)
    p.observe_draft_step(draft_step)
    p.observe_catch_up(32, 32 * draft_token)
    for _ in range(50):  # rounds of four drafted tokens, round(4 * accept) of them accepted
        for kind in ("draft", "lookup"):
            p.accept[kind].observe_acceptance(4, round(4 * accept))
    return p


FLAT = lambda m: 0.1 + 0.002 * m  # memory-bound: rows nearly free  # noqa: E731
LINEAR = lambda m: 0.07 * m  # compute-bound: every row costs a full step  # noqa: E731


def test_one_sequence_drafts_where_rows_are_free_and_not_where_they_cost_a_step():
    assert planner(FLAT).plan([Option("draft", 8, remaining=200)])[0][1] == "cost"
    assert planner(FLAT).plan([Option("draft", 8, remaining=200)])[0][0] >= 2
    assert planner(LINEAR).plan([Option("draft", 8, remaining=200)]) == [(0, "plain")]


def test_drafting_fades_as_the_batch_fills():
    # rows free up to 8, then each costs a step's worth: one sequence drafts, eight share the step plainly
    def knee(m):
        return 0.1 if m <= 8 else 0.1 * m / 8
    alone = planner(knee).plan([Option("draft", 4, remaining=200)])
    full = planner(knee).plan([Option("draft", 4, remaining=200) for _ in range(8)])
    assert alone[0][0] > 0
    assert sum(k for k, _ in full) < sum(k for k, _ in alone) * 8 / 2


def test_a_long_catch_up_is_not_worth_it_for_a_short_answer():
    p = planner(FLAT, draft_token=0.01)
    assert p.plan([Option("draft", 4, remaining=400, behind=200)])[0][0] > 0  # 2 s paid off over ~100 steps
    assert p.plan([Option("draft", 4, remaining=4, behind=200)]) == [(0, "plain")]  # 2 s for at most 4 tokens


def test_a_catch_up_must_pay_within_a_few_steps_however_long_the_answer():
    # 20 s of reading would be repaid over ~3,000 steps of a long answer, but a batch's load changes well before:
    # a sequence that skipped that much text stays plain rather than paying for it on a promise
    p = planner(FLAT, draft_token=0.01)
    assert p.plan([Option("draft", 4, remaining=10_000, behind=2000)]) == [(0, "plain")]
    assert p.plan([Option("draft", 4, remaining=10_000, behind=20)])[0][0] > 0


def test_fixed_requests_draft_their_own_k_and_off_is_off():
    p = planner(LINEAR)
    assert p.plan([Option("draft", 3, auto=False), Option("off", 0), Option("lookup", 0)]) == [
        (3, "fixed"), (0, "off"), (0, "off")]


def test_warm_up_drafts_before_there_is_evidence():
    cost = CostModel()
    cost.observe_verify(1, 0.07)
    p = StepPlanner(cost)
    assert p.plan([Option("lookup", 8)]) == [(4, "warm-up")]
    assert p.plan([Option("draft", 8)]) == [(4, "warm-up")]  # no draft timing yet


def MILD(m):  # rows cost a third of a step: drafting pays only with good acceptance
    return 0.07 + 0.025 * (m - 1)


def probes_in(p, options, verify, steps=3000):
    probes, probe_seconds, total = [], 0.0, 0.0
    for _ in range(steps):
        plan = p.plan(options)
        assert all(k == 0 or why == "probe" for k, why in plan)
        step_s = verify(len(options))
        for i, (k, why) in enumerate(plan):
            if why == "probe":
                probes.append(i)
                step_s += verify(len(options) + k) - verify(len(options)) + k * 0.01
        total += step_s
        probe_seconds += step_s - verify(len(options))
        p.observe_step(step_s)
    return probes, probe_seconds / total


def test_probes_come_only_within_their_share_of_the_time_and_pick_the_cheapest():
    p = planner(MILD, accept=0.0)  # nothing passes: plain, but a draft that passed whole would pay
    probes, share = probes_in(p, [Option("draft", 4, remaining=100, behind=300),
                                  Option("draft", 4, remaining=100, behind=0)], MILD)
    assert probes and set(probes) == {1}  # the one whose draft cache is caught up
    assert share < 0.03


def test_no_probe_where_even_a_draft_that_passed_whole_would_not_pay():
    probes, _ = probes_in(planner(LINEAR, accept=0.0), [Option("draft", 4, remaining=100)], LINEAR)
    assert probes == []


def test_no_probe_when_even_a_probe_of_a_caught_up_sequence_is_dearer_than_the_budget():
    p = planner(MILD, draft_token=1.0, accept=0.0)
    for _ in range(200):
        assert p.plan([Option("draft", 4, remaining=100, behind=500)]) == [(0, "plain")]
        p.observe_step(0.07)


def test_a_new_sequence_gets_its_first_token_from_a_plain_step():
    p = planner(FLAT)
    assert p.plan([Option("draft", 4, remaining=200, behind=150, first=True)]) == [(0, "first")]
    assert p.plan([Option("draft", 4, remaining=200, behind=150)])[0][0] > 0  # the next step drafts
    assert p.plan([Option("lookup", 4, remaining=200, first=True)])[0][0] > 0  # lookup has nothing to read
