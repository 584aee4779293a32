"""Draft with a small model of the same vocabulary, K tokens one at a time."""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from ..backend import Context
from ..sampling import SamplingConfig, probabilities, sample
from ..tree import without
from . import Proposal


class DraftModelProposer:
    def __init__(self, ctx: Context, target_n_vocab: int, p_min: float = 0.0) -> None:
        self.ctx = ctx
        # Reading text it has not seen (what it skipped while it stood aside, what an earlier part of a chain
        # proposed), apart from drafting: the seconds the last propose() spent on it, and a running average per
        # token. The draft-length policy prices drafting without it, and a chain's plan adds it where it applies.
        self.catch_up_s = 0.0
        self.read_s: float | None = None
        self.n_vocab = target_n_vocab  # q rows are cut or padded to the target's vocab so p - q lines up
        self.p_min = p_min  # stop drafting when the draft's own top probability falls below this (0 = never)

    def behind(self, seq: Sequence[int]) -> int:
        """Tokens of seq, before its last, that this model has not read: what a proposal from seq reads first."""
        return len(seq) - 1 - self.ctx.common_prefix(seq[:-1])

    def begin(self, seq: Sequence[int]) -> None:
        if len(seq) <= self.ctx.n_ctx:
            self.ctx.sync(seq[:-1])

    def propose(self, seq: Sequence[int], k: int, sampling: SamplingConfig, rng: np.random.Generator,
                guide=None, alternatives: bool = False) -> Proposal:
        """alternatives: also a second choice at each position (Proposal.alternatives), for a verification tree:
        greedy, the best token other than the one drafted; sampling, a draw from q without it (tree.without),
        which is the q that choice carries."""
        k = min(k, self.ctx.n_ctx - len(seq) + 1)  # seq plus k-1 drafted tokens must fit in the draft's cache
        if k <= 0:
            return Proposal([])
        t0 = time.perf_counter()
        behind = self.ctx.sync(seq[:-1])  # seq[-1] is decoded afresh each round: its logits start the draft
        self.catch_up_s = time.perf_counter() - t0 if behind > 1 else 0.0  # one: the last round's own draft
        if behind > 1:
            per = self.catch_up_s / behind
            self.read_s = per if self.read_s is None else self.read_s + 0.2 * (per - self.read_s)
        logits = self.ctx.decode(seq[-1:], [0])[0]
        tokens: list[int] = []
        qs: list[np.ndarray] = []
        alts: list[tuple[int, np.ndarray | None]] = []
        model = self.ctx.model
        pushed = 0
        try:
            for i in range(k):
                if guide is not None:  # the same mask and penalties as the target's row here: q is what we sample
                    logits = guide.shape(logits)
                    if not np.isfinite(logits).any():
                        break
                if sampling.greedy:
                    tok = int(np.argmax(logits))
                    if self.p_min > 0 and _top_probability(logits) < self.p_min:
                        break
                    if alternatives:
                        second = logits.copy()
                        second[tok] = -np.inf
                        alts.append((int(np.argmax(second)), None))
                else:
                    q = probabilities(logits, sampling)
                    if self.p_min > 0 and q.max() < self.p_min:
                        break
                    tok = sample(q, rng)
                    qs.append(self._fit(q))
                    if alternatives:
                        rest = without(q, [tok])
                        alts.append((sample(rest, rng), self._fit(rest)) if rest.any() else (-1, None))
                tokens.append(tok)
                if i == k - 1 or model.is_eog(tok):
                    break  # nothing is worth drafting past the end of the text
                if guide is not None:
                    guide.push(tok)
                    pushed += 1
                logits = self.ctx.decode([tok], [0])[0]
        finally:
            if pushed:
                guide.pop(pushed)
        return Proposal(tokens, qs or None, ["draft"] * len(tokens), alternatives=alts if alternatives else None)

    def _fit(self, q: np.ndarray) -> np.ndarray:
        if len(q) == self.n_vocab:
            return q
        out = np.zeros(self.n_vocab)
        n = min(len(q), self.n_vocab)
        out[:n] = q[:n]
        return out

    def accepted(self, n_accepted: int) -> None:
        pass  # the next propose() reconciles the cache by common prefix

    def llama_seconds(self) -> float:
        return self.ctx.llama_s

    def close(self) -> None:
        self.ctx.close()
        self.ctx.model.close()


def _top_probability(logits: np.ndarray) -> float:
    z = logits - logits.max()
    return float(1.0 / np.exp(z).sum())
