"""Proposers draft tokens for the target to verify. The engine sees only this interface.

A proposer returns new tokens only (never the context it was given) and, when it sampled them, the distributions
q it sampled from; q = None means a deterministic proposal (one-hot). It hears back how many were accepted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from ..sampling import SamplingConfig


@dataclass
class Proposal:
    tokens: list[int]
    q: np.ndarray | None = None  # (len(tokens), n_vocab) or None


EMPTY = Proposal([])


class Proposer(Protocol):
    def begin(self, seq: Sequence[int]) -> None:
        """A generation starts from seq: do its prompt work now (e.g. prefill a draft cache), not in round one."""

    def propose(self, seq: Sequence[int], k: int, sampling: SamplingConfig, rng: np.random.Generator) -> Proposal:
        """Up to k tokens to follow seq (the whole text so far, prompt included)."""

    def accepted(self, n_accepted: int) -> None:
        """How many tokens of the last proposal the target accepted."""

    def llama_seconds(self) -> float:
        """Time this proposer has spent inside llama.cpp so far (0 for proposers without a model)."""

    def close(self) -> None:
        """Free what the proposer holds."""


from .draft_model import DraftModelProposer  # noqa: E402

__all__ = ["Proposal", "Proposer", "DraftModelProposer", "EMPTY"]
