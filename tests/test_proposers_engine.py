"""Prompt lookup, the hybrid, and the adaptive draft length through the real loop: still lossless."""
import numpy as np
import pytest

import edgespec
from edgespec.proposers import Proposal, PromptLookupProposer
from edgespec.tuning import CostModel
from conftest import PROMPTS
from identity import assert_identical_or_near_tie
from stats_util import assert_follows, exact_first_two, first_two_counts

TOP5 = dict(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0)
DEAR_STEP = 0.5  # a draft step at half a target step: lookup's copied tokens are the cheaper way to fill a round
REPEATING = ["the cat the cat the cat the", "abc abc abc abc ab", "def f(x):\n    return x\ndef g(x):\n    return",
             "1, 2, 3, 1, 2, 3, 1, 2,"]


@pytest.fixture(scope="module")
def lookup_engine(tiny_pair):
    e = edgespec.Engine.load(tiny_pair[0], lookup=True, n_ctx=1024)
    yield e
    e.close()


@pytest.fixture(scope="module")
def hybrid_engine(tiny_pair):
    e = edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], lookup=True, n_ctx=1024)
    yield e
    e.close()


@pytest.mark.parametrize("kind", ["lookup", "hybrid"])
@pytest.mark.parametrize("adaptive", [False, True])
def test_greedy_identity(request, kind, adaptive):
    # The adaptive hybrid gets an engine of its own: on these tiny models its draft model soon finds that drafting
    # cannot pay at all and waits without probing, so only a fresh policy's warm-up rounds draft with it.
    fresh = adaptive and kind == "hybrid"
    tiny_pair = request.getfixturevalue("tiny_pair")
    engine = edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], lookup=True, n_ctx=1024) if fresh else \
        request.getfixturevalue(f"{kind}_engine")
    drafted = {}
    for prompt in PROMPTS + REPEATING:
        tokens = engine.tokenize(prompt)
        plain = engine.generate(tokens, max_tokens=48, speculative=False)
        spec = engine.generate(tokens, max_tokens=48, draft_max=8, adaptive=adaptive)
        assert_identical_or_near_tie(engine.model, tokens, plain.tokens, spec.tokens, 8)
        for src, n in spec.stats.drafted_by_source.items():
            drafted[src] = drafted.get(src, 0) + n
    # Fixed K drafts every round. Adaptive K on these tiny models mostly falls back to plain decoding (a draft step
    # costs a target step, lookups rarely match random text), after warm-up rounds: lossless either way.
    if fresh:
        engine.close()
    least = 0 if adaptive else 50
    assert drafted.get("lookup", 0) > least
    if kind == "hybrid":
        assert drafted.get("draft", 0) > least


def test_hybrid_reports_accepted_tokens_by_source(hybrid_engine):
    r = hybrid_engine.generate("abc abc abc abc ab", max_tokens=60, draft_max=8, adaptive=False)
    s = r.stats
    assert set(s.drafted_by_source) <= {"lookup", "draft"}
    assert sum(s.accepted_by_source.values()) == s.n_accepted
    assert sum(s.drafted_by_source.values()) == s.n_drafted


@pytest.mark.parametrize("kind", ["lookup", "hybrid"])
def test_sampled_first_two_tokens_follow_the_target(request, kind):
    engine = request.getfixturevalue(f"{kind}_engine")
    drafted = []
    # with room for 4 drafts (max_tokens 6), not only the first position is tested
    counts, expected = first_two_counts(engine, engine.tokenize("abc abc abc abc ab"), TOP5, 3000, max_tokens=6,
                                        draft_max=4, adaptive=False, each=lambda r: drafted.append(r.stats.n_drafted))
    assert sum(drafted) >= 3000  # every round had a lookup match to accept or reject
    assert_follows(counts, expected)


@pytest.mark.parametrize("cfg", [dict(temperature=1.0, top_k=0, top_p=0.7, min_p=0.0),
                                 dict(temperature=0.8, top_k=0, top_p=1.0, min_p=0.05)], ids=["top-p", "min-p"])
def test_without_top_k_sampled_first_two_tokens_follow_the_target(hybrid_engine, cfg):
    # Without top-k, the target's rows and the draft's q keep only the candidates top-p or min-p can keep
    # (sampling._enough), and verification reads them as supports (sampling.Rows): the draft model's sampled tokens
    # are accepted, or rejected and the residual drawn, through that path. (Drawing from p instead of the residual
    # fails both cases: chi2 about twice the critical value. Lookup's tokens are almost never likely under the tiny
    # target, so a deterministic proposal's residual is test_verify.py's to check.)
    drafted = []
    counts, expected = first_two_counts(hybrid_engine, hybrid_engine.tokenize("abc abc abc abc ab"), cfg, 3000,
                                        max_tokens=6, draft_max=4, adaptive=False,
                                        each=lambda r: drafted.append(r.stats.drafted_by_source.get("draft", 0)))
    assert sum(drafted) >= 3000
    assert_follows(counts, expected)


class Likeliest(PromptLookupProposer):
    """A deterministic guess that is often right: after the text's first generated token, the target's likeliest
    next one (from the exact joint; a function of the text, as a lookup match is), one token, as lookup."""

    def __init__(self, after: dict[int, int], start: int) -> None:
        super().__init__()
        self.after, self.start = after, start

    def propose(self, seq, k, sampling, rng, guide=None):
        guess = self.after.get(seq[-1]) if len(seq) == self.start + 1 else None
        return Proposal([guess][:k], None, ["lookup"], key="lookup:2") if guess is not None else \
            Proposal([], None, [], key="lookup:0")


@pytest.mark.parametrize("cfg", [TOP5, dict(temperature=1.0, top_k=0, top_p=0.7, min_p=0.0)], ids=["top-5", "top-p"])
def test_sampled_first_two_tokens_follow_the_target_where_a_deterministic_guess_is_often_right(tiny_pair, cfg):
    # Lookup's own matches are almost never likely under the tiny target, so a rejected one's residual (p without
    # the guess) is drawn where the guess had next to no mass. Here the guess is the likeliest second token: often
    # accepted, and where rejected the draw must leave it out (drawing from p itself fails: chi2 of 535-614, 7-10
    # times the critical value).
    from edgespec.backend import Context, Model

    t = Model(tiny_pair[0])
    prompt = t.tokenize("abc abc abc abc ab")
    joint = exact_first_two(t, prompt, edgespec.SamplingConfig(**cfg))
    after: dict[int, tuple[float, int]] = {}
    for (a, b), p in joint.items():
        after[a] = max(after.get(a, (0.0, -1)), (p, b))
    e = edgespec.Engine(Context(t, 1024), Likeliest({a: b for a, (_, b) in after.items()}, len(prompt)), 4, False)
    accepted = []
    counts, expected = first_two_counts(e, prompt, cfg, 3000, max_tokens=4, draft_max=4, adaptive=False,
                                        each=lambda r: accepted.append(r.stats.n_accepted))
    e.close()
    assert 500 < sum(accepted) < 2500  # accepted often, rejected often
    assert_follows(counts, expected)


class FixedCosts(CostModel):
    """Costs as given, whatever the clock says; acceptance is still learned from the rounds."""

    def observe_verify(self, m, seconds):
        pass

    def observe_draft(self, n, seconds):
        pass


def engine_with_costs(tiny_pair, verify, draft_s):
    import edgespec.engine as eng
    from edgespec.backend import Context, Model
    from edgespec.proposers import DraftModelProposer

    t, d = Model(tiny_pair[0]), Model(tiny_pair[1])
    cost = FixedCosts()
    cost.verify_s = {m: verify(m) for m in range(1, 18)}
    cost.draft_s = draft_s
    return eng.Engine(Context(t, 1024), DraftModelProposer(Context(d, 1024), t.n_vocab), 8, True, cost)


def test_fallback_to_plain_when_drafting_costs_more_than_it_saves(tiny_pair):
    # compute-bound: a verify costs m plain steps, a draft step 0.5: no K can win
    e = engine_with_costs(tiny_pair, lambda m: 1.0 * m, 0.5)
    plain = e.generate("Once upon a time", max_tokens=100, speculative=False)
    r = e.generate("Once upon a time", max_tokens=100)
    e.close()
    assert r.tokens == plain.tokens
    # the first warm-up round times the draft, and no K could pay even if every token passed: the warm-up ends there
    assert r.stats.fallbacks and "could not pay even if every drafted token passed" in r.stats.fallbacks[0]["why"]
    assert r.stats.rounds_by_reason["warm-up"] == 1
    # drafting could not pay even if every token passed: the waits double without probes (each would only pay to
    # hear so again) until one reaches max_wait
    assert r.stats.rounds_by_reason.get("fallback", 0) > 80 and r.stats.rounds_by_reason.get("probe", 0) == 0


def test_a_confidence_floor_leaves_the_text_the_targets(tiny_pair):
    """--draft-p-min ends rounds early (at their first token too, which the policy then prices): greedy output is
    still the target's own, adaptive or fixed, with costs where drafting pays."""
    e = engine_with_costs(tiny_pair, lambda m: 1.0, 0.05)
    e.proposer.p_min = 0.6
    for prompt in ("Once upon a time", "The quick brown fox", "def f(x):"):
        plain = e.generate(prompt, max_tokens=60, speculative=False)
        for adaptive in (True, False):
            assert e.generate(prompt, max_tokens=60, adaptive=adaptive).tokens == plain.tokens, (prompt, adaptive)
    assert e.policy(e.proposer).floor_rate > 0  # (the floor did end rounds at their first token)
    e.close()


def test_no_fallback_when_speculation_pays(tiny_pair):
    # memory-bound: a verify of any size costs one step, a draft step 5% of one (not free: K is chosen up front)
    e = engine_with_costs(tiny_pair, lambda m: 1.0, 0.05)
    plain = e.generate("Once upon a time", max_tokens=100, speculative=False)
    r = e.generate("Once upon a time", max_tokens=100)
    e.close()
    assert r.tokens == plain.tokens
    assert not r.stats.fallbacks and set(r.stats.rounds_by_reason) <= {"first", "warm-up", "cost", "explore"}
    assert r.stats.rounds_by_reason["warm-up"] == 3
    assert max(rec.n_drafted for rec in r.stats.rounds) >= 4


def test_hybrid_keeps_looking_up_while_its_draft_model_falls_back(tiny_pair):
    # compute-bound: a verify row costs half a step, a draft step half a step (the draft model cannot pay), while a
    # lookup costs nothing: each part follows its own costs, so lookup goes on proposing where the draft is off.
    from edgespec.backend import Context, Model
    from edgespec.proposers import DraftModelProposer, HybridProposer, PromptLookupProposer

    t, d = Model(tiny_pair[0]), Model(tiny_pair[1])
    lookup, draft = PromptLookupProposer(), DraftModelProposer(Context(d, 1024), t.n_vocab)
    verify = {m: 1.0 + 0.5 * (m - 1) for m in range(1, 18)}
    lookup_cost, draft_cost = FixedCosts(verify_s=verify, draft_s=0.0), FixedCosts(verify_s=verify, draft_s=0.5)
    e = edgespec.Engine(Context(t, 1024), HybridProposer(draft, lookup), 8, True, lookup_cost)
    e.policy(draft).cost = draft_cost
    reasons, drafted, fallback_rounds = {}, {}, 0
    for prompt in REPEATING:
        plain = e.generate(prompt, max_tokens=60, speculative=False)
        r = e.generate(prompt, max_tokens=60)
        fallback_rounds += r.stats.fallback_rounds
        assert_identical_or_near_tie(e.model, e.tokenize(prompt), plain.tokens, r.tokens, 8)
        for src, n in r.stats.drafted_by_source.items():
            drafted[src] = drafted.get(src, 0) + n
        for why, n in r.stats.rounds_by_reason.items():
            reasons[why] = reasons.get(why, 0) + n
    e.close()
    assert reasons.get("free+fallback", 0) > 50  # lookup asked every round, the draft model off
    assert fallback_rounds >= reasons["free+fallback"]  # the chain's plain rounds count in what the CLI reports
    assert drafted.get("lookup", 0) > 20 and drafted.get("lookup", 0) > drafted.get("draft", 0)


def test_sampled_first_two_tokens_follow_the_target_with_the_adaptive_chain(tiny_pair):
    # The hybrid with lengths chosen per round (lookup free and cut by keep(), the draft model filling or drafting
    # alone): every choice depends only on earlier rounds and the proposal's kind, so sampling stays exact.
    from edgespec.backend import Context, Model
    from edgespec.proposers import DraftModelProposer, HybridProposer, PromptLookupProposer

    t, d = Model(tiny_pair[0]), Model(tiny_pair[1])
    lookup, draft = PromptLookupProposer(), DraftModelProposer(Context(d, 1024), t.n_vocab)
    verify = {m: 1.0 + 0.05 * (m - 1) for m in range(1, 18)}
    e = edgespec.Engine(Context(t, 1024), HybridProposer(draft, lookup), 4, True,
                        FixedCosts(verify_s=verify, draft_s=0.0))
    e.policy(draft).cost = FixedCosts(verify_s=verify, draft_s=0.05)
    reasons = set()
    counts, expected = first_two_counts(e, e.tokenize("abc abc abc abc ab"), TOP5, 3000, max_tokens=6,
                                        each=lambda r: reasons.update(r.stats.rounds_by_reason))
    e.close()
    assert any(why.startswith("free+") for why in reasons)  # lookup free, the draft model by its own costs
    assert_follows(counts, expected)


def test_the_draft_models_confidence_ends_rounds_and_greedy_output_stays_the_targets(tiny_pair):
    # verify rows at 0.4 of a step each, a draft step 0.02: a round goes on only while the draft is sure enough
    e = engine_with_costs(tiny_pair, lambda m: 1.0 + 0.4 * (m - 1), 0.02)
    lengths = []
    for prompt in PROMPTS:
        tokens = e.tokenize(prompt)
        plain = e.generate(tokens, max_tokens=48, speculative=False)
        spec = e.generate(tokens, max_tokens=48)
        assert_identical_or_near_tie(e.model, tokens, plain.tokens, spec.tokens, 8)
        lengths += [x.n_drafted for x in spec.stats.rounds if x.reason == "cost"]
    calibration = e.policy(e.proposer).calibration
    e.close()
    assert len(set(lengths)) >= 3 and max(lengths) > 4  # lengths set round by round, past the average's best K
    assert sum(calibration.tested) > 20  # ... by confidences it learned to read


def test_a_probe_drafts_as_far_as_the_draft_models_confidence_pays(tiny_pair):
    # A probe is the verdict on drafting for a text: at the average's best K alone (here 1: acceptance 0.5 by
    # position, rows at 0.25 of a step) it tried one token a round, a thin verdict where the draft model is sure of
    # long runs (on the replay, one-token probes on a code prompt ended in a fallback for the rest of the text). It
    # drafts as a round by cost does, but at least one token (a probe that drafts nothing has tested nothing).
    class Average(FixedCosts):
        def acceptances(self, n):
            return [0.5] * n

    e = engine_with_costs(tiny_pair, lambda m: 1.0 + 0.25 * (m - 1), 0.1)
    policy = e.policy(e.proposer)
    policy.cost = Average(verify_s=policy.cost.verify_s, draft_s=0.1, n_observed=100)
    assert policy.cost.best_k(8)[0] == 1
    lengths = []
    for prompt in PROMPTS:
        tokens = e.tokenize(prompt)
        policy._probe, policy._probe_left = "pending", policy.probe_rounds
        spec = e.generate(tokens, max_tokens=32)
        plain = e.generate(tokens, max_tokens=32, speculative=False)
        assert_identical_or_near_tie(e.model, tokens, plain.tokens, spec.tokens, 8)
        lengths += [x.n_drafted for x in spec.stats.rounds if x.reason == "probe"]
    e.close()
    assert min(lengths) >= 1 and max(lengths) > 1, lengths


def test_sampled_first_three_tokens_follow_the_target_where_confidence_ends_rounds(tiny_pair):
    # The first round is a plain step; the second drafts up to 2 tokens, cut where the draft's own distribution
    # (never the target's) says the next is not worth its row: the first three tokens against the exact joint.
    e = engine_with_costs(tiny_pair, lambda m: 1.0 + 0.4 * (m - 1), 0.02)
    seen = []
    counts, expected = first_two_counts(e, e.tokenize("x = 1\ny = 2\nx ="), TOP5, 4000, n=3, max_tokens=4,
                                        each=lambda r: seen.append((r.stats.rounds[1].reason,
                                                                    r.stats.rounds[1].n_drafted)))
    e.close()
    cut = {n for why, n in seen if why == "cost"}
    assert {0, 2} <= cut or {1, 2} <= cut, cut  # rounds cut short and rounds drafted whole
    assert_follows(counts, expected)


def test_sampled_first_three_tokens_follow_the_target_where_the_draft_model_reads_the_prompt_late(tiny_pair,
                                                                                                   monkeypatch):
    # Reading (reading.py): a prompt judged not worth reading is read once the text has run on (read_late), here
    # once it has made a token past the first: the draft model then reads the prompt and the tokens so far in one
    # go and drafts from its own distribution there. The first three tokens against the exact joint. (Each
    # generation starts the draft's cache empty, so each reads the whole prompt late.)
    e = engine_with_costs(tiny_pair, lambda m: 1.0 + 0.05 * (m - 1), 0.02)
    policy, draft = e.policy(e.proposer), e.proposer

    def not_worth_it(n, horizon, adaptive=None, alone=False):
        policy._skip, policy._saved = "a prompt not worth reading", 1.0
        return False

    def ran_on(n, made, cap):
        read = policy._skip is not None and made >= 1
        if read:
            policy._skip = None
        return read

    monkeypatch.setattr(policy, "reading_pays", not_worth_it)
    monkeypatch.setattr(policy, "read_late", ran_on)
    prompt, seen = e.tokenize("x = 1\ny = 2\nx ="), []

    def each(r):
        assert [x.reason for x in r.stats.rounds[:2]] == ["first", "fallback"]  # tokens 1 and 2: unread
        assert f"read the {len(prompt) + 1} it had skipped" in r.stats.fallbacks[-1]["why"]
        seen.append(r.stats.rounds[2].n_drafted)
        draft.ctx.clear()

    counts, expected = first_two_counts(e, prompt, TOP5, 3000, n=3, max_tokens=4, each=each)
    e.close()
    assert sum(n > 0 for n in seen) > 2000  # the draft model, reading late, drafted the third token
    assert_follows(counts, expected)


def test_catching_up_is_not_counted_as_the_cost_of_drafting(tiny_pair):
    # After plain rounds (a fallback, lookup drafting alone) the draft model first reads the text it skipped: the
    # price of having stood aside, kept out of what its policy learns a drafted length costs.
    from edgespec.backend import Context, Model
    from edgespec.proposers import DraftModelProposer

    t, d = Model(tiny_pair[0]), Model(tiny_pair[1])
    draft = DraftModelProposer(Context(d, 1024), t.n_vocab)
    seq = t.tokenize("the cat sat on the mat and the dog sat on the log")
    assert len(seq) > 9
    prop = draft.propose(seq, 3, edgespec.GREEDY, np.random.default_rng(0))
    assert draft.catch_up_s > 0 and draft.read_s > 0  # read the whole text first, and timed it per token
    nxt = [*seq, *prop.tokens[:2], 7]
    assert draft.behind(nxt) == 0 and draft.behind([*nxt, 8, 9]) == 2
    draft.propose(nxt, 3, edgespec.GREEDY, np.random.default_rng(0))
    assert draft.catch_up_s == 0.0  # only the round's own tokens: part of drafting
    draft.close()
    t.close()


def test_a_draft_model_reads_what_it_missed_and_the_last_token_in_one_decode(tiny_pair):
    # Before its first drafted token the draft needs the logits after seq[-1]. What it has not read yet (the last
    # round's final draft, after a round whose drafts all passed; all it skipped while it stood aside) goes into
    # that same decode: one batch of n rows costs less than n decodes of one (here a 2-token decode cost 1.55x a
    # 1-token one: bench/results/replay-memory.json's draft costs).
    from edgespec.backend import Context, Model
    from edgespec.proposers import DraftModelProposer

    t, d = Model(tiny_pair[0]), Model(tiny_pair[1])
    ctx = Context(d, 1024)
    draft = DraftModelProposer(ctx, t.n_vocab)
    decodes = []
    real = ctx.decode

    def counted(tokens, rows=()):
        decodes.append((len(tokens), list(rows)))
        return real(tokens, rows)

    ctx.decode = counted
    seq = t.tokenize("the cat sat on the mat and the dog sat on the log")
    prop = draft.propose(seq, 3, edgespec.GREEDY, np.random.default_rng(0))
    assert decodes[0] == (len(seq), [len(seq) - 1])  # the whole text at once, the last row's logits
    assert all(n == 1 for n, _ in decodes[1:]) and len(decodes) == len(prop.tokens)  # then a step per draft
    decodes.clear()
    nxt = [*seq, *prop.tokens, 7]  # every draft passed, then the target's token
    assert draft.behind(nxt) == 1
    again = draft.propose(nxt, 3, edgespec.GREEDY, np.random.default_rng(0))
    assert decodes[0] == (2, [1]) and draft.catch_up_s == 0.0  # the last draft and the new token together
    # the drafted tokens are those a fresh reading of the same text gives
    ref = Context(d, 1024)
    logits = ref.decode(nxt, [len(nxt) - 1])[0]
    expect = []
    for _ in range(len(again.tokens)):
        expect.append(int(np.argmax(logits)))
        logits = ref.decode([expect[-1]], [0])[0]
    assert again.tokens == expect
    ref.close()
    draft.close()
    t.close()


def test_a_draft_model_times_its_steps_and_the_step_whose_token_it_did_not_keep(tiny_pair):
    # A round that ends because the next token is not worth its row has paid for the decode that said so: timed
    # apart (refused_s) so the round's T_d(n) stays the cost of drafting n, and the chain counts it in what the round
    # was expected to cost. A step is timed alone (step_s) for the confidence stop's price of drafting one more.
    from edgespec.backend import Context, Model
    from edgespec.proposers import DraftModelProposer

    class Stop:  # keeps tokens 0 and 1, refuses token 2; always asks for one more
        def keep(self, i, p):
            return i < 2

        def further(self, i, drafted=()):
            return True

        def agrees(self, token):  # (no hand-off to check)
            return False

    class Enough(Stop):  # keeps all, asks for none after token 1
        def keep(self, i, p):
            return True

        def further(self, i, drafted=()):
            return i < 1

    t, d = Model(tiny_pair[0]), Model(tiny_pair[1])
    draft = DraftModelProposer(Context(d, 1024), t.n_vocab)
    seq = t.tokenize("the cat sat on the mat")
    assert draft.step_s is None
    prop = draft.propose(seq, 6, edgespec.GREEDY, np.random.default_rng(0), stop=Stop())
    assert len(prop.tokens) == 2 and draft.refused_s > 0 and draft.step_s > 0
    prop = draft.propose(seq, 6, edgespec.GREEDY, np.random.default_rng(0), stop=Enough())
    assert len(prop.tokens) == 2 and draft.refused_s == 0.0  # ended by its own choice: no step wasted
    draft.close()
    t.close()


def test_the_first_round_after_a_prompt_is_kept_out_of_the_verify_curve(tiny_pair, monkeypatch):
    # The first decode after a prompt finishes the prompt's work (over RPC it measured 366-541 ms against 40 for a
    # step): timed into T_v(1), it made a plain step look dear and drafting look worth it where it was not.
    e = edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=512)
    e.calibrate()  # the curve timed first, so that only the rounds feed it below
    seen = []
    real = e._cost.observe_verify
    monkeypatch.setattr(e._cost, "observe_verify", lambda m, s: (seen.append(m), real(m, s)))
    r = e.generate(e.tokenize("Once upon a time"), max_tokens=16)
    e.close()
    assert r.stats.rounds_by_reason.get("first") == 1
    assert len(seen) == r.stats.n_rounds - 1


def test_prompt_lookup_knows_its_models_control_tokens(lookup_engine, hybrid_engine):
    # (what it does with them: test_prompt_lookup.py; on a real chat template: test_real_models.py)
    im_start = lookup_engine.model.tokenize("<|im_start|>", add_special=False)[0]
    for lookup in (lookup_engine.proposer, hybrid_engine.proposer.lookup):
        assert im_start in lookup.control and lookup.control == lookup_engine.model.control_ids


def tail_engine(tiny_pair, lookup=None, step: float = 0.05):
    """The adaptive hybrid on a memory-bound target (a verify row costs 2% of a step, a draft step `step`, 5%): the
    draft model drafts behind lookup, and lookup continues what the draft's tokens began."""
    from edgespec.backend import Context, Model
    from edgespec.proposers import DraftModelProposer, HybridProposer, PromptLookupProposer

    t, d = Model(tiny_pair[0]), Model(tiny_pair[1])
    lookup, draft = lookup or PromptLookupProposer(), DraftModelProposer(Context(d, 1024), t.n_vocab)
    verify = {m: 1.0 + 0.02 * (m - 1) for m in range(1, 18)}
    e = edgespec.Engine(Context(t, 1024), HybridProposer(draft, lookup), 8, True,
                        FixedCosts(verify_s=verify, draft_s=0.0))
    e.policy(draft).cost = FixedCosts(verify_s=verify, draft_s=step)
    return e


class Quotes(PromptLookupProposer):
    """Lookup with no match of its own (the draft model goes first) that continues any draft with one fixed guess,
    the target's likeliest third token after the sampled tests' prompt, from a match of n tokens (repeated: a copy
    that runs on, as a hand-off asks of one)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def propose(self, seq, k, sampling, rng, guide=None):
        self._extend(seq)
        return Proposal([], None, [], key="lookup:0")

    def match_after(self, seq, extra, k):
        return [89] * k, f"lookup:{self.n}"


def identical_to_plain(e, prompts) -> None:
    """Each prompt generated greedily (48 tokens) with the engine's speculation and without: the same text, or a
    near-tie proven."""
    for prompt in prompts:
        tokens = e.tokenize(prompt)
        plain = e.generate(tokens, max_tokens=48, speculative=False)
        r = e.generate(tokens, max_tokens=48)
        assert_identical_or_near_tie(e.model, tokens, plain.tokens, r.tokens, 8)


def tail_rounds(stats) -> int:
    return sum(n for why, n in stats.rounds_by_reason.items() if "tail" in why.split("+"))


def test_greedy_identity_where_lookup_continues_the_draft_models_tokens(tiny_pair):
    e = tail_engine(tiny_pair)
    e.policy(e.proposer.draft).k_max = 3  # (room in a round of 8 for lookup's tokens after the draft's)
    tails = 0
    for prompt in PROMPTS + REPEATING:
        tokens = e.tokenize(prompt)
        plain = e.generate(tokens, max_tokens=48, speculative=False)
        r = e.generate(tokens, max_tokens=48)
        assert_identical_or_near_tie(e.model, tokens, plain.tokens, r.tokens, 8)
        tails += tail_rounds(r.stats)
    e.close()
    assert tails >= 10, tails


def test_sampled_first_three_tokens_follow_the_target_where_lookup_continues_the_draft(tiny_pair):
    # A lookup token after a sampled draft token is a deterministic guess given the text before it (q one-hot), so
    # rejection sampling stays exact behind it. The first round is a plain step; in the second the draft model
    # drafts one token and lookup's continuation follows it (here a fixed guess, the target's likeliest third token,
    # about one time in five): the first three tokens against the exact joint.
    e = tail_engine(tiny_pair, Quotes(2))
    e.policy(e.proposer.draft).k_max = 1
    tails = []
    counts, expected = first_two_counts(e, e.tokenize("the cat the cat the"), TOP5, 4000, n=3, max_tokens=4,
                                        each=lambda r: tails.append(tail_rounds(r.stats)))
    e.close()
    assert sum(1 for n in tails if n) >= 2000
    assert_follows(counts, expected)


def counting_hand_offs(monkeypatch, step: float = 0.05) -> list:
    """Chain._hand_off's verdicts from here on (True: the draft model stopped and lookup took the round on), with a
    draft step priced as tail_engine's costs price it (as timed, the tiny model's step is a thousandth of those)."""
    from edgespec.chain import Chain
    from edgespec.proposers import DraftModelProposer

    monkeypatch.setattr(DraftModelProposer, "step_s", property(lambda self: step))
    verdicts, real = [], Chain._hand_off

    def counted(self, *args):
        decide = real(self, *args)
        return None if decide is None else lambda drafted: verdicts.append(decide(drafted)) or verdicts[-1]
    monkeypatch.setattr(Chain, "_hand_off", counted)
    return verdicts


def counting_checks(monkeypatch, always: bool) -> list:
    """ConfidenceStop.agrees's answers from here on (a hand-off checked by the draft model's next token: True where
    it was lookup's next one); always: every hand-off checked, whatever the costs say (Chain._checked)."""
    from edgespec.chain import Chain
    from edgespec.confidence import ConfidenceStop

    if always:
        monkeypatch.setattr(Chain, "_checked", staticmethod(lambda *costs: True))
    answers, real = [], ConfidenceStop.agrees

    def counted(self, token):
        checking = self.check is not None
        agreed = real(self, token)
        if checking:
            answers.append(agreed)
        return agreed
    monkeypatch.setattr(ConfidenceStop, "agrees", counted)
    return answers


@pytest.mark.parametrize("always_checked", [False, True], ids=["priced", "checked"])
def test_greedy_identity_where_the_draft_model_hands_its_round_on_to_lookup(tiny_pair, monkeypatch, always_checked):
    # On repeating text lookup continues what the draft model's first tokens began (matches of 3 tokens or more),
    # and a copied token costs a verify row where a drafted one costs a row and a draft step: the draft model stops
    # and lookup's tail fills the round; checked, it drafts one token more first and hands on only where that token
    # is lookup's next (else it drafts on). The text is the target's all the same.
    verdicts, checks = counting_hand_offs(monkeypatch), counting_checks(monkeypatch, always_checked)
    e = tail_engine(tiny_pair)
    identical_to_plain(e, REPEATING + PROMPTS)
    e.close()
    assert sum(verdicts) >= 5 and not all(verdicts), (sum(verdicts), len(verdicts))
    if always_checked:  # both ways taken: handed on after the check, and drafting on past a disagreement
        assert sum(checks) >= 3 and not all(checks), (sum(checks), len(checks))


@pytest.mark.parametrize("always_checked", [False, True], ids=["priced", "checked"])
def test_sampled_first_three_tokens_follow_the_target_where_the_draft_hands_its_round_on(tiny_pair, monkeypatch,
                                                                                          always_checked):
    # Where the draft model stops because lookup continues its first token (a match of 3: the hand-off), the round
    # is that token and lookup's deterministic guess after it: the first three tokens against the exact joint.
    # Checked, the draft model's sampled second token decides: lookup's guess after it where it is that guess, else
    # the draft model's own round.
    from edgespec.chain import Chain

    monkeypatch.setattr(Chain, "_handing_pays", lambda *args: True)  # (every hand-off the copy allows: exactness)
    verdicts, checks = counting_hand_offs(monkeypatch), counting_checks(monkeypatch, always_checked)
    e = tail_engine(tiny_pair, Quotes(3))
    e.policy(e.proposer.draft).k_max = 3 if always_checked else 2
    # (checked: room after the check's token for lookup's guess, without which the round is not handed on at all:
    # Chain._tail_takes)
    counts, expected = first_two_counts(e, e.tokenize("the cat the cat the"), TOP5, 4000, n=3,
                                        max_tokens=5 if always_checked else 4)
    e.close()
    assert sum(verdicts) >= 1000, sum(verdicts)
    if always_checked:
        assert sum(checks) >= 100 and len(checks) - sum(checks) >= 100, (sum(checks), len(checks))
    assert_follows(counts, expected)


class EndingQuotes(Quotes):
    """Quotes whose copy ends after its guess: the end of the copied turn (an end-of-generation token), as where an
    answer quotes a question up to its last word and then goes its own way."""

    def match_after(self, seq, extra, k):
        return [89, *self.ends][:k], f"lookup:{self.n}"


def hand_off_verdicts(tiny_pair, monkeypatch, copy, step: float) -> list[bool]:
    """The hand-off's setting (a match of 3 after the draft model's first token, lookup's guess the target's
    likeliest third token), a draft step priced at `step` (of a target step): Chain._hand_off's verdicts where the
    round had room for 2 tokens more, over 200 sampled answers."""
    from edgespec.chain import Chain
    from edgespec.proposers import DraftModelProposer

    monkeypatch.setattr(DraftModelProposer, "step_s", property(lambda self: step))  # (as counting_hand_offs)
    verdicts, real = [], Chain._hand_off

    def counted(self, seq, before, link):
        decide = real(self, seq, before, link)
        if decide is None:
            return None

        def hand_off(drafted):
            verdict = decide(drafted)
            if link.stop.most - len(drafted) >= 2:
                verdicts.append(verdict)
            return verdict
        return hand_off
    monkeypatch.setattr(Chain, "_hand_off", counted)
    e = tail_engine(tiny_pair, copy(3), step)
    e.proposer.lookup.ends = frozenset(e.model.eog_ids)
    e.policy(e.proposer.draft).k_max = 6  # (room in the round for more than the copy)
    prompt = e.tokenize("the cat the cat the")
    for seed in range(200):
        e.generate(prompt, sampling=edgespec.SamplingConfig(**TOP5, seed=seed), max_tokens=8)
    e.close()
    return verdicts


@pytest.mark.parametrize("copy", [Quotes, EndingQuotes])
def test_the_draft_model_hands_its_round_on_only_to_a_copy_that_runs_on(tiny_pair, monkeypatch, copy):
    # Where lookup's copy runs on the draft model hands its round on; where the copied turn ends right after the
    # guess, lookup cannot carry the round and the draft model drafts on (Chain._hand_off).
    verdicts = hand_off_verdicts(tiny_pair, monkeypatch, copy, DEAR_STEP)
    assert len(verdicts) >= 100, len(verdicts)
    assert sum(verdicts) >= 50 if copy is Quotes else not any(verdicts), (sum(verdicts), len(verdicts))


@pytest.mark.parametrize("step", [0.05, DEAR_STEP])
def test_a_round_is_handed_on_where_that_makes_it_cheaper_per_token(tiny_pair, monkeypatch, step):
    # The same copy, which runs on, and the same draft model: with a draft step at 5% of a target step, drafting on
    # yields the round more for its verify than lookup's guess does, and the draft model keeps its round; with a
    # step at half a target step the copied tokens are the cheaper way to fill it, and it hands on
    # (Chain._handing_pays: the round's least expected time per token either way, its verify counted). Measured:
    # 2 hand-offs of 954 verdicts at 0.05, 442 of 442 at 0.5 (251 of 642 at 0.2). Judged token against token, as
    # before, it handed on at 0.05 too (584 of 618: a copied token costs a row, a drafted one a row and a step).
    verdicts = hand_off_verdicts(tiny_pair, monkeypatch, Quotes, step)
    assert len(verdicts) >= 100, len(verdicts)
    if step == DEAR_STEP:
        assert sum(verdicts) >= 0.9 * len(verdicts), (sum(verdicts), len(verdicts))
    else:
        assert sum(verdicts) <= 0.05 * len(verdicts), (sum(verdicts), len(verdicts))


def lookup_alone(monkeypatch) -> list:
    """The chain's plan has prompt lookup go alone in every round by cost (all its tokens kept, the draft model
    drafting none), and every such round is checked by the draft model's first token (Chain._lead_check, whatever
    the costs say); returns each check's answer (ConfidenceStop.agrees: True where the two agreed)."""
    from edgespec import chain_handoff
    from edgespec.chain import Chain
    from edgespec.confidence import ConfidenceStop
    from edgespec.splits import Splits

    real_plan, answers, real_agrees, real_split = Splits.plan, [], ConfidenceStop.agrees, Chain._split
    checking = []

    def plan(self, k, lead, n_lead, least=0, **kw):
        return real_plan(self, k, lead, n_lead, least, **kw) if least or not n_lead else (min(n_lead, k), 0)

    def split(self, *args):
        out = real_split(self, *args)
        checking.append(self._check)  # (the check the round keeps: none where lookup's copy soon ends)
        return out

    def agrees(self, token):
        first = bool(checking) and checking[-1] is not None and self.check == checking[-1]
        agreed = real_agrees(self, token)
        if first:
            answers.append(agreed)
            checking[-1] = None  # (the check at the round's first token: a hand-off's later check is not this)
        return agreed
    monkeypatch.setattr(Splits, "plan", plan)
    monkeypatch.setattr(chain_handoff, "LEAD_CHECK_SHARE", 0.0)
    monkeypatch.setattr(Chain, "_split", split)
    monkeypatch.setattr(ConfidenceStop, "agrees", agrees)
    return answers


def test_greedy_identity_where_the_draft_model_checks_lookups_first_token(tiny_pair, monkeypatch):
    # Where lookup would go alone, the draft model drafts its first token first: where it is lookup's first, lookup's
    # continuation takes the round on; else the draft model drafts on. The text is the target's all the same.
    answers = lookup_alone(monkeypatch)
    e = tail_engine(tiny_pair)
    identical_to_plain(e, REPEATING + PROMPTS)
    e.close()
    assert sum(answers) >= 3 and len(answers) - sum(answers) >= 3, (sum(answers), len(answers))


class Leads(PromptLookupProposer):
    """Lookup that offers one fixed guess at every round, from a match of 3 tokens, and continues it with another
    (repeated: a copy that runs on): the target's likeliest second and third tokens after the sampled tests'
    prompt."""

    def propose(self, seq, k, sampling, rng, guide=None):
        self._extend(seq)
        tokens = [LEADS[0], *[LEADS[1]] * (k - 1)][:k]
        return Proposal(tokens, None, ["lookup"] * len(tokens), key="lookup:3")

    def match_after(self, seq, extra, k):
        return LEADS[1:1 + k], "lookup:3"


LEADS = (34, 89)


def test_sampled_first_three_tokens_follow_the_target_where_the_draft_model_checks_lookups_first(tiny_pair,
                                                                                                 monkeypatch):
    # The round after the first (a plain step) would be lookup's guess alone; the draft model draws its own first
    # token and, where that is lookup's guess, lookup's continuation follows it, else the draft model drafts on.
    # Lookup's tokens are deterministic given the text before them (q one-hot), the draft's carry its q, and what
    # the check compares is never the target's: the first three tokens against the exact joint.
    answers = lookup_alone(monkeypatch)
    e = tail_engine(tiny_pair, Leads())
    policy = e.policy(e.proposer.draft)
    policy.k_max, policy.cost.n_observed = 3, 100  # (past the warm-up: lookup alone would never end it)
    counts, expected = first_two_counts(e, e.tokenize("the cat the cat the"), TOP5, 4000, n=3, max_tokens=4)
    e.close()
    assert sum(answers) >= 100 and len(answers) - sum(answers) >= 100, (sum(answers), len(answers))
    assert_follows(counts, expected)


class EndingLeads(Leads):
    """Leads whose copy ends right after its guess: the copied turn's end (an end-of-generation token)."""

    def propose(self, seq, k, sampling, rng, guide=None):
        self._extend(seq)
        tokens = [LEADS[0], *self.ends][:k]
        return Proposal(tokens, None, ["lookup"] * len(tokens), key="lookup:3")


def identical_rounds_where_lookup_goes_alone(tiny_pair, monkeypatch, lookup) -> list[str]:
    """With this lookup, where the plan has lookup go alone (lookup_alone): the texts are plain decoding's; returns
    every round's reason."""
    lookup_alone(monkeypatch)
    e = tail_engine(tiny_pair, lookup)
    e.proposer.lookup.ends = frozenset(e.model.eog_ids)
    reasons = []
    real = e.generate

    def generate(*args, **kwargs):
        r = real(*args, **kwargs)
        reasons.extend(rec.reason for rec in r.stats.rounds)
        return r
    e.generate = generate
    identical_to_plain(e, REPEATING + PROMPTS)
    e.close()
    return reasons


def test_greedy_identity_where_lookups_copy_ends_and_the_draft_model_drafts(tiny_pair, monkeypatch):
    # Lookup would go alone with a copy that ends right after its guess: the round is the draft model's own,
    # unchecked. The text is the target's all the same.
    reasons = identical_rounds_where_lookup_goes_alone(tiny_pair, monkeypatch, EndingLeads())
    assert sum(why.startswith("dropped+") for why in reasons) >= 20, reasons


class CutLeads(Leads):
    """Leads whose copy, however long, ends where the copied turn does, cut before a closing that does not pass
    (PromptLookupProposer.turn_end: "cut")."""

    def turn_end(self, copy):
        return "cut"


@pytest.mark.parametrize("lead", [Leads, CutLeads])
def test_a_copy_cut_before_its_turns_closing_is_a_copy_that_ends(tiny_pair, monkeypatch, lead):
    # Lookup would go alone, with a copy long enough to carry the round. Where that copy ends with the copied turn,
    # cut before its closing, an agreed check would hand the round to a copy that stops there: the round is the
    # draft model's own, unchecked (ChainHandOff._runs_on), as where a copy ends with its end-of-generation token.
    # The text is the target's all the same.
    reasons = identical_rounds_where_lookup_goes_alone(tiny_pair, monkeypatch, lead())
    checked = sum(why.startswith("checked+") for why in reasons)
    dropped = sum(why.startswith("dropped+") for why in reasons)
    assert (not checked and dropped >= 20) if lead is CutLeads else checked >= 20, (checked, dropped)


def test_lookup_hears_the_text_each_round_leaves_the_last_included(tiny_pair):
    # What lookup learns of its copies' closings it learns from the text (Closings): the engine tells it the text
    # as each round's verification leaves it, the generation's last round included, after which nothing more is
    # proposed (so a closing that ended the answer is counted).
    from edgespec.proposers import PromptLookupProposer

    class Hears(PromptLookupProposer):
        def __init__(self):
            super().__init__()
            self.texts = []

        def heard(self, text, more=()):
            self.texts.append([*text, *more])
            super().heard(text, more)
    lookup = Hears()
    e = tail_engine(tiny_pair, lookup)
    for prompt in REPEATING:
        lookup.texts.clear()
        tokens = e.tokenize(prompt)
        r = e.generate(tokens, max_tokens=24)
        told = tokens + r.tokens  # (and after them the end-of-generation token, where the answer ended on one)
        assert lookup.texts and lookup.texts[-1][:len(told)] == told, prompt
        assert len(lookup.texts[-1]) - len(told) == (r.finish_reason == "stop"), (prompt, r.finish_reason)
        assert all(a == b[:len(a)] for a, b in zip(lookup.texts, lookup.texts[1:]))  # (each round's text grows)
    e.close()


@pytest.mark.parametrize("lead", ["ending", "cut"])
def test_sampled_first_three_tokens_follow_the_target_where_lookups_copy_ends_and_the_draft_model_drafts(
        tiny_pair, monkeypatch, lead):
    # As above, but lookup's copy ends right after its guess (or, "cut", however long, before its turn's closing:
    # CutLeads), so an agreed check would hand the round to a copy that cannot carry it: where the round has room
    # for more than that one token, it is the draft model's own, unchecked (Chain._split, ChainHandOff._runs_on);
    # the first three tokens against the exact joint all the same.
    lookup_alone(monkeypatch)
    e = tail_engine(tiny_pair, EndingLeads() if lead == "ending" else CutLeads())
    e.proposer.lookup.ends = frozenset(e.model.eog_ids)
    policy = e.policy(e.proposer.draft)
    policy.k_max, policy.cost.n_observed = 3, 100
    rounds = []  # (reason, the tokens the round could draft: the room left less the target's own token)

    def each(r):
        made = 0
        for rec in r.stats.rounds:
            rounds.append((rec.reason, 4 - made - 1))
            made += rec.n_emitted
    counts, expected = first_two_counts(e, e.tokenize("the cat the cat the"), TOP5, 4000, n=3, max_tokens=4,
                                        each=each)
    e.close()
    assert e.proposer.lookup.ends and sum(why.startswith("dropped+") for why, _ in rounds) >= 2000
    assert all(room == 1 for why, room in rounds if why.startswith("checked+"))  # (the copy's end past the round)
    assert_follows(counts, expected)


def test_a_calibration_that_refuses_every_token_learns_from_the_refused_tokens_and_drafts_again(tiny_pair):
    # Verify rows cheap, a draft step cheaper: drafting pays by the cost model, but the calibration starts out
    # saying no token passes at any confidence, so the draft's confidence refuses each round's first token. A
    # refused token is never verified; greedy, the target's token there is known after the round, and that is the
    # evidence that corrects the calibration. Without it only a token surer than the calibration's doubt was ever
    # tested: the first drafted round came after 371 refused ones, and 6% of rounds drafted (here: after 48, 88%).
    e = engine_with_costs(tiny_pair, lambda m: 1.0 + 0.25 * (m - 1), 0.02)
    policy = e.policy(e.proposer)
    policy.cost.n_observed = 100  # past the warm-up, whose rounds draft whole and would teach the calibration
    cal = policy.calibration
    cal.tested, cal.passed = [20.0] * cal.bins, [0.0] * cal.bins
    drafted = []
    for prompt in PROMPTS * 3:
        tokens = e.tokenize(prompt)
        r = e.generate(tokens, max_tokens=48)
        plain = e.generate(tokens, max_tokens=48, speculative=False)
        assert_identical_or_near_tie(e.model, tokens, plain.tokens, r.tokens, 8)  # lengths change, the text does not
        drafted += [x.n_drafted for x in r.stats.rounds if x.reason in ("cost", "explore")]
    e.close()
    assert drafted[:3] == [0, 0, 0]  # refused at first
    assert sum(n > 0 for n in drafted) > len(drafted) / 2, (len(drafted), sum(n > 0 for n in drafted))


def counting_handed_rounds(monkeypatch) -> list[int]:
    """From here on, for each round a draft model handed on to lookup (it stopped drafting for lookup's
    continuation, after a check that agreed where there was one), how many of lookup's tokens the round's tail
    kept."""
    from edgespec.chain import Chain
    from edgespec.confidence import ConfidenceStop

    kept, handed = [], [False]
    real_hand_off, real_tail, real_agrees = Chain._hand_off, Chain._tail, ConfidenceStop.agrees

    def hand_off(self, seq, before, link):
        decide = real_hand_off(self, seq, before, link)
        if decide is None:
            return None

        def verdict(drafted):
            handed[0] = decide(drafted) and ("checking" if link.stop.check is not None else True)
            return bool(handed[0])
        return verdict

    def agrees(self, token):
        agreed = real_agrees(self, token)
        if handed[0] == "checking":
            handed[0] = agreed
        return agreed

    def tail(self, *args):
        n = real_tail(self, *args)
        if handed[0] is True:
            kept.append(n)
        handed[0] = False
        return n
    monkeypatch.setattr(Chain, "_hand_off", hand_off)
    monkeypatch.setattr(Chain, "_tail", tail)
    monkeypatch.setattr(ConfidenceStop, "agrees", agrees)
    return kept


def test_a_round_handed_on_ends_with_lookups_continuation_on_the_recorded_texts(monkeypatch):
    # The built-in texts replayed (the 1.5B F16 target and the Q4_0 draft's predictions, their costs timed here;
    # bench/results): wherever the draft model stops for lookup's continuation, the round's tail keeps some of it
    # (Chain._tail_takes). Before, 22 of 68 rounds so handed on kept none, all after a check: the check's token took
    # a verify row, the continuation after it no longer paid for its rows, and the round ended where the draft
    # model had stopped for it.
    from pathlib import Path

    from edgespec import benchmark, workloads
    from edgespec.replay import Clock, Recording, virtual_time

    results = Path(__file__).parent.parent / "bench" / "results"
    rec = Recording.load(results / "replay-memory-q4_0-draft.json")
    rec.data = {**rec.data, "costs": {**Recording.load(results / "replay-memory-retimed-1207.json").data["costs"],
                                      "draft": rec.data["costs"]["draft"]}}
    kept = counting_handed_rounds(monkeypatch)
    clock = Clock(0.0, seed=1)
    target, draft = rec.curves()
    with virtual_time(clock):
        engine = rec.engine(clock, target, draft)
        strategies = benchmark.Strategies(engine)
        for item in workloads.select(rec.items(), None, None, 1):  # (the first of each category is tune's)
            strategies.generate("hybrid", item.tokens(engine), 64)
        engine.close(remember=False)
    assert len(kept) >= 40, len(kept)
    assert all(kept), (sum(1 for n in kept if not n), len(kept))
