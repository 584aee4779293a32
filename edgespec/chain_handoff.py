"""A draft model's round handed on to prompt lookup (a mixin of chain.Chain): where the draft model began a quotation
that lookup could not see from the text alone, lookup's continuation of its tokens (the round's tail) costs a verify
row a token, where each more drafted token costs a row and a draft step; the round is handed on where that makes it
cheaper per token, the verify's fixed cost counted. Where a wrong continuation's rows would cost
more than a draft step, the draft model drafts one token more first and hands on only where that token is lookup's
next one (a quotation still); else it drafts on. The same check may come before a round lookup would lead alone: the
draft model's first token, and lookup's continuation only where that is lookup's first."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Sequence

from .splits import least_per_token

if TYPE_CHECKING:
    from .chain import Link

HAND_OFF_MATCH = 3  # a draft model hands a round on to lookup's continuation of a match this long or longer ...
HAND_OFF_ROWS = 4  # ... pricing lookup's next token at the mean of this many more verify rows (_hand_off)
CHECK_BEHIND = 4  # a draft model with more than this to read first does not check lookup's first token ...
LEAD_CHECK_SHARE = 0.25  # ... and checks it where the rows a failing lead wastes reach this share of the check's step


class ChainHandOff:
    def _tail(self, seq: list[int], tokens: list[int], room: int, reading: float) -> int:
        """After a draft model's tokens, prompt lookup's continuation of them (a quotation the draft began, which
        lookup could not see from the text alone), as many of its tokens as lower the round's expected time per
        token: each costs its verify row and passes with lookup's estimate for that kind of match (a kind of its
        own, `...:tail`), once all before it pass. Where the draft model stopped for this continuation (a hand-off,
        ConfidenceStop.handed), the round so far is judged as the hand-off judged it: its drafted tokens passing as
        the draft's confidence has them, not at its positions' rates. Appends them to tokens; returns how many."""
        lead, last = self.links[0], self._used[-1] if self._used else None
        if len(self.links) < 2 or last is None or not last.n or last.policy.free or not lead.policy.free or \
                not (last.policy.adaptive if self.adaptive is None else self.adaptive) or \
                not hasattr(lead.part, "match_after"):
            return 0
        n = len(tokens)
        most = min(room, lead.policy.k_max if self.k_max is None else self.k_max) - n  # (a round's K holds for it too)
        if most <= 0:
            return 0
        offered, key = lead.part.match_after(seq, tokens, most)
        key = f"{key}:tail"  # (its own kind: a match the draft's tokens made, which may pass at another rate)
        base = self._expectation(n, reading) if offered else None
        if base is None:
            return 0
        if last.stop is not None and last.stop.handed:
            expected, reach = self._ahead(self._used[:-1]) + last.stop.expected, last.stop.reach
        else:
            expected, reach = base[2], math.prod(self._accept())
        best = lead.policy.keep_after(len(offered), key, n, base[1], expected, reach)
        from . import chain  # (which imports this module)

        link = chain.Link(lead.part, lead.policy, start=n, n=best, key=key, offered=list(offered))
        self._offers.append(link)  # (declined too: it learns from the target's tokens, as lookup's own matches)
        if best:
            self._used.append(link)
            tokens += offered[:best]
        return best

    def _hand_off(self, seq: list[int], before: list[int], link: Link) -> Callable[[Sequence[int]], bool] | None:
        """For a draft model drafting by cost behind prompt lookup (the chain's free lead): after its tokens so far,
        whether to stop and leave the rest of the round to lookup's continuation of them (_tail), which costs a
        verify row a token where each more drafted token costs a row and a draft step. It stops where lookup
        continues them from a match of HAND_OFF_MATCH tokens or more (shorter ones are common words as often as
        quotations), the round so handed on is expected to cost less per token than the round drafted on
        (_handing_pays), and the tail would keep some of it (_tail_takes). A quotation the draft model began is then
        copied, not drafted token by token. Where the next HAND_OFF_ROWS rows (their mean, as a verify curve need
        not rise evenly), wasted by a wrong continuation, are expected to cost more than a draft step (less the
        reading it spares), the hand-off waits for a check (stop.check, ConfidenceStop.agrees): the draft model
        drafts its next token, and the round goes on to lookup only where that is lookup's next token. An
        extraction's answer copies a field from the passage, then leaves it where the passage goes on: lookup
        continues the passage, the draft model the format (replayed with a memory-bound target, extraction on the
        second set 0.951 to 0.997 of the draft model alone; on a flat curve, where rows cost little, nothing is
        checked). And only to a copy that runs on for those HAND_OFF_ROWS tokens (or the round's room) before the
        copied text ends (PromptLookupProposer._copy): an answer that quotes a question up to its last word goes its
        own way where the question ends ("The chemical symbol for gold" copied on to "?", where the draft model goes
        on to " is Au."), and a round handed to such a copy ended there, one token short of the draft model's own
        (replayed with the Q4_0 draft: the built-in factual answers, in the six settings where they were furthest
        behind, from 0.888-0.905 of the draft model alone per token to 0.923-0.975; docs/performance.md,
        2026-12-07, session six). Rounds by cost only: a learning round's length is what it measures. None: no lead
        to hand off to."""
        lead = self.links[0]
        if len(self.links) < 2 or link is lead or self.tree_width > 1 or not lead.policy.free or \
                not hasattr(lead.part, "match_after"):
            return None
        before, cost, stop = list(before), link.policy.cost, link.stop
        ahead = self._ahead(self._used)  # (the lead's tokens it kept)

        def hand_off(drafted: Sequence[int]) -> bool:
            r = max(1, min(HAND_OFF_ROWS, stop.most - len(drafted)))
            tokens = [*before, *drafted]
            offered, key = lead.part.match_after(seq, tokens, r)
            if not offered or int(key.split(":")[1]) < HAND_OFF_MATCH:  # (key: "lookup:N" or "lookup:N:own")
                return False
            if not self._runs_on(offered, r, lead.part):  # no quotation to carry the round on: where a question
                return False  # ends, an answer goes its own way
            read = getattr(link.part, "read_s", None) or 0.0
            if not self._handing_pays(seq, tokens, len(drafted), f"{key}:tail", offered, cost, stop, read, ahead):
                return False
            rows = len(tokens) + 1
            start, end = cost.t_verify(rows), cost.t_verify(rows + r)
            row = max(0.0, end - start) / r if start is not None and end is not None else 0.0
            tail = lead.policy.keyed(f"{key}:tail").acceptances(1)[0]
            check = offered[0] if self._checked(tail, r * row, stop.step_s, read) else None
            if not self._tail_takes(seq, tokens, len(drafted), f"{key}:tail", check, tail, cost, stop, ahead):
                return False
            stop.check = check
            return True
        return hand_off

    def _handing_pays(self, seq: list[int], tokens: list[int], drafted: int, key: str, offered: list[int], cost,
                      stop, read: float, ahead: float) -> bool:
        """Whether the round handed on now (after the draft model's `drafted` tokens, the round's `tokens` so far)
        is expected to cost less per token than the round drafted on, each at its best length: lookup's
        continuation of e >= 1 tokens (`offered`, longer where lookup has more for the round's room), passing as
        its kind (`key`, a tail) has, each a verify row and a token the draft model reads later; or f >= 1 more
        drafted tokens, passing at the draft's positions' rates, each a row and a draft step. Both count what the
        round has so far: its verify, the draft steps spent, and the tokens expected of it (`ahead`, the target's
        own and the lead's, and the drafted ones as their confidence has them: stop.expected, stop.reach).

        The round's fixed cost is what decides: a verify is a step whatever its rows, so a round that ends with a
        short continuation yields fewer tokens for it than one the draft model drafts on to its confidence's end.
        Judged token against token (the continuation's next against the draft's, each by its own row and step), a
        copied token always looked the cheaper where a draft step costs about a row, and rounds the draft model
        alone would have drafted 8 tokens deep ended after lookup's 2 or 3 (a memory-bound target, held-out
        multi-turn chat). Replayed with the Q4_0 draft (17 settings, 8 seeds, 2% noise), the hybrid's categories
        short of its better part went from 22 to 14 of 207 per token and from 41 to 39 end to end
        (docs/performance.md, 2026-12-07, session eight)."""
        most = stop.most - drafted
        if most > len(offered):
            offered = self.links[0].part.match_after(seq, tokens, most)[0] or offered
        rows, first, spent = len(tokens), cost.t_verify(len(tokens) + 1), cost.t_draft(drafted)
        if first is None or spent is None:  # (not timed yet: a copied token costs a row, a drafted one a step more)
            return True
        so_far, expected = first + spent, ahead + stop.expected
        tail = self.links[0].policy.keyed(key).acceptances(len(offered))
        mine = cost.acceptances(drafted + most)[drafted:]
        v = cost.t_verify
        return least_per_token(v, rows, so_far, expected, stop.reach, tail, read)[1] <= \
            least_per_token(v, rows, so_far, expected, stop.reach, mine, stop.step_s)[1]

    def _tail_takes(self, seq: list[int], tokens: list[int], drafted: int, key: str, check: int | None,
                    tail: float, cost, stop, ahead: float) -> bool:
        """Whether the round handed on now would end with lookup's continuation: whether _tail, judging the round as
        the hand-off does (the drafted tokens passing as their confidence has them, the round's verify and draft
        steps so far), would keep at least one of its tokens; where the hand-off waits for a check, after the
        check's token (lookup's next, drafted by the draft model and passing at the tail's first rate, `tail`).
        Else the draft model drafts on where its confidence pays, as if lookup had nothing: a hand-off the tail
        then declined ended the round where the draft model stopped, for nothing. Replayed on the built-in texts
        (the Q4_0 draft, the retimed costs; test_proposers_engine.py), 22 of 68 rounds handed on had kept no tail,
        all after a check: the check's token took a verify row, and the continuation after it no longer paid for
        its rows."""
        most, expected, reach = stop.most - drafted, ahead + stop.expected, stop.reach
        if check is not None:
            tokens, drafted, most = [*tokens, check], drafted + 1, most - 1
            reach *= tail
            expected += reach
        offered = self.links[0].part.match_after(seq, tokens, most)[0] if most > 0 else None
        if not offered:
            return False
        verify, spent = cost.t_verify(len(tokens) + 1), cost.t_draft(drafted)
        if verify is None or spent is None:  # (not timed yet: as _handing_pays)
            return True
        return self.links[0].policy.keep_after(len(offered), key, len(tokens), verify + spent, expected, reach) > 0

    def _ahead(self, links: Sequence[Link]) -> float:
        """The tokens a round is expected to yield up to a part's own: the target's, and those of the parts before
        it (links), each passing at its part's estimate once all before it pass."""
        ahead, reach = 1.0, 1.0
        for a in (a for x in links for a in x.policy.keyed(x.key).acceptances(x.n)):
            reach *= a
            ahead += reach
        return ahead

    def _lead_check(self, r, link: Link, decision, j: int, behind: int, read_s: float) -> int | None:
        """Where the plan has prompt lookup go alone this round (its first j tokens, the draft model drafting none):
        whether the draft model drafts its first token first, to check lookup's (ConfidenceStop.check). Where the
        two agree the round goes on to lookup's continuation after it (_tail); else the draft model drafts on by its
        confidence (behind: the tokens the draft model must read first). Returns lookup's first token where it
        checks, else None. Counted over the recorded texts, the
        target took lookup's first token 95-97% of the time where the draft model would have drafted it too, and
        4-6% where it would not (docs/performance.md, 2026-12-06, midday): a lead that fails at its first token is
        mostly one the draft model would have told apart.

        Priced as the hand-off's check is (_checked): the verify rows j + 1 .. of the round, wasted with the chance
        that lookup's first token fails (its kind's a_0, times what the text has shown: text_factor), against the
        draft step less the reading of that token it spares the draft model later; but at LEAD_CHECK_SHARE of that
        step, since the rows are the least of what a failing lead costs: where the two disagree the round becomes
        the draft model's own, which yields more than the one token a failed lead does. Rounds by cost only, greedy
        or sampled alike (the draft's token is drawn as it would be and compared with lookup's, never with the
        target's), where the draft model has at most CHECK_BEHIND tokens to read first (more: text it stood aside
        from, a reading of its own). Replayed (F16 pair, 8 seeds, 2% noise; docs/performance.md, 2026-12-07,
        session five), the built-in passages rose from 0.877 to 0.969 of the draft model alone per token with the
        Q4_0 draft, where lookup's matches of the passage had been followed and failed at their first token; over
        the Q4_0 draft's 17 settings the hybrid's categories short of its better part went from 48 to 33 of 207 per
        token and 58 to 49 end to end, over the default seven (the Q4_K_M draft) 13 to 8 and 25 to 26 of 83. At the
        full step (a share of 1) 36 and 51, 10 and 26; at 2, 46 and 55, 12 and 28; at 0 (every such round checked)
        as at 0.25.

        Where lookup's offer (up to the round's length) ends with the copied turn or runs fewer than 1 +
        HAND_OFF_ROWS tokens (or the round's room: _runs_on), an agreed first token would hand the round to a copy
        that cannot carry it (an answer that quotes a question up to its "?"): there the caller (Chain._split) makes
        the round the draft model's own, unchecked. Replayed with the Q4_0 draft (17 settings), the categories short
        of the better part went from 29 to 22 of 207 per token and 49 to 44 end to end, passages and factual answers
        most (docs/performance.md, 2026-12-07, session six)."""
        lead, c = self.links[0], link.policy.cost
        if decision.reason not in ("cost", "explore") or r.guide is not None or self.tree_width > 1 or \
                not self._measures(link, decision) or behind > CHECK_BEHIND:
            return None
        plain, rows, step = c.t_verify(1), c.t_verify(j + 1), link.policy.step_s or c.t_draft(1)
        if plain is None or rows is None or step is None or c.best_k(1)[1] is None:  # (else no ConfidenceStop)
            return None
        a = lead.policy.keyed(lead.key).acceptances(1)[0] * lead.policy.text_factor()
        return r.tokens[lead.start] if (1 - a) * (rows - plain) >= LEAD_CHECK_SHARE * (step - read_s) else None

    @staticmethod
    def _runs_on(copy: Sequence[int], r: int, part) -> bool:
        """Whether prompt lookup's copy runs on: r tokens or more, and not ending with the copied turn
        (PromptLookupProposer._copy stops at the turn's end: with the turn's closing and its end-of-generation token,
        or before a closing that does not pass; turn_end)."""
        turn_end = getattr(part, "turn_end", None)
        return len(copy) >= r and copy[-1] not in getattr(part, "ends", ()) and \
            (turn_end is None or turn_end(copy) is None)

    @staticmethod
    def _checked(tail: float, rows_s: float, step_s: float, read_s: float) -> bool:
        """Whether a hand-off waits for the draft model's next token to agree with lookup's (ConfidenceStop.agrees):
        where the verify rows a wrong continuation would waste (rows_s: those _hand_off prices, wasted with the
        chance 1 - tail) are expected to cost more than the draft step that checks it, less the reading of that
        token the step spares the draft model later."""
        return (1 - tail) * rows_s >= step_s - read_s

