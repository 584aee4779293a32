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
    # History-dependent (llama.cpp's penalties sampler, over the last repeat_last_n tokens of prompt and output): a
    # token seen c times has its logit divided by repeat_penalty (multiplied, when negative), then lowered by
    # c * frequency_penalty + presence_penalty. logit_bias: (token id, value) pairs added to the logits.
    repeat_penalty: float = 1.0  # 1.0 = off
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"):
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
        if self.repeat_penalty <= 0:
            raise InvalidArgument(f"repeat_penalty must be > 0, got {self.repeat_penalty}")
        if isinstance(self.repeat_last_n, bool) or not isinstance(self.repeat_last_n, int) or self.repeat_last_n < 0:
            raise InvalidArgument(f"repeat_last_n must be an integer >= 0, got {self.repeat_last_n!r}")
        try:
            bias = tuple((int(t), float(v)) for t, v in dict(self.logit_bias).items())
        except (TypeError, ValueError):
            raise InvalidArgument("logit_bias must map token ids to numbers") from None
        if not all(math.isfinite(v) or v == -math.inf for _, v in bias):
            raise InvalidArgument("logit_bias values must be finite numbers (or -inf to ban a token)")
        object.__setattr__(self, "logit_bias", bias)
        if self.seed is not None:
            if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < -1:
                raise InvalidArgument(f"seed must be an integer >= 0 (or -1 for a random one), got {self.seed!r}")
            if self.seed == -1:  # llama.cpp's convention: -1 is a fresh random seed
                object.__setattr__(self, "seed", None)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def penalises(self) -> bool:
        """Whether logits depend on the text so far (then each verify row is adjusted with its own history)."""
        return bool(self.repeat_last_n and (self.repeat_penalty != 1.0 or self.presence_penalty
                                            or self.frequency_penalty))


GREEDY = SamplingConfig(temperature=0.0)


def penalise(logits: np.ndarray, counts: dict[int, int], config: SamplingConfig) -> np.ndarray:
    """A copy of one row of logits with the logit bias, then the penalties (llama.cpp's order); counts: how often
    each token occurs in the window (the last repeat_last_n tokens of the text)."""
    out = np.array(logits, dtype=np.float32)
    for t, v in config.logit_bias:
        if 0 <= t < len(out):
            out[t] += v
    if counts and config.penalises:
        ids = np.fromiter(counts, dtype=np.int64, count=len(counts))
        c = np.fromiter(counts.values(), dtype=np.float32, count=len(counts))
        inside = ids < len(out)
        ids, c = ids[inside], c[inside]
        x = out[ids]
        x = np.where(x <= 0, x * config.repeat_penalty, x / config.repeat_penalty)
        out[ids] = x - c * config.frequency_penalty - (c > 0) * config.presence_penalty
    return out


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
