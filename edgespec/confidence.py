"""The draft model's confidence: how often a token it drafted at a given top probability passes (Calibration), and
where a round stops by it (ConfidenceStop): each further token worth its verify row and draft step, or handed on to
prompt lookup's continuation."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence


@dataclass
class Calibration:
    """How often a drafted token passes, by the draft model's own probability for it (its confidence: the top
    probability of its distribution at that position), in `bins` equal bins, each fading by `decay` a round and
    starting from the confidence itself, worth prior_weight tokens. A draft model's confidence tells its good guesses
    from its poor ones within a round, which its acceptance by position (an average) cannot."""
    bins: int = 10
    decay: float = 0.995
    prior_weight: float = 2.0
    tested: list[float] = field(default_factory=list)
    passed: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tested = self.tested or [0.0] * self.bins
        self.passed = self.passed or [0.0] * self.bins

    def seed(self, counts: dict, weight: float) -> None:
        """Start from an earlier run's counts (profile.py), worth at most `weight` tokens in all; counts in another
        number of bins are not these bins' and are left out."""
        if len(counts["tested"]) != self.bins or len(counts["passed"]) != self.bins:
            return
        f = min(1.0, weight / max(sum(counts["tested"]), 1e-9))
        self.tested = [t * f for t in counts["tested"]]
        self.passed = [p * f for p in counts["passed"]]

    def _bin(self, p: float) -> int:
        return min(self.bins - 1, max(0, int(p * self.bins)))

    def chance(self, p: float) -> float:
        i = self._bin(p)
        return (self.passed[i] + p * self.prior_weight) / (self.tested[i] + self.prior_weight)

    def observe(self, confidence: Sequence[float], n_accepted: int,
                refused: tuple[float, bool] | None = None) -> None:
        """A round's drafted tokens, with these confidences, of which the first n_accepted passed: each up to the
        first that failed was put to the test. refused: the confidence of the token the draft then refused, and
        whether it would have passed (greedy: it is the target's token there), tested too where all before it
        passed. Without it a refused token was never tested, and a confidence rated too low was refused for good: a
        quantised copy of the target that passes 86% of its tokens at confidence 0.1-0.2 refused its first token
        round after round (bench/confidence.py; docs/performance.md, "Change of 2026-12-02 evening")."""
        if refused is not None and n_accepted >= len(confidence):
            confidence, n_accepted = [*confidence, refused[0]], n_accepted + refused[1]
        self.tested = [t * self.decay for t in self.tested]
        self.passed = [t * self.decay for t in self.passed]
        for i, p in enumerate(confidence[:n_accepted + 1]):
            b = self._bin(p)
            self.tested[b] += 1
            self.passed[b] += i < n_accepted


class ConfidenceStop:
    """While a draft model drafts one round, whether the next token is worth its place: a drafted token adds one
    verify row, and what it brings is a token with the chance that it and every token before it in the round pass
    (each by its own confidence, Calibration), worth what a token costs when speculating (`value`, seconds). Before
    token i: keep it only if it pays for its row (keep); after it: draft one more only if the next token, passing as
    the position's average does (`accept`), is expected to pay for its row and the draft step (further). So a round
    goes on while the draft model is sure and stops where it hesitates, at lengths the costs decide rather than a
    fixed threshold: on a flat verify curve a row costs little and a doubtful token is still worth trying.

    A token pays for its row together with the tokens it opens the way to (at their positions' average, each a draft
    step more, up to `most` in the round): a verify curve need not rise evenly. This machine's F16 target pays 0.67
    of a step for a second row, 0.27 for the next two together; a curve timed over an rpc-server 10 ms away had
    T_v(2) = 4.5 T_v(1) and T_v(6) about the same (before each size was decoded once ahead of its timing, which
    removed most of that step: Drafting.calibrate). Judged alone, a first token never paid for its row there, and a
    draft model that passed nearly every token drafted none (0.80x of plain where a fixed K of 4 made 1.57x). The
    first `least` tokens are kept whatever their confidence (a probe must test one). In a chain behind prompt
    lookup, `hand_off` (Chain._hand_off) may end the round's drafting where lookup continues the tokens drafted so far
    for less, or, where it sets `check`, one token later if that token is lookup's next (agrees). It looks at the
    draft's distribution and the drafted tokens only, never at the target, so sampling stays exact."""

    def __init__(self, calibration: Calibration, t_verify, rows: int, value: float, step_s: float,
                 accept: Sequence[float], reach: float = 1.0, active: bool = True, least: int = 0) -> None:
        self.calibration, self.t_verify, self.rows = calibration, t_verify, rows
        self.value, self.step_s, self.accept = value, step_s, accept
        self.reach = reach  # the chance that everything before this part's next token passes
        self.active = active  # False: only note the confidences (a learning round drafts its length whole)
        self.least = least  # tokens kept whatever their confidence (a probe tests at least one)
        self.most = len(accept)  # the most tokens this round may draft (the caller sets it)
        self.confidence: list[float] = []  # of the tokens kept
        self.expected = 0.0  # the tokens kept, each counted with the chance that it and all before it pass
        self.hand_off: Callable[[Sequence[int]], bool] | None = None  # whether to stop after the tokens drafted
        # so far because prompt lookup continues them for less (Chain._hand_off; its tail takes the round on) ...
        self.check: int | None = None  # ... once the draft model's next token is this one, lookup's next (agrees)
        self.handed = False  # the round stopped here for lookup's continuation (a hand-off, checked or not)

    def _a(self, i: int) -> float:
        return self.accept[i] if i < len(self.accept) else (self.accept[-1] if self.accept else 0.5)

    def _pays(self, i: int, chance: float, drafted: bool) -> bool:
        """Whether token i, passing with `chance` (those before it included), and some run of tokens after it
        (each passing at its position's average, each a draft step more) are worth more than their rows and steps
        cost; drafted: token i's own step is spent already."""
        start, gain = self.t_verify(self.rows + i), 0.0
        for h in range(max(1, self.most - i)):
            if h:
                chance *= self._a(i + h)
            gain += chance * self.value
            if gain >= self.t_verify(self.rows + i + h + 1) - start + (h + (not drafted)) * self.step_s:
                return True
        return False

    def keep(self, i: int, p: float) -> bool:
        chance = self.reach * self.calibration.chance(p)
        if self.active and i >= self.least and not self._pays(i, chance, True):
            return False
        self.reach = chance
        self.expected += chance
        self.confidence.append(p)
        return True

    def further(self, i: int, drafted: Sequence[int] = ()) -> bool:
        if not self.active or i + 1 < self.least:
            return True
        if self.hand_off is not None and drafted and self.hand_off(drafted):
            if self.check is not None and i + 1 < self.most:
                return True  # one more, to check the hand-off (agrees)
            self.check = None
            self.handed = True
            return False
        return self._pays(i + 1, self.reach * self._a(i + 1), False)

    def agrees(self, token: int) -> bool:
        """The token drafted after a hand-off put off for a check (further): whether it is lookup's next one, so
        the round stops after it and lookup's continuation takes it on; if not, the draft model drafts on. Either
        way the check is spent. It compares drafted tokens with lookup's, never the target's: sampling stays
        exact."""
        check, self.check = self.check, None
        if check is None:
            return False
        self.handed = token == check
        return self.handed
