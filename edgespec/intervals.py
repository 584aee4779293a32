"""The speedup's interval over prompts: how far a benchmark's figure could move were other prompts of the same kind
measured (a paired bootstrap), which on one machine is most of a run's noise."""
from __future__ import annotations

from typing import Sequence

import numpy as np

INTERVAL_LEVEL, RESAMPLES = 0.95, 2000  # the interval's share, and how many times the prompts are drawn again
MIN_PROMPTS = 5  # ... given at least this many prompts


def speedup_interval(plain: Sequence[Sequence[tuple[float, int]]], mode: Sequence[Sequence[tuple[float, int]]],
                     level: float = INTERVAL_LEVEL, resamples: int = RESAMPLES, seed: int = 0) -> list[float] | None:
    """How far the speedup could move were other prompts of the same kind measured: a paired bootstrap over prompts.
    plain, mode: per repeat, (generation seconds, tokens) of each prompt, the same prompts in the same order. Each
    resample draws the prompts again with replacement (prompt i in every repeat together) and takes the speedup as
    the figures do (each repeat's plain ms/token over the mode's on those prompts, the median over repeats); returns
    the central `level` share of the resampled speedups as [low, high], or None with fewer than MIN_PROMPTS prompts
    (a category of two prompts has no interval worth the name). Seeded: the same figures give the same interval.
    It shows the spread between prompts, which on one machine is most of the noise (the same prompt's speedup also
    moves between repeats: that spread enters through the median over repeats)."""
    n = min((len(x) for x in [*plain, *mode]), default=0)
    if n < MIN_PROMPTS or len(plain) != len(mode):
        return None
    pick = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    ratios = []
    for p, m in zip(plain, mode):
        p, m = np.asarray(p[:n], dtype=float), np.asarray(m[:n], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.append((p[:, 0][pick].sum(1) / p[:, 1][pick].sum(1)) / (m[:, 0][pick].sum(1) / m[:, 1][pick].sum(1)))
    speedups = np.median(np.stack(ratios), axis=0)
    speedups = speedups[np.isfinite(speedups)]
    if not len(speedups):
        return None
    tail = (1 - level) / 2
    return [float(x) for x in np.quantile(speedups, [tail, 1 - tail])]
