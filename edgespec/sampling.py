"""Logits -> probabilities and sampling, as pure numpy functions.

Target and draft go through the same `probabilities(logits, config)`, so p and q are distributions over the same
filtered support rule. Filters follow llama.cpp's default chain (top-k, top-p, min-p on the untempered logits, then
temperature), so a given config means what it means in llama.cpp.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import InvalidArgument


@dataclass(frozen=True)
class SamplingConfig:
    """How tokens are chosen. temperature <= 0 means greedy (argmax); the filters then play no part."""

    temperature: float = 0.8
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1.0 = off
    min_p: float = 0.05  # 0.0 = off
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InvalidArgument(f"{name} must be a finite number, got {value!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int):
            raise InvalidArgument(f"top_k must be an integer, got {self.top_k!r}")
        if self.temperature < 0:
            raise InvalidArgument(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise InvalidArgument(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidArgument(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise InvalidArgument(f"min_p must be in [0, 1], got {self.min_p}")
        if self.seed is not None:
            if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < -1:
                raise InvalidArgument(f"seed must be an integer >= 0 (or -1 for a random one), got {self.seed!r}")
            if self.seed == -1:  # llama.cpp's convention: -1 is a fresh random seed
                object.__setattr__(self, "seed", None)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


GREEDY = SamplingConfig(temperature=0.0)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def probabilities(logits: np.ndarray, config: SamplingConfig) -> np.ndarray:
    """A dense float64 distribution over the vocabulary (zeros outside the kept support)."""
    logits = np.asarray(logits, dtype=np.float64)
    out = np.zeros(logits.shape[-1])
    if config.greedy:
        out[int(np.argmax(logits))] = 1.0
        return out
    ids = np.arange(logits.shape[-1])
    if 0 < config.top_k < logits.shape[-1]:
        ids = np.argpartition(logits, -config.top_k)[-config.top_k:]
    kept = logits[ids]
    order = np.argsort(-kept, kind="stable")  # descending, ties by id: deterministic
    ids, kept = ids[order], kept[order]
    if config.top_p < 1.0:
        # Keep the smallest prefix whose mass reaches top_p (the token that crosses it stays).
        cum = np.cumsum(_softmax(kept))
        n = int(np.searchsorted(cum, config.top_p)) + 1
        ids, kept = ids[:n], kept[:n]
    if config.min_p > 0.0:
        # p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p), as llama.cpp computes it.
        keep = kept >= kept[0] + np.log(config.min_p)
        ids, kept = ids[keep], kept[keep]
    out[ids] = _softmax(kept / config.temperature)
    return out


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a distribution (exact: inverse CDF on one uniform)."""
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))
