"""Draft length from measured costs, and knowing when not to speculate.

Speculation pays only while T(K)/E[N_K] < T_v(1), the cost of a plain token (costs.py: the cost model). Each
proposer's DraftLength decides per round how many tokens to draft, or none (a fallback to plain decoding, probed
again later), and, for a free proposer and in a chain, how much of a proposal (splits.py) or of a verification tree
(tree_shapes.py) to verify; at a new text, whether its prompt is worth the draft model's reading (reading.py).
It is fed measurements and answers questions, so it is tested with made-up costs.
"""
from __future__ import annotations

from dataclasses import dataclass

from .confidence import Calibration, ConfidenceStop
from .costs import CostModel, Outcomes, seed_counts
from .reading import ANSWER_FLOOR, Reading
from .splits import Splits
from .tree_shapes import ALTERNATIVES, TreeShapes

__all__ = ["CostModel", "Decision", "DraftLength"]


@dataclass
class Decision:
    k: int
    reason: str  # "fixed", "warm-up", "cost", "explore", "fallback", "probe", "free"
    why: str = ""  # for a fallback: the numbers behind it


class DraftLength(TreeShapes, Splits, Reading):
    """Per round: how many tokens to draft. Fixed, or by the cost model with a fallback to plain decoding.

    A proposer whose proposals cost nothing worth counting (measured: under free_share of a plain step, as prompt
    lookup is) is asked for all it has; what it proposed is then cut by keep() to the length worth verifying, by the
    acceptance seen for proposals of that kind (the proposal's key, e.g. the length of a lookup's match). Declining
    a proposal is a plain round, so such a proposer never needs the fallback.
    """

    def __init__(self, k_max: int, adaptive: bool, cost: CostModel | None = None, fallback_rounds: int = 32,
                 margin: float = 0.92, probe_k: int = 4, explore_every: int = 8, free_share: float = 0.02) -> None:
        self.k_max, self.adaptive = k_max, adaptive
        self.cost = cost or CostModel()
        self.free_share = free_share
        self.by_key: dict[object, CostModel] = {}  # acceptance per kind of proposal; verify costs shared
        # a tree's later siblings: the chance the i-th passes where those before it failed (prior: a weak guess)
        self.alternatives = CostModel(prior_accept=0.3, verify_s=self.cost.verify_s)
        self.outcomes = Outcomes()  # drafted rounds as they turned out against expected (a correction, >= 1)
        self.calibration = Calibration()  # how often a drafted token passes, by the draft's confidence in it
        self._declined: dict[object, int] = {}
        self.fallback_rounds = fallback_rounds  # plain rounds before probing again, when drafting is far behind
        self.margin = margin  # speculate only if expected to cost under margin * a plain token
        self.clearly_behind = 1.1  # a profile expecting drafting this much slower than plain starts in a fallback
        self.probe_k = probe_k  # warm-up rounds draft this many, to learn acceptance past position 1
        self.max_wait = 512  # the longest fallback, after repeated failed probes
        self._plain_left = 0
        self._waited = 0  # the length of the last wait
        self._failed_probes = 0  # probes in a row after which drafting still did not pay
        self._probe = ""  # "pending": asked for, not yet drafted and tested; "done": its verdict is next
        self._planned = False  # the last decide() was for a round planned behind a free part (a chain)
        self.probe_rounds = 2  # drafted rounds a probe lasts: one round's acceptance is too thin a verdict
        self._probe_left = 0
        self._tested = 0  # drafted rounds of the current text whose tokens were tested
        self._after_probe = False  # in a chain: a probe has ended, and the plan's next verdict is its verdict
        self.futile_evidence = 24.0  # rounds over many texts before futile() may judge from their rate
        self.text_memory = 2.0  # at a new text, what earlier texts showed counts as at most this many rounds
        self.warm_up_rounds = 3
        self.explore_every = explore_every  # every n-th round drafts one more than the best K, to keep learning
        self._rounds = self.fallbacks = 0
        # A confidence floor (--draft-p-min) ends a round at its first token when the draft's top probability is
        # under it: a draft step for nothing, which the acceptance of the tokens drafted never shows. Its rate over
        # the rounds that drafted (fading) enters the expected cost per token (_floored_cost).
        self.floor_rate, self._floor_weight, self.floor_decay = 0.0, 0.0, 0.9
        self._floored_warm_ups = 0

    @property
    def step_s(self) -> float | None:
        """One draft step as the draft model timed it (DraftModelProposer.step_s): the cost model's, which prices
        drafting past the longest length it has timed with it."""
        return self.cost.step_s

    @step_s.setter
    def step_s(self, seconds: float | None) -> None:
        self.cost.step_s = seconds

    def new_text(self) -> None:
        """A new generation. Acceptance depends on the text: what earlier texts showed counts as at most text_memory
        rounds (a probe on code after a session of prose must be able to change the verdict), at the rate seen over
        many texts rather than the last one's (CostModel.restart). Costs belong to the machine and carry over, and
        so does a fallback's backoff. A text begun in a fallback is probed at once, while the draft model has just
        read its prompt (a probe later in the text first catches up on everything it skipped), unless no text could
        make drafting pay (hopeless()) or no probe could show it (futile()): then the wait goes on across texts, and
        the proposer stands aside (standing_aside: it does not even read the prompts). A probe put off to a new text
        (defer_probe) comes there on the same terms: where no probe could change the verdict it would only cost its
        rounds and, on a short answer, a prompt read that costs more than the text (SmolLM2 over a 2 ms link,
        replayed, once its draft rounds cost less: 0.97x on factual QA with such probes, 1.00x without). The wait
        it leaves (max_wait rounds) still ends in a probe, so the rates are tested again now and then."""
        # A kind of proposal (a lookup match of some length) starts each text halfway to the prior, as a proposer
        # nothing is known of: its rate over many texts is over texts that quoted their input and texts that did
        # not, and trusted at a new text it verified more copied runs there than paid (replayed, the Q4_K_M pair
        # from its first prompt: lookup 0.975x on factual QA, from 0.99x). The proposer's own a_0 starts from its
        # rate over many texts (CostModel.acceptances).
        self.cost.restart(self.text_memory)
        for c in self.by_key.values():
            c.restart(self.text_memory, from_texts=False)
        self._tested, self._skip = 0, None
        self._text_passed = self._text_expected = 0.0
        if self._plain_left > 0 and not self.hopeless() and not self.futile():
            self._plain_left = 1

    def hopeless(self) -> bool:
        """Drafting would not pay even if every drafted token passed (its measured costs against plain's, times what
        drafted rounds have taken against what was expected of them: Outcomes.time_factor): no
        text can change the verdict, so a fallback's wait goes on across texts. Otherwise a new text may suit the
        drafter where the last did not (code after prose): it is probed at once."""
        c, plain = self.cost, self.cost.t_verify(1)
        costs = [c.round_cost(k) for k in range(1, self.k_max + 1)]
        best = min((t / (k + 1) for k, t in enumerate(costs, 1) if t is not None), default=None)
        return bool(plain) and best is not None and best * self.outcomes.time_factor() >= self.margin * plain

    def futile(self) -> bool:
        """A probe at a new text could not change the verdict: drafting would not pay even if every drafted token
        passed (hopeless()), or even after a probe in which every token passed (probe_rounds rounds of k_max tokens
        on the rates seen over many texts, judged as decide() judges a probe). A probe tests a few tokens: where the
        draft passes nearly all of them already (a quantised copy of the target) and drafting would pay only if it
        passed all but a few in a thousand, no probe can tell such a text apart, and each costs its rounds and the
        prompt it reads (SmolLM2 over a 2 ms link, replayed: 3% on every text). Judged only once those rates rest on
        futile_evidence rounds: from a text or two they could shut out every later text that suits the draft,
        with no probe left to correct them. A wait still ends in a probe (decide()), its length doubling after
        each that failed, so the rates are tested again now and then."""
        if self.hopeless():
            return True
        c, plain = self.cost, self.cost.t_verify(1)
        if not plain or self.k_max <= 0 or c.t_draft(1) is None or \
                not c.base_reached or c.base_reached[0] < self.futile_evidence:
            return False
        trial = CostModel(c.alpha, c.decay, c.prior_accept, c.prior_weight, verify_s=c.verify_s,
                          draft_round_s=c.draft_round_s, draft_s=c.draft_s, step_s=c.step_s, reached=list(c.reached),
                          accepted=list(c.accepted), text_prior=c.text_prior)
        for _ in range(self.probe_rounds):
            trial.observe_acceptance(self.k_max, self.k_max)
        per_token = trial.best_k(self.k_max)[1]
        verdict = self.clearly_behind if self._planned else self.margin  # (as decide() falls back)
        return per_token is not None and per_token * self.outcomes.time_factor() >= verdict * plain

    def defer_probe(self) -> None:
        """The probe due now would first have its proposer read more than the probe is worth (a draft model that
        stood aside since the text began has all of it to read): plain decoding goes on, and the probe comes at the
        start of the next text where a probe could change the verdict (new_text), where the prompt is read anyway."""
        self._probe, self._plain_left, self._waited = "", self.max_wait, self.max_wait

    def decide(self, cap: int, k_max: int | None = None, adaptive: bool | None = None,
               planned: bool = False) -> Decision:
        """cap: the most tokens this round may draft (context room, max_tokens); k_max and adaptive: this call's
        own limits in place of the policy's (what the policy learned carries on either way). planned: the round is
        planned by expected gain afterwards (plan(): behind a free part, which weighs this part against the free
        part alone and against plain per round), so only a proposer clearly behind plain falls back; near
        break-even the plan chooses, round by round, without the fallback's waits and catch-ups."""
        self._planned = planned
        limit = self.k_max if k_max is None else k_max
        k_max = min(limit, cap)
        if k_max <= 0:
            return Decision(0, "fixed")
        if not (self.adaptive if adaptive is None else adaptive):
            return Decision(k_max, "fixed")
        if self._costs_nothing():
            return Decision(k_max, "free")
        if (why := self.skipping()) is not None:  # (its prompt was not worth reading: Reading)
            return Decision(0, "fallback", why)
        if self._plain_left > 0:
            self._plain_left -= 1
            if self._plain_left > 0:
                return Decision(0, "fallback")
            if self._waited < self.max_wait and self.hopeless():
                # No text can make drafting pay at these costs, so a probe (which mid-text first reads what the
                # proposer skipped) would only pay to hear so again: wait twice as long instead. Plain rounds keep
                # timing the target step, the cost that changes (a busier network), and re-open the verdict; a
                # wait of max_wait still ends in a probe, to re-time the rest now and then.
                self._failed_probes += 1
                self._plain_left = self._wait(self._behind_by())
                return Decision(0, "fallback", f"drafting could not pay even if every drafted token passed: plain "
                                               f"decoding for {self._plain_left} more rounds, without a probe")
            self._probe, self._probe_left = "pending", self.probe_rounds
        if self._probe == "pending":  # asked again until it is carried out (in a chain, another part may fill)
            return Decision(self.cost.best_k(k_max)[0], "probe")
        plain = self.cost.t_verify(1)
        k, per_token = self.cost.best_k(k_max)
        per_token = self._floored_cost(k, per_token)
        if not plain or per_token is None or self.cost.n_observed + self._floored_warm_ups < self.warm_up_rounds:
            # First rounds draft probe_k tokens whatever the model says: they measure the draft's cost and the
            # acceptance past position 1, which the estimates need before they can be trusted. Once one of them
            # has timed the draft, though, a draft that could not pay even if every token passed (hopeless()) has
            # nothing left to learn there: the rest would only cost their rounds (SmolLM2 F16 with its Q4_1 copy
            # on an AVX-512 host, where a draft step costs a target step: three warm-up rounds of 81-93 ms against
            # 13 ms steps, the first text at 0.69x). It waits as after a probe that said so.
            if self.cost.n_observed and self.hopeless():
                self._failed_probes = max(self._failed_probes, 1)
                self._plain_left = self._wait(self._behind_by())
                self.fallbacks += 1
                return Decision(0, "fallback", f"the warm-up timed the draft: drafting could not pay even if every "
                                               f"drafted token passed; plain decoding for {self._plain_left} rounds")
            if per_token is None and self._floored_warm_ups >= self.warm_up_rounds:
                # A confidence floor ended the warm-ups at their first tokens: nothing timed or tested, and more would
                # each be a draft step for nothing (the tiny pair, floor 0.95, replayed: 22 in the first text).
                self._plain_left, self.fallbacks = self._wait(self.margin), self.fallbacks + 1
                return Decision(0, "fallback", f"the confidence floor ended the warm-ups at their first tokens: "
                                               f"plain decoding for {self._plain_left} rounds, then a probe")
            return Decision(min(k_max, self.probe_k), "warm-up")
        ratio = per_token * self.outcomes.optimism() / plain
        if ratio >= self.margin and k_max < limit and self._probe != "done":
            # Near the end (max_tokens, the context) a short draft may not pay where a full one does: a plain round
            # this once, not a verdict on drafting.
            return Decision(0, "cost")
        probed, self._probe = self._probe == "done", ""
        if ratio >= (self.clearly_behind if planned else self.margin):
            # Near break-even the estimate may be wrong either way: probe again soon. Far behind: wait longer, and
            # twice as long after each probe that did not change the verdict.
            self._failed_probes = self._failed_probes + 1 if probed else 0
            self._plain_left = self._wait(ratio)
            self.fallbacks += 1
            why = (f"best K={k} expects {1000 * per_token:.1f} ms/token (acceptance "
                   f"{self.cost.acceptance(0):.2f} at position 1) vs {1000 * plain:.1f} ms/token plain; "
                   f"plain decoding for {self._plain_left} rounds, then a probe")
            if self.outcomes.optimism() > 1.01:
                why += f"; drafted rounds cost {self.outcomes.optimism():.2f}x per token what was expected"
            if self._failed_probes:
                why += f" ({self._failed_probes} in a row did not pay)"
            return Decision(0, "fallback", why)
        if planned:  # the plan's verdict on this round is the probe's (declined, drafted)
            self._after_probe = self._after_probe or probed
        else:
            self._failed_probes = 0
        self._rounds += 1
        if self.explore_every and self._rounds % self.explore_every == 0 and k < k_max:
            return Decision(k + 1, "explore")
        return Decision(k, "cost")

    def declined(self) -> str:
        """In a chain, behind a free part that offered nothing this round, the plan found this part's drafting not
        worth a plain round: the verdict a policy of its own reaches in decide(), so it is taken as one. Without
        that, its estimates got no evidence while the plan went on declining on them: a text where the draft model
        would pay was never tried after texts where it did not. On a text not tested yet this is a probe; otherwise
        a fallback (plain rounds, the free part's proposals still verified, then a probe), the wait doubling after
        each probe the plan still declined. Returns why, for the record ("" for a probe)."""
        if self._plain_left > 0 or self._probe:
            return ""
        if not self._tested:
            self._probe, self._probe_left = "pending", self.probe_rounds
            return ""
        self._failed_probes = self._failed_probes + 1 if self._after_probe else 0
        self._after_probe = False
        self._plain_left = self._wait(max(self._behind_by(), self.margin))
        self.fallbacks += 1
        why = (f"the plan found drafting not worth a plain round (acceptance {self.cost.acceptance(0):.2f} at "
               f"position 1): plain rounds for {self._plain_left}, then a probe")
        return why + (f" ({self._failed_probes} in a row did not pay)" if self._failed_probes else "")

    def drafting_planned(self) -> None:
        """In a chain, the plan chose to draft with this part: drafting pays here, a probe's verdict included."""
        self._after_probe, self._failed_probes = False, 0

    def confidence_stop(self, rows: int, reach: float = 1.0, active: bool = True,
                        least: int = 0) -> ConfidenceStop | None:
        """For a round this part drafts by cost after `rows` - 1 tokens of earlier parts (which all pass with chance
        `reach`): where its draft model stops, by its confidence in each token (confidence.ConfidenceStop), a token
        valued at what one costs when speculating (the best K's expected time per token, at most a plain step's).
        active=False: a learning round, whose length is fixed: only its confidences are noted; least: tokens drafted
        whatever the confidence (a probe's first, which must be tested). A draft step is priced as its proposer
        timed it (step_s), else from the round costs, whose lengths mix rounds that caught up on the last one's
        tokens and rounds that ended in a step whose token was not kept. None: not timed yet."""
        c = self.cost
        plain, (_, per_token), one = c.t_verify(1), c.best_k(max(1, self.k_max)), c.t_draft(1)
        if plain is None or per_token is None or one is None:
            return None
        two = c.t_draft(2)
        step = self.step_s if self.step_s is not None else two - one if two is not None and two > one else one
        return ConfidenceStop(self.calibration, c.t_verify, rows, min(plain, per_token * self.outcomes.optimism()),
                              step, c.acceptances(self.k_max + 1), reach, active, least)

    def _wait(self, ratio: float) -> int:
        wait = max(4, min(self.fallback_rounds, int(self.fallback_rounds * (ratio - self.margin) / 0.3)))
        self._waited = min(self.max_wait, wait * 2 ** self._failed_probes)
        return self._waited

    def floored(self, hit: bool, warm_up: bool = False) -> None:
        """A round that drafted under a confidence floor: whether its first token fell under it (hit). A warm-up
        or probe round so ended counts as one all the same: it learned what the floor leaves (else, drafting
        nothing, it never ended: on the tiny pair with a floor of 0.9, replayed, 10 warm-up rounds a text, and
        after a fallback a probe every round, each a draft step for nothing)."""
        w = self.floor_decay * self._floor_weight
        self.floor_rate = (w * self.floor_rate + hit) / (w + 1)
        self._floor_weight = w + 1
        self._floored_warm_ups += hit and warm_up
        if hit and self._probe == "pending":  # (a probe so ended is one too: its verdict is the floor's)
            self._probe_left -= 1
            if self._probe_left <= 0:
                self._probe = "done"

    def _floored_cost(self, k: int, per_token: float | None) -> float | None:
        """The expected cost per token of rounds of k with the floor's rate of rounds that end at their first
        token, each a plain step and a draft step for one token."""
        f, c = self.floor_rate, self.cost
        if not f or per_token is None:
            return per_token
        whole, n, plain = c.round_cost(k), c.expected_tokens(k), c.t_verify(1)
        step = self.step_s if self.step_s is not None else c.t_draft(1)
        if None in (whole, plain, step):
            return per_token
        return ((1 - f) * whole + f * (plain + step)) / ((1 - f) * n + f)

    def _behind_by(self) -> float:
        """The best K's expected cost per token over a plain token's (for the length of a wait)."""
        k, per_token = self.cost.best_k(max(self.k_max, 1))
        per_token, plain = self._floored_cost(k, per_token), self.cost.t_verify(1)
        return per_token * self.outcomes.optimism() / plain if per_token and plain else self.clearly_behind

    def standing_aside(self, adaptive: bool | None = None) -> bool:
        """In a fallback that goes on past the next round: the proposer has nothing to do, not even read a prompt."""
        return (self.adaptive if adaptive is None else adaptive) and (self._plain_left > 1 or self._skip is not None)

    @property
    def free(self) -> bool:
        """Proposing costs under free_share of a plain target step (measured): ask for all, keep what pays."""
        return self.adaptive and self._costs_nothing()

    def _costs_nothing(self) -> bool:
        plain, per = self.cost.t_verify(1), self.cost.draft_s
        return plain is not None and per is not None and per < self.free_share * plain

    def seed(self, measured: dict, weight: float = 8.0) -> None:
        """Start from what an earlier run measured for this proposer (profile.py, from `edgespec tune`): its draft
        round costs and step, its prompt reading rate and the answers' mean length (Reading), its acceptance by
        position worth at most `weight` rounds, so the text at hand soon outweighs it, and its calibration (what its
        confidence is worth) worth at most 4 x weight tokens. The
        warm-up rounds are skipped: they would measure what is known. Where those figures say drafting clearly does
        not pay, the policy starts in a fallback, as after a probe that said so."""
        c = self.cost
        for n, s in sorted(measured["draft_round_s"].items()):
            c.observe_draft(n, s)
        self.step_s = measured.get("step_s", self.step_s)
        self.prompt_read_s = measured.get("read_s", self.prompt_read_s)
        self.answer_tokens = measured.get("answer_tokens", self.answer_tokens)
        if "calibration" in measured:
            self.calibration.seed(measured["calibration"], 4 * weight)
        for key, counts in measured.get("by_key", {}).items():  # e.g. a lookup's acceptance per match length
            seed_counts(self.alternatives if key == ALTERNATIVES else self.keyed(key), counts, weight)
        if seed_counts(c, measured, weight):
            c.n_observed = max(c.n_observed, self.warm_up_rounds)
            plain = c.t_verify(1)
            per_token = c.best_k(self.k_max)[1] if self.k_max > 0 and not self._costs_nothing() else None
            if self.adaptive and plain and per_token is not None and per_token / plain >= self.clearly_behind:
                # What was measured before says drafting clearly does not pay here (near break-even a new text may
                # differ: that is decided by the text's own rounds): start as after a probe that said so, so a new
                # process does no draft work (not even reading its prompt) before the wait is over.
                self._failed_probes = 1
                self._plain_left = self._wait(per_token / plain)

    def learned(self) -> dict:
        """What this policy measured, as a profile entry (profile.py): draft round costs, acceptance by position,
        and acceptance by kind of proposal (a lookup's match length), a tree's alternatives among them; for a draft
        model that timed them, its step, its prompt reading rate and its calibration; the answers' mean length."""
        c = self.cost
        kinds = {**{str(k): m for k, m in self.by_key.items()}, ALTERNATIVES: self.alternatives}
        out = {"draft_round_s": {n: t for n, t in c.draft_round_s.items() if t > 0},
               "reached": list(c.reached), "accepted": list(c.accepted),
               "by_key": {k: {"reached": list(m.reached), "accepted": list(m.accepted)}
                          for k, m in kinds.items() if m.reached and m.reached[0] > 0}}
        if self.step_s is not None and self.step_s > 0:
            out["step_s"] = self.step_s
        if self.prompt_read_s:  # (with the answers' mean length, which reading a prompt is weighed over)
            out["read_s"] = self.prompt_read_s
            if self.answer_tokens != ANSWER_FLOOR:
                out["answer_tokens"] = self.answer_tokens
        if sum(self.calibration.tested) > 0:
            out["calibration"] = {"tested": list(self.calibration.tested), "passed": list(self.calibration.passed)}
        return out

    def keyed(self, key: object) -> CostModel:
        """The acceptance estimates for proposals of this kind (None: all of them together)."""
        if key is None:
            return self.cost
        if key not in self.by_key:
            c = self.cost
            self.by_key[key] = CostModel(c.alpha, c.decay, c.prior_accept, c.prior_weight, verify_s=c.verify_s)
        return self.by_key[key]

    def observe(self, n_drafted: int, n_accepted: int | None, draft_s: float, key: object = None) -> None:
        """This policy's proposer drafted n_drafted tokens in draft_s seconds and n_accepted of them passed (None:
        the target rejected an earlier proposer's token first, so these were never tested)."""
        if n_drafted:
            self.cost.observe_draft(n_drafted, draft_s)
            if n_accepted is not None:
                self._tested += 1
                if self._probe == "pending":
                    self._probe_left -= 1
                    if self._probe_left <= 0:
                        self._probe = "done"
                if key is not None and self.free:
                    self.text_heard(key, n_accepted > 0)
                self.cost.observe_acceptance(n_drafted, n_accepted)
                if key is not None:
                    self.keyed(key).observe_acceptance(n_drafted, n_accepted)
