"""A draft-length policy's choices of how much of what is offered to verify: of a free proposer's tokens (keep), of
free tokens offered after a round's own (keep_after: lookup continuing a draft model's quotation), and a chain's
split between a free lead and a part that drafts at a cost (plan). Each by the least expected time per token (a
round's over what may follow its tokens, least_per_token, is shared with the hand-off in chain_handoff.py). A mixin
of tuning.DraftLength, whose cost model, acceptance by kind (keyed), outcomes and margin it reads."""
from __future__ import annotations

from .costs import CATCH_UP_HORIZON, CostModel

TEXT_WEIGHT = 4.0  # proposals' worth of "as expected" that a text's own first-token outcomes start from (text_factor)


def least_per_token(verify, rows: int, seconds: float, tokens: float, reach: float, rates, each: float = 0.0
                    ) -> tuple[int, float]:
    """A round of `rows` rows so far (expected to take `seconds` and yield `tokens`, all of them passing with chance
    `reach`) going on with e tokens that pass at `rates` (each once all before it pass), each a verify row (verify:
    T_v(m)) and `each` seconds more: the e >= 1 with the least expected time per token, and that time ((0, inf):
    none)."""
    best, least, first, gained = 0, float("inf"), verify(rows + 1), 0.0
    for e, a in enumerate(rates, 1):
        reach *= a
        gained += reach
        more = verify(rows + e + 1)
        if more is None:
            break
        cost = (seconds - first + more + e * each) / (tokens + gained)
        if cost < least:
            best, least = e, cost
    return best, least


class Splits:
    _text_passed = 0.0  # this text's proposals of a free proposer, every kind together: first tokens that passed
    _text_expected = 0.0  # ... and that their kinds' rates expected to pass

    def keep(self, n: int, key: object = None, recheck_every: int = 16) -> int:
        """How many of n proposed tokens to verify (a "free" round): the k <= n with the least expected verify time
        per token, k = 0 being a plain step, at this kind's rates with its first scaled down by what this text has
        shown (text_factor). A kind of proposal judged not worth verifying is still verified one token deep every
        recheck_every-th time (0: never; a chain learns from what was declined without verifying it), so its
        estimate can recover when the text changes."""
        c = self.keyed(key)
        best, best_cost = 0, c.t_verify(1)
        if best_cost is None:
            return n
        for k, expected in enumerate(c.expected(n, self.text_factor())[1:], 1):
            cost = c.t_verify(k + 1) / expected
            if cost < best_cost:
                best, best_cost = k, cost
        if best == 0 and n and recheck_every:
            self._declined[key] = self._declined.get(key, 0) + 1
            if self._declined[key] % recheck_every == 0:
                return 1
        return best

    def text_heard(self, key: object, passed: bool) -> None:
        """A free proposer's proposal of this kind was tested (or would have been: Chain.accepted) and its first
        token passed or not: this text's tally, against the chance its kind's rate gave it."""
        self._text_expected += self.keyed(key).acceptance(0)
        self._text_passed += passed

    def text_factor(self) -> float:
        """What this text's proposals have shown against their kinds' rates, as a factor on a_0, at most 1: (passed +
        TEXT_WEIGHT) / (expected + TEXT_WEIGHT). A kind's rate is over texts that quote their input and texts that
        do not; a text where lookup's matches keep failing (a translation repeats the source's names, not its
        phrases) fails them across kinds, each of which learns alone and late. Replayed (bench/replay_same.sh,
        16 replays; docs/performance.md, 2026-12-06): lookup's lowest category rose or held in all 16 (recorded
        costs: translation 0.965x to 0.976x of plain), overall within -0.4% to +1.0%. Scaled up as well where a
        text's proposals passed more than expected (a weight of 2), SmolLM2 over a link lost (lookup 0.997x to
        0.983x). The plan of a chain's round weighs the lead's tokens with it too (plan's `first`)."""
        return min(1.0, (self._text_passed + TEXT_WEIGHT) / (self._text_expected + TEXT_WEIGHT))

    def keep_after(self, n: int, key: object, rows: int, seconds: float, tokens: float, reach: float) -> int:
        """keep() for n free tokens proposed after a round's `rows` (expected to take `seconds` and yield `tokens`,
        all of them passing with chance `reach`): the e <= n that gives the least expected time per token, each
        token a verify row more, passing as this kind of proposal does once all before it pass; 0: none."""
        best, cost = least_per_token(self.cost.t_verify, rows, seconds, tokens, reach, self.keyed(key).acceptances(n))
        return best if cost < seconds / tokens else 0

    def plan(self, k: int, lead: CostModel, n_lead: int, least: int = 0, behind: int = 0,
             read_s: float = 0.0, horizon: int = CATCH_UP_HORIZON, first: float = 1.0) -> tuple[int, int]:
        """In a chain, behind a free part that offered n_lead tokens (its acceptance for proposals of that kind:
        `lead`): keep j of them and draft f of this part's own after them, j + f <= k and f >= least, for the least
        expected time per token. The round costs T_v(j+f+1) + T_d(f) and yields E_lead[j] + P(all j pass) *
        (E_own[f] - 1): f = 0 is the lead alone, j = 0 this part alone, both 0 a plain round. So the chain is never
        expected to do worse than the better of its parts, or than not speculating. Ties go to fewer rows.

        When this part drafts it first reads what it has not seen (`behind` tokens and the j kept, read_s seconds
        each). That is paid once, and then this part drafts from where the text is: it is spread over the next
        `horizon` tokens (CATCH_UP_HORIZON, or what the text has left), not charged to this round's few. Charged to
        the round, a lead whose tokens passed made the next round's reading look dearer than any draft could repay,
        the plan declined, the draft fell further behind, and a text the draft model suited went plain (held-out
        replay, memory-bound: the hybrid 1.538x against the draft model's 1.550x; spread, 1.555x).

        This part drafts (outside learning rounds) only where that is expected to cost under `margin` times the best
        split without it, as a proposer alone must beat plain by the margin: estimates are noisy, and the least of
        several noisy estimates is an optimistic one, so near a tie the round without draft work is the safer; and
        where this part's drafted rounds have cost more per token than expected (outcomes), by that much more.

        first: a factor on the lead's a_0, what this text has shown of the lead's proposals (its policy's
        text_factor), as keep() weighs them where the lead goes alone. Without it the plan trusted a kind's rate over
        many texts where the text at hand kept failing it. Over an ensemble of replays (bench/replay_ensemble.py, 8
        seeds, 2% noise; docs/performance.md, "An ensemble of replays"), the hybrid rose in 6 categories and fell in
        1 (paired, beyond two standard errors) of 83 in seven settings, in 3 and none of 36 on the third set, each
        setting's overall within -0.1% to +0.2%; in five more settings none moved beyond its errors."""
        c = self.cost
        verify = [c.t_verify(m) for m in range(1, k + 2)]
        draft = [c.t_draft(f) for f in range(k + 1)]
        if verify[0] is None or draft[k] is None:  # not timed yet: follow the lead, fill the round
            return min(n_lead, k - least), max(least, k - n_lead)
        own, led, lead_a = c.expected(k), lead.expected(n_lead, first), lead.acceptances(n_lead)
        lead_a[:1] = [a * first for a in lead_a[:1]]
        inf = float("inf")
        best = {False: ((0, 0), verify[0] if least == 0 else inf), True: ((0, 0), inf)}  # by "this part drafts"
        all_pass = 1.0
        for j in range(min(n_lead, k - least) + 1):
            if j:
                all_pass *= lead_a[j - 1]
            for f in range(max(least, 1 if j == 0 else 0), k - j + 1):
                if draft[f] is None:
                    continue
                reading = (behind + j) * read_s if f and behind + j > 1 else 0.0
                cost = (verify[j + f] + draft[f]) / (led[j] + all_pass * (own[f] - 1)) + reading / horizon
                if cost < best[f > 0][1]:
                    best[f > 0] = (j, f), cost
        (without, cost0), (drafting, cost1) = best[False], best[True]
        return drafting if least or cost1 * self.outcomes.optimism() < self.margin * cost0 else without
