"""Proposers draft tokens for the target to verify. The engine sees only this interface.

A proposer returns new tokens only (never the context it was given) and, when it sampled them, the distributions
q it sampled from; q = None means a deterministic proposal (one-hot). It hears back how many were accepted.
A proposer with `parts` is a chain: the engine runs each part with its own draft-length policy (see engine.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from ..sampling import SamplingConfig


@dataclass
class Proposal:
    tokens: list[int]
    # q[i]: the distribution tokens[i] was drawn from, or None for a deterministic (one-hot) proposal;
    # q itself is None when every row is one-hot.
    q: Sequence[np.ndarray | None] | None = None
    sources: list[str] = field(default_factory=list)  # who proposed each token: "draft", "lookup"
    # What kind of proposal this is, for acceptance kept apart by kind (a lookup's match length); None: one kind.
    key: object = None
    # A verification tree (tree.py): node i's parent (-1: the text's last token); None: a chain
    parents: list[int] | None = None
    # A draft model's second choice at each drafted position, drawn without the token it drafted, and the q that
    # choice was drawn from (None: greedy), for a verification tree's sibling leaves; None: not asked for
    alternatives: list[tuple[int, np.ndarray | None]] | None = None
    # A draft model's branch: the position whose second choice heads it, the tokens drafted after that choice, and
    # their q (None: greedy); None: no branch
    branch: tuple[int, list[int], list[np.ndarray] | None] | None = None


EMPTY = Proposal([])


class Proposer(Protocol):
    def begin(self, seq: Sequence[int]) -> None:
        """A generation starts from seq: do its prompt work now (e.g. prefill a draft cache), not in round one."""

    def propose(self, seq: Sequence[int], k: int, sampling: SamplingConfig, rng: np.random.Generator,
                guide=None) -> Proposal:
        """Up to k tokens to follow seq (the whole text so far, prompt included). guide (a guide.Guide, given only
        when the output is constrained or penalised) shapes a model's logits as the target's are shaped: draft
        under it (push each drafted token, pop them all before returning). Proposals that ignore it are cut where
        the grammar forbids."""

    def accepted(self, n_accepted: int) -> None:
        """How many tokens of the last proposal the target accepted."""

    def llama_seconds(self) -> float:
        """Time this proposer has spent inside llama.cpp so far (0 for proposers without a model)."""

    def close(self) -> None:
        """Free what the proposer holds."""


class WithoutModel:
    """What a proposer with no model of its own does between proposals: nothing to read, free, or time."""

    def begin(self, seq: Sequence[int]) -> None:
        pass

    def accepted(self, n_accepted: int) -> None:
        pass

    def llama_seconds(self) -> float:
        return 0.0

    def close(self) -> None:
        pass


from .draft_model import DraftModelProposer  # noqa: E402
from .grammar import GrammarProposer  # noqa: E402
from .hybrid import HybridProposer  # noqa: E402
from .prompt_lookup import PromptLookupProposer  # noqa: E402

__all__ = ["Proposal", "Proposer", "DraftModelProposer", "PromptLookupProposer", "HybridProposer", "GrammarProposer",
           "EMPTY"]
