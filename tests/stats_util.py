"""A chi-square goodness-of-fit check without scipy."""
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


def assert_follows(counts, probs) -> None:
    stat, df = chi2_stat(counts, probs)
    assert stat < chi2_critical(max(df, 1)), f"chi2 {stat:.1f} on {df} df: counts {list(counts)} vs p {list(probs)}"
