"""The tokens a grammar forces: where it allows one continuation (JSON punctuation, a schema's keys), that text is
proposed at no cost. The target still verifies it (it is always accepted: the mask leaves nothing else)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..sampling import SamplingConfig
from . import Proposal, WithoutModel


class GrammarProposer(WithoutModel):
    def propose(self, seq: Sequence[int], k: int, sampling: SamplingConfig, rng: np.random.Generator,
                guide=None) -> Proposal:
        tokens = guide.forced()[:k] if guide is not None and k > 0 else []
        return Proposal(tokens, None, ["grammar"] * len(tokens), key="grammar")
