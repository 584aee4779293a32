"""Who drafts how much in a round of one generation: the proposer chain, each part's draft-length policy, and what
each part hears back after verification. The engine only asks a Chain for a proposal and tells it what passed.

A proposer may be a chain of parts (`proposer.parts`, e.g. the hybrid: prompt lookup, then the draft model). Each
part has its own policy (tuning.DraftLength), fed its own costs and acceptance; in a round each part in turn
proposes from where the earlier ones stopped, up to the round length its own policy wants. Policies belong to the
engine (Drafting) and outlive a generation: what they learned carries across texts and per-call limits.
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .proposers import EMPTY, Proposal, Proposer
from .sampling import SamplingConfig
from .stats import GenerationStats
from .tuning import CostModel, Decision, DraftLength


def parts(proposer: Proposer) -> Sequence[Proposer]:
    """The chain a proposer stands for: its parts, or itself alone."""
    return getattr(proposer, "parts", None) or (proposer,)


class Drafting:
    """An engine's draft-length policies, one per proposer (or part of a chain), sharing the target's verify costs
    (the same whoever drafts); acceptance and draft costs are each proposer's own."""

    def __init__(self, draft_max: int, adaptive: bool, cost: CostModel) -> None:
        self.draft_max, self.adaptive, self.cost = draft_max, adaptive, cost
        self._policies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def policy(self, proposer: Proposer) -> DraftLength:
        if proposer not in self._policies:
            shared = self.cost if not self._policies else CostModel(verify_s=self.cost.verify_s)
            self._policies[proposer] = DraftLength(self.draft_max, self.adaptive, shared)
        return self._policies[proposer]

    def chain(self, proposer: Proposer, k_max: int | None, adaptive: bool | None) -> "Chain":
        """This generation's chain; k_max and adaptive: this call's limits (None: the policies' own)."""
        return Chain(proposer, [_Link(p, self.policy(p)) for p in parts(proposer)], k_max, adaptive)


@dataclass
class _Link:
    part: Proposer
    policy: DraftLength
    start: int = 0  # where this part's tokens begin in the round's proposal
    n: int = 0  # how many it proposed this round
    key: object = None
    seconds: float = 0.0


class Chain:
    def __init__(self, proposer: Proposer, links: list[_Link], k_max: int | None, adaptive: bool | None) -> None:
        self.proposer, self.links = proposer, links
        self.k_max, self.adaptive = k_max, adaptive
        self._used: list[_Link] = []

    @property
    def measures(self) -> bool:
        """Whether any part decides by measured cost this call (then the target's verify curve is needed)."""
        return any(link.policy.adaptive if self.adaptive is None else self.adaptive for link in self.links)

    def begin(self, seq: Sequence[int]) -> None:
        for link in self.links:
            link.policy.new_text()
        self.proposer.begin(seq)

    def propose(self, seq: list[int], cap: int, sampling: SamplingConfig, rng: np.random.Generator,
                stats: GenerationStats) -> tuple[Proposal, str]:
        """Each part proposes in turn from where the earlier ones stopped, up to the round length its own policy
        wants; returns the joint proposal and the decisions' reasons (for the round's record)."""
        self._used = []
        if cap <= 0:
            return EMPTY, "fixed"
        tokens: list[int] = []
        qs: list[np.ndarray | None] = []
        sources: list[str] = []
        sampled = False
        reasons = []
        for link in self.links:
            policy = link.policy
            decision = policy.decide(cap, self.k_max, self.adaptive) if len(tokens) < cap else Decision(0, "full")
            reasons.append(decision.reason)
            if decision.reason == "fallback" and decision.why:
                stats.fallbacks.append({"round": stats.n_rounds, "why": decision.why})
            if decision.reason not in ("free", "fixed") and len(self._used) == 1 and decision.k > 0:
                lead = self._used[0]
                if policy.alone_is_better(decision.k, lead.policy.keyed(lead.key), lead.n):
                    # this part's own draft is expected to do better than following the earlier one's
                    tokens, qs, sources, self._used, sampled = [], [], [], [], False
                    reasons[0] = "dropped"
            k = decision.k - len(tokens)
            if k <= 0:
                continue
            t0 = time.perf_counter()
            prop = link.part.propose(seq + tokens if tokens else seq, k, sampling, rng)
            link.seconds = time.perf_counter() - t0
            link.start, link.key = len(tokens), prop.key
            link.n = policy.keep(len(prop.tokens), prop.key) if decision.reason == "free" else len(prop.tokens)
            self._used.append(link)
            tokens += prop.tokens[:link.n]
            sources += prop.sources[:link.n]
            qs += list(prop.q[:link.n]) if prop.q is not None else [None] * link.n
            sampled = sampled or prop.q is not None
        return Proposal(tokens, qs if sampled else None, sources), "+".join(reasons) or "fixed"

    def accepted(self, n: int) -> None:
        """n tokens of the round's proposal passed: each part that proposed hears its own share."""
        for link in self._used:
            tested = n >= link.start  # every token before this part's passed
            passed = min(link.n, n - link.start) if tested else 0
            link.part.accepted(passed)
            link.policy.observe(link.n, passed if tested else None, link.seconds, link.key)

    def llama_seconds(self) -> float:
        return self.proposer.llama_seconds()
