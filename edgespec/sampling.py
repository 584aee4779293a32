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
    top_p: float = 0.95  # 1.0 = off; 0.0 = the most likely token only
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
        if not 0.0 <= self.top_p <= 1.0:  # 0 keeps only the most likely token, as in llama.cpp and OpenAI's API
            raise InvalidArgument(f"top_p must be in [0, 1], got {self.top_p}")
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
    """A dense float32 distribution over the vocabulary (zeros outside the kept support); for a 2-D array, one per
    row, computed together. Filtering comes before any exponential: only the top-k candidates are found (_top_k)
    and normalised, in float64 (_kept)."""
    logits = np.asarray(logits)
    if logits.ndim == 1:
        return probabilities(logits[None], config)[0]
    ids, probs = _kept(logits, config)
    out = np.zeros(logits.shape, dtype=np.float32)  # float32: half the memory to write per row
    out[np.arange(len(ids))[:, None], ids] = probs
    return out


def _kept(logits: np.ndarray, config: SamplingConfig) -> tuple[np.ndarray, np.ndarray]:
    """Each row's candidates after the filters: their ids, most likely first (where nothing filters, every token
    in id order), and their probabilities (0 for those the filters left out)."""
    n, vocab = logits.shape
    rows = np.arange(n)[:, None]
    if config.greedy:
        return np.argmax(logits, axis=1)[:, None], np.ones((n, 1))
    k, mass = config.top_k if 0 < config.top_k < vocab else vocab, None
    if k == vocab and config.top_p >= 1.0 and config.min_p <= 0.0:  # nothing filters: every token, by id
        e = np.exp((logits - logits.max(axis=1, keepdims=True)).astype(np.float64) / config.temperature)
        return np.broadcast_to(np.arange(vocab), (n, vocab)), e / e.sum(axis=1, keepdims=True)
    if k == vocab:
        k, mass = _enough(logits, config)
    ids = _top_k(logits, k) if k < vocab else np.broadcast_to(np.arange(vocab), (n, vocab))
    kept = logits[rows, ids].astype(np.float64)  # (fancy indexing: take_along_axis costs more than the work here)
    order = np.lexsort((ids, -kept), axis=1)  # descending, ties by id: deterministic
    ids, kept = ids[rows, order], kept[rows, order]
    kept = kept - kept[:, :1]
    keep = np.full(n, k)
    if config.top_p < 1.0:
        # The smallest prefix whose mass reaches top_p (the token that crosses it stays), of the top-k candidates'
        # mass where top-k is on, else of the whole vocabulary's.
        e = np.exp(kept)
        cum = np.cumsum(e, axis=1) / (e.sum(axis=1, keepdims=True) if mass is None else mass)
        keep = np.minimum(keep, (cum < config.top_p).sum(axis=1) + 1)
    if config.min_p > 0.0:
        # p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p), as llama.cpp computes it.
        keep = np.minimum(keep, (kept >= np.log(config.min_p)).sum(axis=1))
    scaled = np.where(np.arange(k) < keep[:, None], kept / config.temperature, -np.inf)
    e = np.exp(scaled)
    return ids, e / e.sum(axis=1, keepdims=True)


def _enough(logits: np.ndarray, config: SamplingConfig) -> tuple[int, np.ndarray | None]:
    """Without top-k: how many of each row's most likely tokens hold all that top-p and min-p can keep (sorting the
    whole vocabulary took 25 ms a row at 151,936 tokens), and each row's mass over the whole vocabulary (top-p's
    denominator, relative to the row's top token; None without top-p). With min-p: the tokens within log(min_p) of
    the top, whatever top-p keeps; top-p alone: the fewest whose mass reaches it, looked for among the top 64, then
    4 times as many."""
    n, vocab = logits.shape
    top = logits.max(axis=1, keepdims=True)
    mass = np.exp(logits - top).sum(axis=1, keepdims=True, dtype=np.float64) if config.top_p < 1.0 else None
    if config.min_p > 0.0:  # (a little below the cut: the filter itself, in float64, decides at its edge)
        return int((logits >= top + np.float32(np.log(config.min_p) - 1e-3)).sum(axis=1).max()), mass
    k = 64
    while k < vocab:
        best = np.take_along_axis(logits, _top_k(logits, k), axis=1)
        if (np.exp(best - top).sum(axis=1, keepdims=True, dtype=np.float64) >= config.top_p * mass * 1.000001).all():
            return k, mass
        k *= 4
    return vocab, mass


def draw(logits: np.ndarray, config: SamplingConfig, rng: np.random.Generator) -> tuple[np.ndarray, int, float]:
    """One row (a drafted token's): its distribution as probabilities() gives it, a token drawn from it (as sample()
    would draw), and its top probability, the last two read off the kept candidates instead of the whole vocabulary."""
    ids, probs = _kept(np.asarray(logits)[None], config)
    ids, probs = _by_id(ids[0], probs[0])
    return _dense(ids, probs, len(logits)), _draw(ids, probs, rng), float(probs.max())


def _by_id(ids: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A row's support: the ids it keeps (probability over 0) in increasing order, and their float32 probabilities."""
    kept = probs > 0
    order = np.argsort(ids[kept], kind="stable")  # (in order already where nothing filters)
    return ids[kept][order], probs[kept][order].astype(np.float32)


def _dense(ids: np.ndarray, probs: np.ndarray, vocab: int) -> np.ndarray:
    """A support written out over the whole vocabulary (float32, zeros elsewhere)."""
    row = np.zeros(vocab, dtype=np.float32)
    row[ids] = probs
    return row


def _draw(ids: np.ndarray, probs: np.ndarray, rng: np.random.Generator) -> int:
    """A token from a support by inverse CDF on one uniform (walking the ids in increasing order, as sample() does)."""
    cdf = np.cumsum(probs, dtype=np.float64)
    return int(ids[min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(ids) - 1)])


class Rows:
    """A verify's target distributions, computed as verification first reaches them: a rejection at position j
    leaves most rows after j uncomputed. A row not computed yet is computed together with the rows after it, in all
    twice as many as are done already, at least two: rows 0-1, then 2-5, then 6-17. Rows computed together cost
    little more than one (a call's own work is most of a row's: at the Qwen vocabulary 9 rows together take
    ~0.7 ms, one ~0.16 ms; bench/sampling_cost.py), and a round that passed its first tokens mostly passes more.

    A row is kept as its support (ids in increasing order, float32 probabilities: the dense row's values), which is
    all that acceptance (prob) and drawing (draw) read; the dense row is written only where it is indexed (a residual
    against a draft's q, a tree's siblings). Indexes like the (rows, vocabulary) array it stands for."""

    def __init__(self, logits: np.ndarray, config: SamplingConfig) -> None:
        self.logits, self.config = logits, config
        self.shape = logits.shape
        self._done: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._dense: dict[int, np.ndarray] = {}

    def support(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Row i's kept ids, in increasing order, and their probabilities."""
        i = range(len(self))[i]  # (a negative index as the row it names)
        if i not in self._done:
            end = min(len(self), i + max(2, 2 * len(self._done)))
            while any(j in self._done for j in range(i + 1, end)):  # (a tree reads rows out of order)
                end -= 1
            ids, probs = _kept(self.logits[i:end], self.config)
            for j in range(end - i):
                self._done[i + j] = _by_id(ids[j], probs[j])
        return self._done[i]

    def prob(self, i: int, x: int) -> float:
        """p_i(x)."""
        ids, probs = self.support(i)
        j = int(np.searchsorted(ids, x))
        return float(probs[j]) if j < len(ids) and ids[j] == x else 0.0

    def draw(self, i: int, rng: np.random.Generator, without: int | None = None) -> int:
        """A token from row i; without: from the row with that token's probability taken out (the residual after a
        deterministic proposal of it was rejected: residual(p, None, x)). As sample() on the dense row."""
        ids, probs = self.support(i)
        if without is not None:
            out = ids == without
            if probs[out].sum() < probs.sum():  # (p all at x: p itself, as residual() gives it)
                probs = np.where(out, 0.0, probs)
        return _draw(ids, probs, rng)

    def __getitem__(self, i):
        if isinstance(i, tuple):
            return self[i[0]][i[1]]
        i = range(len(self))[i]
        if i not in self._dense:
            self._dense[i] = _dense(*self.support(i), self.shape[1])
        return self._dense[i]

    def __len__(self) -> int:
        return self.shape[0]


BLOCK = 64  # vocabulary entries per block: top-k and sampling look inside the few blocks that matter


def _top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """The ids of each row's k largest logits (in no order). The vocabulary is split into groups (id i in group
    i mod n_groups, so a group's maximum is an elementwise maximum over contiguous slices: fast); the k largest
    entries lie in the k groups of largest maximum (a group outside those has k larger entries elsewhere), so only
    those groups are searched, instead of partitioning the whole vocabulary."""
    n, vocab = logits.shape
    if vocab < 16 * BLOCK or 4 * k * BLOCK > vocab:
        return np.argpartition(logits, -k, axis=1)[:, -k:]
    groups = -(-vocab // BLOCK)
    if groups * BLOCK != vocab:
        padded = np.full((n, groups * BLOCK), -np.inf, dtype=logits.dtype)
        padded[:, :vocab] = logits
        logits = padded
    g = logits.reshape(n, BLOCK, groups)  # g[r, i, j] = logits[r, i * groups + j]: group j is column j
    best = np.argpartition(g.max(axis=1), -k, axis=1)[:, -k:]
    rows = np.arange(n)[:, None, None]
    candidates = g[rows, np.arange(BLOCK)[None, :, None], best[:, None, :]].reshape(n, -1)
    ids = (np.arange(BLOCK)[None, :, None] * groups + best[:, None, :]).reshape(n, -1)
    return ids[rows[:, :, 0], np.argpartition(candidates, -k, axis=1)[:, -k:]]


def top_probability(logits: np.ndarray) -> float:
    """The largest probability of softmax(logits): a greedy draft's confidence in its token. Over the whole
    vocabulary: leaving out the entries far under the top saves no pass over it (in the 0.5B draft's rows over 400
    positions of a text, all but the most certain had an entry within e^20 of the top in every group of 64)."""
    return float(1.0 / np.exp(logits - logits.max()).sum())


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a distribution (exact: inverse CDF on one uniform). Over a large vocabulary the CDF is
    walked by blocks: the block the uniform falls in, then the entry inside it."""
    u = rng.random()
    if len(p) <= 16 * BLOCK:
        cdf = np.cumsum(p)
        return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(p) - 1))
    by_block = np.cumsum(np.add.reduceat(p, np.arange(0, len(p), BLOCK)))
    target = u * by_block[-1]
    b = int(min(np.searchsorted(by_block, target, side="right"), len(by_block) - 1))
    inside = p[b * BLOCK:(b + 1) * BLOCK]
    cdf = np.cumsum(inside)
    j = int(np.searchsorted(cdf, target - (by_block[b - 1] if b else 0.0), side="right"))
    if j >= len(inside):  # rounding between the block's sum and its own cumulative sum: its last possible entry
        j = int(np.flatnonzero(inside)[-1])
    return b * BLOCK + j
