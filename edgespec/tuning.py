"""Draft length from measured costs, and knowing when not to speculate.

A round with K drafted tokens costs T(K) = T_v(K+1) + K*T_d (a target verify of K+1 rows, K draft steps) and yields
E[N_K] = 1 + sum_{j<=K} prod_{i<=j} a_i tokens, a_i being the chance that draft position i is accepted given that
the ones before it were. Speculation pays only while T(K)/E[N_K] < T_v(1), the cost of a plain token. The model
is pure: it is fed measurements (seconds) and answers questions, so it is tested with made-up costs.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CostModel:
    alpha: float = 0.2  # weight of a new timing in its running average
    decay: float = 0.98  # acceptance evidence fades, so the estimate follows the text
    prior_accept: float = 0.6  # a_i before any evidence ...
    prior_weight: float = 2.0  # ... worth this many rounds
    verify_s: dict[int, float] = field(default_factory=dict)  # m rows -> seconds
    draft_round_s: dict[int, float] = field(default_factory=dict)  # n drafted -> seconds of the draft phase
    draft_s: float | None = None  # seconds per drafted token (used for n never drafted yet)
    reached: list[float] = field(default_factory=list)  # rounds that put position i to the test
    accepted: list[float] = field(default_factory=list)  # ... and had it accepted
    n_observed: int = 0  # rounds that drafted anything

    # measurements -----------------------------------------------------------------------------------------
    def observe_verify(self, m: int, seconds: float) -> None:
        old = self.verify_s.get(m)
        self.verify_s[m] = seconds if old is None else old + self.alpha * (seconds - old)

    def observe_draft(self, n_drafted: int, seconds: float) -> None:
        # A draft round is not n equal steps (the first also catches up on the accepted text), so each length
        # keeps its own running time; the per-token figure covers lengths not tried yet.
        if n_drafted:
            old = self.draft_round_s.get(n_drafted)
            self.draft_round_s[n_drafted] = seconds if old is None else old + self.alpha * (seconds - old)
            per = seconds / n_drafted
            self.draft_s = per if self.draft_s is None else self.draft_s + self.alpha * (per - self.draft_s)

    def observe_acceptance(self, n_drafted: int, n_accepted: int) -> None:
        """Position i (0-based) was tested if i < n_drafted and all before it passed, i.e. i <= n_accepted."""
        self.n_observed += 1
        tested = min(n_drafted, n_accepted + 1)
        while len(self.reached) < tested:
            self.reached.append(0.0)
            self.accepted.append(0.0)
        for i in range(len(self.reached)):
            self.reached[i] *= self.decay
            self.accepted[i] *= self.decay
        for i in range(tested):
            self.reached[i] += 1
            self.accepted[i] += i < n_accepted

    # estimates --------------------------------------------------------------------------------------------
    def acceptance(self, i: int) -> float:
        """a_i, shrunk towards a_{i-1} (towards prior_accept for i = 0) while position i has little evidence:
        a position never drafted is assumed as good as the one before it, so longer drafts get tried."""
        prior = self.prior_accept if i == 0 else self.acceptance(i - 1)
        r, a = (self.reached[i], self.accepted[i]) if i < len(self.reached) else (0.0, 0.0)
        return (a + prior * self.prior_weight) / (r + self.prior_weight)

    def expected_tokens(self, k: int) -> float:
        total, chain = 1.0, 1.0
        for i in range(k):
            chain *= self.acceptance(i)
            total += chain
        return total

    def t_verify(self, m: int) -> float | None:
        """Measured, or interpolated between the nearest measured batch sizes (extrapolated past the ends)."""
        return _interpolate(self.verify_s, m)

    def t_draft(self, k: int) -> float | None:
        if k == 0:
            return 0.0
        if len(self.draft_round_s) >= 2 or k in self.draft_round_s:
            return _interpolate(self.draft_round_s, k)
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
        best, best_cost = 1, self.cost_per_token(1)
        for k in range(2, k_max + 1):
            c = self.cost_per_token(k)
            if c is not None and (best_cost is None or c < best_cost):
                best, best_cost = k, c
        return best, best_cost


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
        lo, hi = known[0], known[1]
    elif hi is None:
        lo, hi = known[-2], known[-1]
    return max(table[lo] + (table[hi] - table[lo]) * (x - lo) / (hi - lo), 0.0)


@dataclass
class Decision:
    k: int
    reason: str  # "fixed", "warm-up", "cost", "fallback", "probe"
    why: str = ""  # for a fallback: the numbers behind it


class DraftLength:
    """Per round: how many tokens to draft. Fixed, or by the cost model with a fallback to plain decoding."""

    def __init__(self, k_max: int, adaptive: bool, cost: CostModel | None = None, fallback_rounds: int = 32,
                 margin: float = 0.92, probe_k: int = 4, explore_every: int = 8) -> None:
        self.k_max, self.adaptive = k_max, adaptive
        self.cost = cost or CostModel()
        self.fallback_rounds = fallback_rounds  # plain rounds before probing again, when drafting is far behind
        self.margin = margin  # speculate only if expected to cost under margin * a plain token
        self.probe_k = probe_k  # a probe drafts at least this many, to learn acceptance past position 1
        self._plain_left = 0
        self.warm_up_rounds = 3
        self.explore_every = explore_every  # every n-th round drafts one more than the best K, to keep learning
        self._rounds = 0
        self.fallbacks = 0

    def new_text(self) -> None:
        """A new generation: whatever made drafting lose on the last text may not hold for this one."""
        self._plain_left = 0

    def decide(self, cap: int) -> Decision:
        """cap: the most tokens this round may draft (context room, max_tokens)."""
        k_max = min(self.k_max, cap)
        if k_max <= 0:
            return Decision(0, "fixed")
        if not self.adaptive:
            return Decision(k_max, "fixed")
        if self._plain_left > 0:
            self._plain_left -= 1
            if self._plain_left > 0:
                return Decision(0, "fallback")
            return Decision(max(self.cost.best_k(k_max)[0], min(self.probe_k, k_max)), "probe")
        plain = self.cost.t_verify(1)
        k, per_token = self.cost.best_k(k_max)
        if plain is None or per_token is None or self.cost.n_observed < self.warm_up_rounds:
            # First rounds draft probe_k tokens whatever the model says: they measure the draft's cost and the
            # acceptance past position 1, which the estimates need before they can be trusted.
            return Decision(min(k_max, self.probe_k), "warm-up")
        ratio = per_token / plain
        if ratio >= self.margin:
            # Near break-even the estimate may be wrong either way: probe again soon. Far behind: wait longer.
            self._plain_left = max(4, min(self.fallback_rounds, int(self.fallback_rounds * (ratio - self.margin) / 0.3)))
            self.fallbacks += 1
            why = (f"best K={k} expects {1000 * per_token:.1f} ms/token (acceptance "
                   f"{self.cost.acceptance(0):.2f} at position 1) vs {1000 * plain:.1f} ms/token plain; "
                   f"plain decoding for {self._plain_left} rounds, then a probe")
            return Decision(0, "fallback", why)
        self._rounds += 1
        if self.explore_every and self._rounds % self.explore_every == 0 and k < k_max:
            return Decision(k + 1, "explore")
        return Decision(k, "cost")

    def observe(self, k: int, n_drafted: int, n_accepted: int, draft_s: float, verify_s: float) -> None:
        self.cost.observe_verify(n_drafted + 1, verify_s)
        if n_drafted:
            self.cost.observe_draft(n_drafted, draft_s)
            self.cost.observe_acceptance(n_drafted, n_accepted)
