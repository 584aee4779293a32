"""One generation's rounds of proposals from a chain of proposers (drafting.py owns their policies): each part
proposes in turn from where the earlier ones stopped, up to what its own policy wants; behind a free part (prompt
lookup), a part that costs time plans the round by expected gain (DraftLength.plan); a draft model's second choices
and branch become a verification tree's leaves (chain_trees.py), and a draft model may hand its round on to
lookup's continuation of its tokens (chain_handoff.py); when each part reads the text is chain_reading.py's. After
verification each part hears its share, and a part that drafted at a cost hears how the round turned out against
what was expected (DraftLength.outcomes).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .backend import common_prefix
from .chain_handoff import HAND_OFF_ROWS, ChainHandOff
from .chain_reading import ChainReading, _behind
from .chain_trees import ChainTrees
from .costs import CATCH_UP_HORIZON
from .proposers import EMPTY, DraftModelProposer, Proposal, Proposer
from .sampling import SamplingConfig
from .stats import GenerationStats
from .tree import Tree
from .tuning import Decision, DraftLength


@dataclass
class Link:
    part: Proposer
    policy: DraftLength
    start: int = 0  # where this part's tokens begin in the round's proposal
    n: int = 0  # how many it proposed this round
    key: object = None
    seconds: float = 0.0
    offered: list[int] | None = None  # a free part: all it proposed this round, kept or not (it learns from all)
    tree: Tree | None = None  # what it proposed, where that was a tree
    alternatives: list | None = None  # a draft model's second choice at each of its n positions (and its q)
    branch: tuple | None = None  # a draft model's branch after one of them (Proposal.branch)
    stop: object = None  # a draft model's ConfidenceStop this round (its confidence in each token it drafted)
    refused: tuple[int, float] | None = None  # greedy: the token its confidence refused after its n, and that confidence
    asked: int = 0  # a round by cost whose first token fell under the draft's floor: the most it was asked to draft


@dataclass
class _Round:
    """One call of Chain.propose: its arguments, and the proposal as the parts build it (the tokens so far, their q
    and proposers, the decisions' reasons, the tokens pushed to the guide, what the parts that draft are expected
    to spend reading text they missed and on steps whose tokens they did not keep)."""
    seq: list[int]
    cap: int
    sampling: SamplingConfig
    rng: np.random.Generator
    stats: GenerationStats
    guide: object = None
    tokens: list[int] = field(default_factory=list)
    qs: list[np.ndarray | None] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    sampled: bool = False  # whether any part's tokens came with q
    pushed: int = 0
    reading: float = 0.0

    def add(self, prop: Proposal, n: int) -> None:
        """A part's first n tokens join the proposal (and the guide, up to an end of generation)."""
        self.tokens += prop.tokens[:n]
        self.sources += prop.sources[:n]
        self.qs += list(prop.q[:n]) if prop.q is not None else [None] * n
        self.sampled = self.sampled or prop.q is not None
        if self.guide is not None:
            for t in prop.tokens[:n]:
                if self.guide.is_eog(t):
                    break
                self.guide.push(t)
                self.pushed += 1

    def cut(self, j: int) -> None:
        """Only the first j tokens stay (and in the guide)."""
        del self.tokens[j:], self.sources[j:], self.qs[j:]
        if self.pushed > j:
            self.guide.pop(self.pushed - j)
            self.pushed = j


class Chain(ChainTrees, ChainHandOff, ChainReading):
    def __init__(self, links: list[Link], k_max: int | None, adaptive: bool | None, tree_width: int = 1) -> None:
        self.links, self.k_max, self.adaptive, self.tree_width = links, k_max, adaptive, tree_width
        self._used: list[Link] = []
        self._offers: list[Link] = []  # free parts that proposed this round: they learn from the verified tokens
        self._leaves: tuple[Link, int, set[int]] | None = None  # second choices verified as leaves: whose, the
        # chain's length, and the positions they stand at
        self._t0 = 0.0  # when the round's proposal began
        self._text: list[int] = []  # the text the round's proposal continues
        self._expected: tuple[list[Link], float, float] | None = None  # the parts that drafted at a cost, and the
        # round's expected seconds and tokens (a chain's round; Outcomes)

    @property
    def measures(self) -> bool:
        """Whether any part decides by measured cost this call (then the target's verify curve is needed)."""
        return any(link.policy.adaptive if self.adaptive is None else self.adaptive for link in self.links)

    @property
    def reads_prompt(self) -> bool:
        """Whether a part has prompt work to do before it can propose (a draft model's cache)."""
        return any(isinstance(link.part, DraftModelProposer) for link in self.links)

    def propose(self, seq: list[int], cap: int, sampling: SamplingConfig, rng: np.random.Generator,
                stats: GenerationStats, guide=None, rows: int | None = None) -> tuple[Proposal, str]:
        """Each part proposes in turn from where the earlier ones stopped, up to the round length its own policy
        wants; returns the joint proposal and the decisions' reasons (for the round's record). With a guide, the
        parts draft under it (deterministic proposals are cut where the grammar forbids), and it is left as it
        was. cap: the most tokens deep (max_tokens, the context); rows: the most tokens in all, a tree's included
        (the context's room; default cap)."""
        rows = cap if rows is None else rows
        self._read_late(seq, cap, stats)
        self._used, self._offers, self._leaves, self._expected = [], [], None, None
        self._check = None  # lookup's first token, where the draft model's first is to check it (_lead_check)
        self._t0, self._text = time.perf_counter(), seq
        for link in self.links:
            link.tree = link.alternatives = link.branch = link.offered = link.stop = link.refused = None
            link.asked = 0
        if cap <= 0:
            return EMPTY, "fixed"
        first = None  # a lone free proposer that can offer a tree does, where the output is not constrained
        if self.tree_width > 1 and len(self.links) == 1 and guide is None and hasattr(self.links[0].part,
                                                                                      "propose_tree"):
            first = self.links[0].policy.decide(cap, self.k_max, self.adaptive)
            if first.reason == "free":
                prop = self._tree(self.links[0], seq, first.k, rows)
                return prop, "free" if prop.parents is None else "tree"
        r = _Round(seq, cap, sampling, rng, stats, guide)
        try:
            for link in self.links:
                self._turn(r, link, first)
            if guide is None and self.tree_width == 1:
                n = self._tail(seq, r.tokens, min(cap, rows), r.reading)
                if n:
                    r.sources += ["lookup"] * n
                    r.qs += [None] * n
                    r.reasons.append("tail")
        finally:
            if r.pushed:
                guide.pop(r.pushed)
        tokens, qs, sources, reasons = r.tokens, r.qs if r.sampled else None, r.sources, r.reasons
        extra = self._second_choices(tokens, rows)
        if not extra:  # (a round with a tree's leaves is not judged against the chain's expectation)
            self._expected = self._expectation(len(tokens), r.reading)
            return Proposal(tokens, qs, sources), "+".join(reasons) or "fixed"
        leaves, parents = extra
        return Proposal(tokens + [t for t, _ in leaves], qs + [q for _, q in leaves] if qs is not None else None,
                        sources + ["draft"] * len(leaves), parents=list(range(-1, len(tokens) - 1)) + parents
                        ), "+".join(reasons + ["tree"] + (["branch"] if self._leaves[3] else []))

    def _turn(self, r: _Round, link: Link, first: Decision | None) -> None:
        """One part's turn: its policy's decision (a probe whose reading would cost more than it can repay waits),
        behind a free lead the plan's split of the round (_split), then its proposal (_draft)."""
        policy, stats = link.policy, r.stats
        behind_free = len(self._used) == 1 and self._used[0].policy.free
        decision = first if first is not None else \
            policy.decide(r.cap, self.k_max, self.adaptive, planned=behind_free) \
            if len(r.tokens) < r.cap or behind_free else Decision(0, "full")
        if decision.reason == "probe" and self._probe_too_dear(link, r.seq, r.cap):
            policy.defer_probe()
            decision = Decision(0, "fallback")
        r.reasons.append(decision.reason)
        if decision.reason == "fallback" and decision.why:
            stats.fallbacks.append({"round": stats.n_rounds, "why": decision.why})
        k, most = decision.k - len(r.tokens), 0  # most: behind a free part, the most this part may draft where its
        # confidence decides
        if behind_free and decision.k > 0 and decision.reason not in ("fixed", "free"):
            k, most = self._split(r, link, decision)
        if k <= 0 or (r.guide is not None and r.tokens and r.guide.is_eog(r.tokens[-1])):
            return
        self._draft(r, link, decision, k, most if behind_free else None)

    def _split(self, r: _Round, link: Link, decision: Decision) -> tuple[int, int]:
        """Behind the free lead: keep j of its tokens and draft f after them, whichever split (or this part alone,
        or the lead alone) is expected to cost least per token (DraftLength.plan); the lead's tokens past j leave
        the round. Returns (f, the most this part may draft where its confidence decides).

        Learning rounds (warm-up, probe) draft >= 1 where the lead offers nothing (a probe waits for such a round).
        An explore round drafts one more than the plan where the plan drafts at all: forced drafting beside the
        lead's tokens would pay for what the lead does better (and for catching up on its tokens), which on copied
        text cost more than the hybrid gained. Where the plan has the lead go alone, the draft model may first check
        the lead's first token with its own (_lead_check)."""
        policy, lead, cap = link.policy, self._used[0], r.cap
        learning = decision.reason in ("warm-up", "probe") and lead.n == 0
        k_max = min(cap, policy.k_max if self.k_max is None else self.k_max)
        limit = decision.k if learning else k_max
        read_s = getattr(link.part, "read_s", None) or 0.0  # a model must first read what it missed
        behind = _behind(link.part, r.seq)  # (priced by read_s; with none yet, reading costs the plan nothing)
        j, k = policy.plan(limit, lead.policy.keyed(lead.key), lead.n, least=int(learning), behind=behind,
                           read_s=read_s, horizon=max(1, min(CATCH_UP_HORIZON, cap)), first=lead.policy.text_factor())
        if decision.reason == "explore" and k > 0 and j + k < limit:
            k += 1
        most = 0
        if learning and decision.reason == "probe":  # (a probe's length: its confidence's, in _draft)
            most = k_max - j
        if not learning and k > 0:
            policy.drafting_planned()
            most = limit - j
        elif not learning and lead.n == 0:  # declined where it alone could have drafted: a verdict
            why = policy.declined()
            if why:
                r.stats.fallbacks.append({"round": r.stats.n_rounds, "why": why})
        if not learning and k == 0 and j > 0:  # lookup alone: its first token checked by the draft model's first?
            self._check = self._lead_check(r, link, decision, j, behind, read_s)
            if self._check is not None:
                j, k, most = 0, limit, limit
                if not self._runs_on(lead.offered or [], min(1 + HAND_OFF_ROWS, limit), lead.part):
                    self._check = None  # a copy that ends: the draft model's own round (_lead_check)
        if j < lead.n:
            r.cut(j)
            lead.n = j
            if j == 0:
                self._used, r.sampled = [], False
                r.reasons[0] = "dropped" if self._check is None else "checked"
        return k, most

    def _draft(self, r: _Round, link: Link, decision: Decision, k: int, most: int | None) -> None:
        """This part proposes k tokens after the round's so far, which its tokens join. A draft model drafting by
        measured cost goes as far as its confidence pays (ConfidenceStop): up to `most` behind a free lead (None:
        it leads), and may hand the rest of the round to lookup's continuation of its tokens (_hand_off)."""
        policy, guide, cap = link.policy, r.guide, r.cap
        t0 = time.perf_counter()
        context = r.seq + r.tokens if r.tokens else r.seq
        per_read = getattr(link.part, "read_s", None)  # a model's reading, priced as its plan prices it
        behind = _behind(link.part, context) if per_read else 0
        r.reading += behind * per_read if behind > 1 else 0.0
        leaves = self.tree_width > 1 and guide is None and isinstance(link.part, DraftModelProposer)  # a tree's
        if not leaves and self._measures(link, decision):
            reach = 1.0
            for a in self._accept():
                reach *= a
            link.stop = policy.confidence_stop(len(r.tokens) + 1, reach, self._confident(link, decision),
                                               least=int(decision.reason == "probe"))
            if link.stop is not None and link.stop.active:  # the draft's confidence decides how far
                k = most if most is not None else \
                    min(cap, policy.k_max if self.k_max is None else self.k_max) - len(r.tokens)
            if link.stop is not None:
                link.stop.most = k
                if self._check is not None:  # (its first token kept whatever its confidence: it is the check)
                    link.stop.check, link.stop.least = self._check, max(link.stop.least, 1)
                if link.stop.active and guide is None and decision.reason in ("cost", "explore"):
                    link.stop.hand_off = self._hand_off(r.seq, r.tokens, link)  # lookup may copy the rest
        stop = {"stop": link.stop} if link.stop is not None else {}
        prop = link.part.propose(context, k, r.sampling, r.rng, guide=guide, **stop) if guide is not None else \
            link.part.propose(context, k, r.sampling, r.rng, alternatives=True,
                              branch=self._branching(link, len(r.tokens), k)) if leaves else \
            link.part.propose(context, k, r.sampling, r.rng, **stop)
        # what drafting this many costs, without catching up on text decoded while the part stood aside,
        # drafting a branch, or the step whose token it did not keep (which the round's expectation counts,
        # as it counts the reading: a round ended by the draft's doubt costs that step beside T_d(n))
        if getattr(link.part, "step_s", None) is not None:  # (until it has timed one: the profile's)
            policy.step_s = link.part.step_s
        refused = getattr(link.part, "refused_s", 0.0)
        r.reading += refused
        link.seconds = time.perf_counter() - t0 - getattr(link.part, "catch_up_s", 0.0) - refused - \
            (getattr(link.part, "branch_s", 0.0) if leaves else 0.0)
        n = len(prop.tokens)
        if guide is not None and prop.q is None:
            n = guide.allowed_prefix(prop.tokens)  # past that the target would reject them for certain
        link.start, link.key = len(r.tokens), prop.key
        link.n = n
        if getattr(link.part, "p_min", 0.0) > 0 and decision.reason in ("cost", "explore", "warm-up", "probe"):
            floored = not n and link.part.floored
            policy.floored(floored, decision.reason == "warm-up")
            if floored and most is not None and decision.reason in ("cost", "explore"):
                link.asked = k  # behind a free lead, whose plan knows no floor: judged as the round it chose
        if link.stop is not None and n == len(prop.tokens):  # (a token the grammar cut is not the refused's)
            link.refused = getattr(link.part, "refused", None)
        if decision.reason == "free":  # verify what pays; learn from all of it (accepted())
            link.offered, link.n = prop.tokens[:n], policy.keep(n, prop.key, recheck_every=0)
            self._offers.append(link)
        self._used.append(link)
        if prop.alternatives is not None:
            link.alternatives = prop.alternatives[:link.n]
            link.branch = prop.branch if prop.branch and prop.branch[0] < link.n else None
        r.add(prop, link.n)

    def _measures(self, link: Link, decision: Decision) -> bool:
        """A draft model drafting by measured cost this round (not a fixed length)."""
        adaptive = link.policy.adaptive if self.adaptive is None else self.adaptive
        return adaptive and isinstance(link.part, DraftModelProposer) and \
            decision.reason not in ("fixed", "free", "full")

    def _confident(self, link: Link, decision: Decision) -> bool:
        """Its confidence decides where the round stops (ConfidenceStop), up to the most it may draft: a round by
        cost or a probe (whose verdict is on drafting as rounds by cost would draft; at least one token), not a
        warm-up (its length is what it measures)."""
        return self._measures(link, decision) and decision.reason in ("cost", "explore", "probe") and \
            self.tree_width == 1

    def _expectation(self, n: int, reading: float) -> tuple[list[Link], float, float] | None:
        """A chain's round of n tokens where a part drafted at a cost: those parts, and what the cost model expects
        the round to take (verify, drafting, reading) and to yield (E[N]); None where nothing drafted at a cost."""
        drafters, lengths = [x for x in self._used if x.n and not x.policy.free], {}
        if not drafters:
            # Behind a free lead, a draft model the plan chose whose first token then fell under its confidence
            # floor (--draft-p-min, which the plan does not price; a draft model alone prices it: DraftLength.
            # floor_rate): a round judged against the one the plan chose (its `asked` tokens). Left out, such
            # rounds never counted against drafting, and the plan, trusting the acceptance of the tokens the draft
            # did draft, chose it round after round (SmolLM2 over a 2 ms link with a floor of 0.5, replayed: the
            # hybrid 0.66x of plain, 1.03x so). Refusals by the cost-priced ConfidenceStop are not counted: replayed,
            # counting them too (here, or in the rate) cost 1-4% on code and math, where drafting pays.
            drafters = [x for x in self._used if x.asked and not x.policy.free][:1]
            if not drafters:
                return None
            lengths = {id(drafters[0]): drafters[0].asked}
        verify = drafters[0].policy.cost.t_verify(n + sum(lengths.values()) + 1)
        drafting = [x.policy.cost.t_draft(lengths.get(id(x), x.n)) for x in drafters]
        if verify is None or None in drafting:
            return None
        tokens, reach = 1.0, 1.0
        for a in self._accept(lengths):
            reach *= a
            tokens += reach
        return drafters, verify + sum(drafting) + reading, tokens

    def _accept(self, lengths: dict[int, int] | None = None) -> list[float]:
        """The chance each position of the round's chain passes, its earlier ones passed: each part's own estimate
        (lengths: a part's tokens as the plan asked for them, by id, in place of those it drafted)."""
        lengths = lengths or {}
        return [a for x in self._used for a in x.policy.keyed(x.key).acceptances(lengths.get(id(x), x.n))]

    def accepted(self, n: int, verified: Sequence[int] | None = None, path: Sequence[int] | None = None) -> None:
        """n tokens of the round's proposal passed: each part that proposed hears its own share. verified: the
        round's tokens as verification chose them (the n accepted, then the target's own); a free part learns from
        them how much of all it offered would have passed, kept for verification or not (cut by its own estimate
        or by the plan), so an estimate that declines a kind of proposal is still corrected by the text (it would
        never be, otherwise: what is declined is never tested). For a token the round did not verify this is as
        good as verifying it: the target's token there is drawn from its own distribution, which a proposed token
        matches with the chance verification would have accepted it. path: the accepted nodes of a tree."""
        if verified is not None:  # the text as this round leaves it, for a part that learns from it (lookup)
            for link in self.links:
                if hasattr(link.part, "heard"):
                    link.part.heard(self._text, verified)
        if self._expected is not None:  # a chain's round: n + 1 tokens, in the time since the proposal began
            drafters, seconds, tokens = self._expected
            for link in drafters:
                link.policy.outcomes.observe(seconds, tokens, time.perf_counter() - self._t0, n + 1)
        if self._leaves is not None:  # the chain passed up to n; a second choice there may have passed instead
            link, n_chain, at, fork = self._leaves
            n = sum(1 for node in path if node < n_chain)
            leaf = len(path) > n
            if n in at:
                link.policy.alternatives.observe_tries(1, leaf)
            if fork is not None:  # the draft's cache keeps the branch's tokens on the path
                link.part.keep_branch(len(path) - n if leaf and path[n] == fork[1] else 0)
        for link in self._used:
            if link.tree is not None:  # path: the tree's accepted nodes (a chain's first n)
                link.part.accepted(n)
                link.policy.observe_tree(link.tree, range(n) if path is None else path, link.seconds, link.key)
                continue
            tested = n >= link.start  # every token before this part's passed
            passed = min(link.n, n - link.start) if tested else 0
            link.part.accepted(passed)
            if link.stop is not None and tested:
                at = link.start + link.n  # a refused token's outcome: is it the target's token there (greedy)
                refused = None if link.refused is None or verified is None or at >= len(verified) else \
                    (link.refused[1], link.refused[0] == verified[at])
                link.policy.calibration.observe(link.stop.confidence[:link.n], passed, refused)
            if link.offered is None or verified is None:
                link.policy.observe(link.n, passed if tested else None, link.seconds, link.key)
        for link in self._offers:
            if verified is None or n < link.start:  # (an earlier part's token failed: its text never came)
                if verified is not None:
                    link.policy.observe(len(link.offered), None, link.seconds, link.key)
                continue
            offered, known = link.offered, verified[link.start:]
            m = common_prefix(offered, known)
            d = min(len(offered), len(known))
            # a mismatch at m: positions 0..m tested, m failed; else all that could be compared passed
            link.policy.observe(len(offered) if m < d else d, m, link.seconds, link.key)

    def llama_seconds(self) -> float:
        return sum(link.part.llama_seconds() for link in self.links)
