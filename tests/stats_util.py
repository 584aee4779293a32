"""A chi-square goodness-of-fit check without scipy, exact target distributions to check against, and the draws of
a pure-Python simulation split over processes."""
import concurrent.futures
import multiprocessing

import numpy as np


def chi2_critical(df: int, z: float = 3.72) -> float:
    """Upper quantile of chi-square(df) by Wilson-Hilferty; z = 3.72 is the 1e-4 tail."""
    return df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3


def chi2_stat(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom; cells expected below min_expected are pooled into one.
    A count where the probability is zero makes the statistic infinite (an impossible outcome was drawn)."""
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    n = counts.sum()
    if np.any((probs == 0) & (counts > 0)):
        return float("inf"), 1
    expected = probs * n
    big = expected >= min_expected
    obs = list(counts[big]) + ([counts[~big].sum()] if (~big).any() else [])
    exp = list(expected[big]) + ([expected[~big].sum()] if (~big).any() else [])
    obs, exp = np.array(obs), np.array(exp)
    keep = exp > 0
    return float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()), int(keep.sum() - 1)


def in_processes(fn, calls: list[tuple]) -> list:
    """fn(*call) for each call, each in its own spawned process: a pure-Python simulation's draws split over this
    machine's two cores (nothing else runs beside a test), each part with its own seed. fn: a module-level function
    (the children import it by name)."""
    with concurrent.futures.ProcessPoolExecutor(len(calls), mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(fn, *zip(*calls)))


def assert_follows(counts, probs) -> None:
    stat, df = chi2_stat(counts, probs)
    assert stat < chi2_critical(max(df, 1)), f"chi2 {stat:.1f} on {df} df: counts {list(counts)} vs p {list(probs)}"


def exact_first_two(model, prompt, cfg, n: int = 2) -> dict:
    """The target alone's exact joint distribution of the first two (n) generated tokens: {(a, b): p}."""
    from edgespec.backend import Context
    from edgespec.sampling import probabilities

    ctx = Context(model, n_ctx=256)
    ctx.decode(prompt[:-1])
    joint = {}

    def walk(last, before, p):
        ctx.truncate(len(prompt) - 1 + len(before))
        row = probabilities(ctx.decode([last], [0])[0], cfg)
        for a in np.flatnonzero(row):
            out = before + (int(a),)
            if len(out) == n:
                joint[out] = p * row[a]
            else:
                walk(int(a), out, p * row[a])

    walk(prompt[-1], (), 1.0)
    ctx.close()
    return joint


def exact_first_two_guided(engine, prompt, cfg, constraint=None) -> dict:
    """The same under a constraint and the penalties: each position's row masked and penalised by the text before
    it, as constrained plain decoding samples it."""
    from edgespec.backend import Context
    from edgespec.constraints import Grammar
    from edgespec.guide import Guide
    from edgespec.sampling import probabilities

    model = engine.model
    grammar = Grammar(constraint, model.constraint_tokenizer(), model.n_vocab) if constraint else None
    guide = Guide(cfg, grammar, prompt, model.n_vocab, model.is_eog)
    ctx = Context(model, n_ctx=256)
    ctx.decode(prompt[:-1])
    p1 = probabilities(guide.shape(ctx.decode(prompt[-1:], [0])[0]), cfg)
    joint = {}
    for a in np.flatnonzero(p1):
        ctx.truncate(len(prompt))
        guide.push(int(a))
        p2 = probabilities(guide.shape(ctx.decode([int(a)], [0])[0]), cfg)
        guide.pop(1)
        for b in np.flatnonzero(p2):
            joint[(int(a), int(b))] = p1[a] * p2[b]
    ctx.close()
    return joint


def first_two_counts(engine, prompt, cfg: dict, rounds: int, each=None, n: int = 2, **kwargs
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Sample `rounds` generations (seeds 0..rounds-1) and count their first two (n) tokens; returns the counts
    and the target alone's exact probabilities of the same outcomes. each(result): called on every generation."""
    from edgespec import SamplingConfig

    joint = exact_first_two(engine.model, prompt, SamplingConfig(**cfg), n)
    outcomes = list(joint)
    counts = np.zeros(len(outcomes))
    for seed in range(rounds):
        r = engine.generate(prompt, sampling=SamplingConfig(**cfg, seed=seed), **kwargs)
        first = tuple(r.tokens[:n])
        assert first in joint, f"impossible pair {first}"
        counts[outcomes.index(first)] += 1
        if each is not None:
            each(r)
    return counts, np.array([joint[o] for o in outcomes])
