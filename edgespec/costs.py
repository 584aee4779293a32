"""The cost model: what a round costs and yields, from measurements.

A round with K drafted tokens costs T(K) = T_v(K+1) + T_d(K) (a target verify of K+1 rows, the draft's work) and
yields E[N_K] = 1 + sum_{j<=K} prod_{i<=j} a_i tokens, a_i being the chance that draft position i is accepted given
that the ones before it were. The model is pure: it is fed measurements (seconds, acceptance counts) and answers
questions (expected tokens, the best K, interpolated verify costs), so it is tested with made-up costs. What to do
with the answers (draft how many, fall back, probe) is tuning.py's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from .way_back import WayBack

# A draft model's catch-up (reading text it skipped) must pay for itself within this many tokens: the text, a
# batch's load and the draft's luck change, and a part the rule turns plain again skips text it must read once more
# later, so paying off over all the tokens a request has left is a promise that is seldom kept.
CATCH_UP_HORIZON = 16
HOLD_UP = 2.0  # a timing over this many times its running average counts as this many times it (running())


def running(old: float | None, seconds: float, alpha: float = 0.2) -> float:
    """A running average of timings, moved by a new one with weight alpha; a timing over HOLD_UP times the average
    moves it as one of HOLD_UP times it would. A machine's timings have a tail of hold-ups (another process's turn,
    a page fault: SmolLM2 steps of 17-20 ms, one in ten 30-72 ms, bench/results/trace-rpc-1gbit-wayback.log), and
    one of them, taken whole, left a cost high for the next several timings, or for good where its price kept the
    policy from trying that length again. A lasting change is still followed: each capped timing moves the average
    alpha x (HOLD_UP - 1) higher."""
    if old is None:
        return seconds
    if old > 0:
        seconds = min(seconds, HOLD_UP * old)
    return old + alpha * (seconds - old)


@dataclass
class CostModel:
    alpha: float = 0.2  # weight of a new timing in its running average
    decay: float = 0.98  # acceptance evidence fades, so the estimate follows the text
    prior_accept: float = 0.6  # a_i before any evidence ...
    prior_weight: float = 2.0  # ... worth this many rounds
    verify_s: dict[int, float] = field(default_factory=dict)  # m rows -> seconds
    back: WayBack = field(default_factory=WayBack)  # over a link: the way back to plain steps
    draft_round_s: dict[int, float] = field(default_factory=dict)  # n drafted -> seconds of the draft phase
    draft_s: float | None = None  # seconds per drafted token (used for n never drafted yet)
    step_s: float | None = None  # one draft decode of one row, as the draft model timed it (DraftLength.step_s)
    reached: list[float] = field(default_factory=list)  # rounds that put position i to the test
    accepted: list[float] = field(default_factory=list)  # ... and had it accepted
    n_observed: int = 0  # rounds that drafted anything
    # The same counts over many texts (fading slower, not cut at a new text): what a new text starts from
    base_decay: float = 0.995
    base_reached: list[float] = field(default_factory=list)
    base_accepted: list[float] = field(default_factory=list)
    text_prior: float | None = None  # since a new text: a_0 as many texts showed it (restart)

    # measurements -----------------------------------------------------------------------------------------
    def observe_verify(self, m: int, seconds: float) -> None:
        self.verify_s[m] = running(self.verify_s.get(m), seconds, self.alpha)

    def observe_draft(self, n_drafted: int, seconds: float) -> None:
        # A draft round is not n equal steps (the first also catches up on the accepted text), so each length
        # keeps its own running time; the per-token figure covers lengths not tried yet.
        if n_drafted:
            self.draft_round_s[n_drafted] = running(self.draft_round_s.get(n_drafted), seconds, self.alpha)
            self.draft_s = running(self.draft_s, seconds / n_drafted, self.alpha)

    def forget(self, factor: float) -> None:
        """Weigh the acceptance seen so far by factor (a new text: the old one's evidence counts less)."""
        self.reached = [r * factor for r in self.reached]
        self.accepted = [a * factor for a in self.accepted]

    def restart(self, most: float, from_texts: bool = True) -> None:
        """A new text: what earlier texts showed counts as at most `most` rounds, at the rate seen over many texts
        (not the last text's alone: one poor text would otherwise make the next one start from it, and an estimate
        too poor to be tried again is never corrected). from_texts: a_0 is shrunk towards that rate too
        (acceptances), else towards prior_accept."""
        if not self.base_reached or self.base_reached[0] <= 0:  # (counts set by hand: cut to `most`)
            if self.reached and self.reached[0] > most:
                self.forget(most / self.reached[0])
            return
        self.text_prior = _shrunk(self.base_reached, self.base_accepted, 1, self.prior_accept, self.prior_weight)[0] \
            if from_texts else None
        self.reached = [min(most, r) for r in self.base_reached]
        self.accepted = [w * a / r if r > 0 else 0.0 for w, a, r in zip(self.reached, self.base_accepted,
                                                                        self.base_reached)]

    def _count(self, tested: int, passed: Callable[[int], bool]) -> None:
        """Position i < tested was put to the test and passed(i) says whether it passed; both tallies fade first."""
        for reached, accepted, decay in ((self.reached, self.accepted, self.decay),
                                         (self.base_reached, self.base_accepted, self.base_decay)):
            while len(reached) < tested:
                reached.append(0.0)
                accepted.append(0.0)
            for i in range(len(reached)):
                reached[i] *= decay
                accepted[i] *= decay
            for i in range(tested):
                reached[i] += 1
                accepted[i] += passed(i)

    def observe_tries(self, n_tried: int, passed: bool) -> None:
        """Alternatives tried in turn until one passed (a verification tree's siblings after the first failed):
        position i is the i-th alternative, tested if all before it failed."""
        self.n_observed += 1
        self._count(n_tried, lambda i: passed and i == n_tried - 1)

    def observe_acceptance(self, n_drafted: int, n_accepted: int) -> None:
        """Position i (0-based) was tested if i < n_drafted and all before it passed, i.e. i <= n_accepted."""
        self.n_observed += 1
        self._count(min(n_drafted, n_accepted + 1), lambda i: i < n_accepted)

    # estimates --------------------------------------------------------------------------------------------
    def acceptances(self, n: int) -> list[float]:
        """a_0 .. a_{n-1}, each shrunk towards the one before it while its position has little evidence (a_0
        towards what many texts showed, since a new text: text_prior; else towards prior_accept): a position never
        drafted is assumed as good as the one before it, so longer drafts get tried.

        A new text's a_0 starts from the long-run rate, not halfway to prior_accept, a prior for a pair nothing is
        known of: that dragged a draft that passes 95% of its tokens to 78% at each new text. Replayed, SmolLM2 and
        its own Q4_1 with 8 ms on each target decode (where drafting pays from about 88%), from no profile: every
        text began in a fallback, and the adaptive draft model made 1.00x against 1.15x for a fixed K of 4."""
        prior = self.text_prior if self.text_prior is not None else self.prior_accept
        return _shrunk(self.reached, self.accepted, n, prior, self.prior_weight)

    def acceptance(self, i: int) -> float:
        return self.acceptances(i + 1)[i]

    def expected(self, n: int, first: float = 1.0) -> list[float]:
        """E[N_k] for k = 0..n: 1 + sum over j <= k of the chance that the first j drafted tokens all pass. first: a
        factor on a_0 (what the text at hand says of this proposer: Splits.text_factor)."""
        out, chain = [1.0], first
        for a in self.acceptances(n):
            chain *= a
            out.append(out[-1] + chain)
        return out

    def expected_tokens(self, k: int) -> float:
        return self.expected(k)[k]

    def all_pass(self, k: int) -> float:
        """The chance that all of the first k drafted tokens pass."""
        p = 1.0
        for a in self.acceptances(k):
            p *= a
        return p

    def t_verify(self, m: int) -> float | None:
        """What a round that decodes m rows costs the target from where it stands: the decode, measured or
        interpolated between the nearest measured batch sizes (extrapolated past the ends), and its part in the way
        back to plain steps (WayBack.price)."""
        t = _interpolate(self.verify_s, m)
        return t if t is None or not self.back.seconds else t + self.back.price(m)

    def t_draft(self, k: int) -> float | None:
        if k == 0:
            return 0.0
        if len(self.draft_round_s) >= 2 or k in self.draft_round_s:
            t = _interpolate(self.draft_round_s, k)
            # A shorter draft is the start of a longer one (the same first decode, fewer steps), so it never costs
            # more: a timing of one length left high by a slow round stays until that length is drafted again,
            # which its price then prevents.
            t = min([t, *(s for n, s in self.draft_round_s.items() if n > k)])
            longest = max(self.draft_round_s)
            if k > longest and self.step_s is not None:
                # Past the longest length measured, each further token is one more decode of the draft. A line
                # through the two longest timings, noisy ones (a round that also waited on something else), can
                # run flat or downhill: SmolLM2 over an rpc-server timed 3 tokens at 117 ms and 4 at 45, so 8
                # cost 45 too, the plan drafted 8 where a second verify row cost more than a step, and the
                # draft's confidence then refused its first token in round after round (0.5x of plain).
                t = max(t, self.draft_round_s[longest] + (k - longest) * self.step_s)
            return t
        if len(self.draft_round_s) == 1:
            # One length measured: its first step also caught up on the accepted text, so count it as two steps
            # and each further token as one.
            (n, t), = self.draft_round_s.items()
            return t + (k - n) * t / (n + 1)
        return None if self.draft_s is None else k * self.draft_s

    def round_cost(self, k: int) -> float | None:
        tv, td = self.t_verify(k + 1), self.t_draft(k)
        return None if tv is None or td is None else tv + td

    def cost_per_token(self, k: int) -> float | None:
        c = self.round_cost(k)
        return None if c is None else c / self.expected_tokens(k)

    def best_k(self, k_max: int) -> tuple[int, float | None]:
        """The K in 1..k_max with the least expected time per token (ties: the smaller K), and that time.

        Equivalently K grows while the marginal time per marginal token stays below the current time per token.
        """
        expected = self.expected(k_max)  # once per decision: this runs every round
        best, best_cost = 1, None
        for k in range(1, k_max + 1):
            c = self.round_cost(k)
            if c is not None and (best_cost is None or c / expected[k] < best_cost):
                best, best_cost = k, c / expected[k]
        return best, best_cost


@dataclass
class Outcomes:
    """How a proposer's drafted rounds turned out against what the cost model expected when it chose them: seconds
    (verify, drafting, reading) and tokens (E[N]), each a fading sum, starting as if prior_rounds rounds had gone as
    expected. The model's estimates are fair on average, but a policy drafts where they look good, and the best of
    several noisy estimates is an optimistic one; so are timings taken apart from a generation (a verify curve timed
    alone, over a network). optimism() is what to multiply an expected cost per token by to meet the outcome."""
    decay: float = 0.95
    prior_rounds: float = 4.0
    most: float = 3.0  # a bound on the correction, against a few freak rounds
    expected_s: float = 0.0
    spent_s: float = 0.0
    expected_n: float = 0.0
    got_n: float = 0.0
    rounds: int = 0

    def observe(self, expected_s: float, expected_n: float, spent_s: float, got_n: int) -> None:
        if not self.rounds:
            self.expected_s = self.spent_s = self.prior_rounds * expected_s
            self.expected_n = self.got_n = self.prior_rounds * expected_n
        d = self.decay
        # a round held up counts as running() counts a timing: at most HOLD_UP times what rounds have taken so far
        so_far = self.spent_s / self.expected_s if self.expected_s > 0 else 1.0
        spent_s = min(spent_s, HOLD_UP * expected_s * max(1.0, so_far))
        self.expected_s, self.spent_s = d * self.expected_s + expected_s, d * self.spent_s + spent_s
        self.expected_n, self.got_n = d * self.expected_n + expected_n, d * self.got_n + got_n
        self.rounds += 1

    def time_factor(self) -> float:
        """Seconds spent per second expected (>= 1: an outcome better than expected is not counted on)."""
        return min(self.most, max(1.0, self.spent_s / self.expected_s)) if self.expected_s > 0 else 1.0

    def optimism(self) -> float:
        """Cost per token met against cost per token expected (>= 1)."""
        if self.expected_s <= 0 or self.got_n <= 0:
            return 1.0
        return min(self.most, max(1.0, (self.spent_s / self.expected_s) / (self.got_n / self.expected_n)))


def seed_counts(c: CostModel, counts: dict, weight: float) -> bool:
    """Acceptance counts by position from an earlier run, scaled to be worth at most `weight` rounds."""
    reached = counts["reached"]
    if not reached or reached[0] <= 0:
        return False
    f = min(1.0, weight / reached[0])
    c.reached = [r * f for r in reached]
    c.accepted = [a * f for a in counts["accepted"]]
    f = min(1.0, 4 * weight / reached[0])  # the long-run counts: soon outweighed by this process's own texts
    c.base_reached = [r * f for r in reached]
    c.base_accepted = [a * f for a in counts["accepted"]]
    return True


def _shrunk(reached: Sequence[float], accepted: Sequence[float], n: int, prior: float, weight: float) -> list[float]:
    """The first n acceptances from these counts, each shrunk towards the one before it (the first towards prior)
    with `weight` rounds' worth."""
    out = []
    for i in range(n):
        r, a = (reached[i], accepted[i]) if i < len(reached) else (0.0, 0.0)
        prior = (a + prior * weight) / (r + weight)
        out.append(prior)
    return out


def _interpolate(table: dict[int, float], x: int) -> float | None:
    """table[x] if measured, else linear between the nearest measured neighbours (extrapolated past the ends)."""
    if x in table:
        return table[x]
    known = sorted(table)
    if not known:
        return None
    if len(known) == 1:
        return table[known[0]]
    lo = max([k for k in known if k < x], default=None)
    hi = min([k for k in known if k > x], default=None)
    if lo is None:
        # Below what was measured: a line through two noisy timings can reach zero or below (and a zero plain
        # step divides by zero later); fewer rows never cost more than the fewest measured, so use that.
        return table[known[0]]
    if hi is None:
        lo, hi = known[-2], known[-1]
    return max(table[lo] + (table[hi] - table[lo]) * (x - lo) / (hi - lo), min(table[lo], table[hi]))
