"""Acceptance math for speculative decoding, pure numpy (Leviathan et al. 2023, Chen et al. 2023).

p: target distributions, one row per drafted position plus one for the bonus token, shape (K+1, V) (an array, or
   sampling.Rows, which computes a row when it is first read).
q: draft distributions for the K drafted tokens, K rows of shape (V,); a row (or q itself) None stands for a
   deterministic proposal (prompt lookup, greedy drafts), which is the one-hot q = e_x.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .sampling import Rows, sample


def verify_greedy(target_argmax: Sequence[int], draft: Sequence[int]) -> tuple[int, int]:
    """Temperature 0: accept the longest prefix of the draft that the target would have chosen itself.

    target_argmax[i] is the target's choice after the context plus draft[:i] (K+1 entries).
    Returns (n_accepted, next_token): next_token is the target's own token at the first mismatch, or the bonus.
    """
    n = 0
    while n < len(draft) and draft[n] == target_argmax[n]:
        n += 1
    return n, int(target_argmax[n])


def residual(p: np.ndarray, q: np.ndarray | None, x: int) -> np.ndarray:
    """normalize(max(p - q, 0)): what to draw from after rejecting x. With q = None (one-hot at x), p without x."""
    if q is None:
        r = p.copy()
        if x < r.shape[0]:
            r[x] = 0.0
    else:
        r = np.maximum(p - q, 0.0)
    total = r.sum()
    if total <= 0.0:
        # Only reachable when p == q up to rounding, where rejection has probability ~0; p is then the right answer.
        return p / p.sum()
    return r / total


def verify_sampled(
    p: np.ndarray, q: Sequence[np.ndarray | None] | None, draft: Sequence[int], rng: np.random.Generator
) -> tuple[int, int]:
    """Rejection sampling: accept x_i with probability min(1, p_i(x_i) / q_i(x_i)); on the first rejection draw
    from the residual; if all K pass draw the bonus token from p_K. The output follows p exactly.

    Returns (n_accepted, next_token).
    """
    rows = p if isinstance(p, Rows) else _Dense(p)
    for i, x in enumerate(draft):
        qi = None if q is None else q[i]
        in_vocab = x < p.shape[1]  # a draft id outside the target's vocab has p = 0: always rejected
        px = rows.prob(i, x) if in_vocab else 0.0
        qx = qi[x] if qi is not None and in_vocab else 1.0
        # u < px/qx written without the division: qx = 0 < px (never drafted by q itself) accepts; px = 0 rejects.
        if rng.random() * qx < px:
            continue
        if qi is None:  # the residual of a deterministic proposal: p without x
            return i, rows.draw(i, rng, without=x)
        return i, sample(residual(rows[i], qi, x), rng)
    return len(draft), rows.draw(len(draft), rng)


class _Dense:
    """Distributions already computed, one row each, read as sampling.Rows reads its own (prob, draw)."""

    def __init__(self, p: np.ndarray) -> None:
        self.p = p

    def prob(self, i: int, x: int) -> float:
        return self.p[i][x]

    def draw(self, i: int, rng: np.random.Generator, without: int | None = None) -> int:
        return sample(self.p[i] if without is None else residual(self.p[i], None, without), rng)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.p[i]
