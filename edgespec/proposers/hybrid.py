"""Prompt lookup first; the draft model fills what is left of the round.

The engine runs the two as a chain (`parts`), each with its own draft-length policy: lookup, free to ask, offers
its match; the draft model's policy then keeps j of lookup's tokens and drafts f of its own after them, whichever
split (lookup alone, the draft model alone, both, or neither) is expected to cost least per token, from the
acceptance measured for each (lookup's by match length). propose() here is the same chain with a fixed budget, for
callers that drive a proposer by hand.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..sampling import SamplingConfig
from . import Proposal
from .prompt_lookup import PromptLookupProposer


class HybridProposer:
    def __init__(self, draft, lookup=None) -> None:
        self.draft = draft
        self.lookup = lookup if lookup is not None else PromptLookupProposer()
        self.parts = (self.lookup, self.draft)

    def begin(self, seq: Sequence[int]) -> None:
        self.lookup.begin(seq)
        self.draft.begin(seq)

    def propose(self, seq: Sequence[int], k: int, sampling: SamplingConfig, rng: np.random.Generator,
                guide=None) -> Proposal:
        a = self.lookup.propose(seq, k, sampling, rng)
        if guide is not None:  # cut where the grammar forbids
            n = guide.allowed_prefix(a.tokens)
            a = Proposal(a.tokens[:n], None, a.sources[:n], a.key)
        if len(a.tokens) >= k:
            return a
        pushed = 0
        try:
            if guide is not None:
                for t in a.tokens:
                    guide.push(t)
                    pushed += 1
            b = self.draft.propose([*seq, *a.tokens], k - len(a.tokens), sampling, rng, guide=guide)
        finally:
            if pushed:
                guide.pop(pushed)
        q = None if b.q is None else [None] * len(a.tokens) + list(b.q)
        return Proposal(a.tokens + b.tokens, q, a.sources + b.sources)

    def accepted(self, n_accepted: int) -> None:
        self.lookup.accepted(n_accepted)
        self.draft.accepted(n_accepted)

    def llama_seconds(self) -> float:
        return self.draft.llama_seconds()

    def close(self) -> None:
        self.lookup.close()
        self.draft.close()
