"""Per step of a batch: each sequence's draft length (or none), from measured costs. Pure: fed seconds and
acceptance counts, so it is tested with made-up numbers.

A step is one target decode of every sequence's rows plus, when any sequence drafts, the draft decodes. Drafting
K tokens for one sequence adds K rows to the step (their marginal cost T_v(rows + K) - T_v(rows)), K draft steps
shared by every drafting sequence, and once the draft's catch-up on text it has not read (its prompt, or what it
skipped while plain), paid off over the steps the sequence has left, at most HORIZON of them. It brings E[N_K] - 1 expected extra tokens.
A sequence drafts the K that most raises the batch's tokens per second, by at least `margin`; so drafting fades as
the batch fills (the verify rows stop being free) and returns when it empties.

While the rule keeps every sequence plain, one sequence still drafts 2 tokens now and then so acceptance stays
known: only where a draft that passed whole would pay (else no acceptance could change the verdict), the one whose
probe costs least, once the probes' cost stays under `probe_share` of the time since the last one, and less often
(doubling) while probes do not change the verdict.
"""
from __future__ import annotations

from dataclasses import dataclass

from .costs import CATCH_UP_HORIZON as HORIZON  # (a catch-up must pay for itself within this many steps)
from .costs import running  # (its running averages of timings, a hold-up capped)
from .tuning import CostModel

WARM_UP_ROUNDS, WARM_UP_K, PROBE_K = 3, 4, 2


@dataclass
class Option:
    """What one sequence may do this step."""

    kind: str  # "draft" or "lookup": the proposer it would use ("off": it does not speculate this step)
    k_max: int  # the most it may draft (its request's limit, its room)
    auto: bool = True  # False: its request fixed K = k_max
    remaining: int = 1  # tokens it may still generate
    behind: int = 0  # tokens its draft cache must read before it can draft (its prompt, what it skipped)
    first: bool = False  # its first token is still to come: none is shown until this step ends


class StepPlanner:
    def __init__(self, cost: CostModel, margin: float = 0.92, probe_share: float = 0.03,
                 probe_first: int = 32, probe_last: int = 1024) -> None:
        self.cost = cost  # t_verify(m): a target decode of m rows, whichever sequences they belong to
        self.accept = {"draft": CostModel(), "lookup": CostModel()}  # acceptance by proposer, all sequences
        self.draft_step_s: float | None = None  # one draft decode of the drafting sequences' rows
        self.draft_token_s: float | None = None  # the draft reading one token in a long decode (catch-up)
        self.margin, self.probe_share = margin, probe_share
        self.probe_first, self.probe_last = probe_first, probe_last
        self._wait, self._steps, self._seconds = probe_first, 0, 0.0

    # measurements -----------------------------------------------------------------------------------------
    def observe_draft_step(self, seconds: float) -> None:
        self.draft_step_s = running(self.draft_step_s, seconds)

    def observe_catch_up(self, tokens: int, seconds: float) -> None:
        if tokens >= 16:  # short catch-ups are draft steps in all but name
            self.draft_token_s = running(self.draft_token_s, seconds / tokens)

    def observe_step(self, seconds: float) -> None:
        self._seconds += seconds

    # the rule ---------------------------------------------------------------------------------------------
    def plan(self, options: list[Option]) -> list[tuple[int, str]]:
        """(K, reason) for each sequence, in order; reasons: off, first, fixed, warm-up, cost, plain, probe."""
        rows, tokens, draft_steps, catch = len(options), float(len(options)), 0, 0.0
        out = []
        for o in options:
            if o.kind == "off" or o.k_max <= 0:
                out.append((0, "off"))
                continue
            if o.auto and o.first and o.kind == "draft" and o.behind > 1:
                # The first token comes from a plain step: the draft reads the prompt in the next one, so the
                # wait for the first token is the target's alone (the same work, moved one step later).
                out.append((0, "first"))
                continue
            k, reason = (o.k_max, "fixed") if not o.auto else self._best_k(o, rows, tokens, draft_steps, catch)
            out.append((k, reason))
            if k:
                rows, tokens = rows + k, tokens + self.accept[o.kind].expected(k)[k] - 1
                if o.kind == "draft":
                    draft_steps, catch = max(draft_steps, k), catch + self._catch_up(o)
        self._probe(options, out, rows, draft_steps)
        return out

    def _best_k(self, o: Option, rows: int, tokens: float, draft_steps: int, catch: float) -> tuple[int, str]:
        """The K that most raises the batch's expected tokens per second, given the rows already in this step."""
        acc = self.accept[o.kind]
        step_s = self.draft_step_s if o.kind == "draft" else 0.0
        if acc.n_observed < WARM_UP_ROUNDS or step_s is None:
            return min(o.k_max, WARM_UP_K), "warm-up"
        expected = acc.expected(o.k_max)
        base = self.cost.t_verify(rows) + draft_steps * step_s + catch
        best, best_rate = 0, tokens / base / self.margin
        for k in range(1, o.k_max + 1):
            steps = max(draft_steps, k) if o.kind == "draft" else draft_steps
            left = min(max(1.0, o.remaining / expected[k]), HORIZON)  # steps that repay the catch-up
            seconds = self.cost.t_verify(rows + k) + steps * step_s + catch + self._catch_up(o) / left
            rate = (tokens + expected[k] - 1) / seconds
            if rate > best_rate:
                best, best_rate = k, rate
        return (best, "cost") if best else (0, "plain")

    def _probe(self, options: list[Option], out: list[tuple[int, str]], rows: int, draft_steps: int) -> None:
        auto = [i for i, (o, (k, why)) in enumerate(zip(options, out)) if o.auto and why in ("plain", "cost")
                and o.k_max >= PROBE_K]
        if any(out[i][0] for i in auto) or any(why == "warm-up" for _, why in out):
            self._wait, self._steps, self._seconds = self.probe_first, 0, 0.0
            return
        self._steps += 1
        if not auto or self._steps < self._wait:
            return
        auto = [i for i in auto if self._could_pay(options[i], rows, float(len(options)), draft_steps)]
        if not auto:
            return
        i = min(auto, key=lambda i: self._probe_cost(options[i], rows, draft_steps))
        if self._probe_cost(options[i], rows, draft_steps) > self.probe_share * self._seconds:
            return
        out[i] = (PROBE_K, "probe")
        self._steps, self._seconds, self._wait = 0, 0.0, min(self.probe_last, 2 * self._wait)

    def _could_pay(self, o: Option, rows: int, tokens: float, draft_steps: int) -> bool:
        """Whether drafting would pay for this sequence if every drafted token passed: where even that loses (a
        compute-bound target, a full batch), no acceptance could change the verdict and a probe learns nothing."""
        step_s = (self.draft_step_s or 0.0) if o.kind == "draft" else 0.0
        plain = tokens / (self.cost.t_verify(rows) + draft_steps * step_s) / self.margin
        for k in range(1, o.k_max + 1):
            left = min(max(1.0, o.remaining / (k + 1)), HORIZON)
            seconds = (self.cost.t_verify(rows + k) + max(draft_steps, k if o.kind == "draft" else 0) * step_s
                       + self._catch_up(o) / left)
            if (tokens + k) / seconds > plain:
                return True
        return False

    def _probe_cost(self, o: Option, rows: int, draft_steps: int) -> float:
        extra = self.cost.t_verify(rows + PROBE_K) - self.cost.t_verify(rows)
        if o.kind == "draft":
            extra += max(0, PROBE_K - draft_steps) * (self.draft_step_s or 0.0) + self._catch_up(o)
        return extra

    def _catch_up(self, o: Option) -> float:
        return o.behind * (self.draft_token_s or 0.0) if o.kind == "draft" else 0.0

