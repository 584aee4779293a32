"""Acceptance math on small vocabularies: hand-computed cases, then the distribution it produces."""
import numpy as np
import pytest

from edgespec.sampling import Rows, SamplingConfig, probabilities, sample
from edgespec.verify import residual, verify_greedy, verify_sampled
from stats_util import assert_follows, chi2_critical, chi2_stat


class ScriptedRng:
    """Returns the given uniforms in order, so each accept/reject decision is chosen by the test."""

    def __init__(self, *values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


P = np.array([0.1, 0.2, 0.3, 0.4])
Q = np.array([0.4, 0.3, 0.2, 0.1])


def test_greedy_accepts_the_agreeing_prefix_and_takes_the_targets_token():
    assert verify_greedy([1, 2, 0, 4], [1, 2, 3]) == (2, 0)


def test_greedy_all_accepted_gives_the_bonus_token():
    assert verify_greedy([1, 2, 3, 4], [1, 2, 3]) == (3, 4)


def test_greedy_first_rejected():
    assert verify_greedy([7, 2], [1]) == (0, 7)


def test_accept_when_u_below_ratio():
    # p/q = 0.25 at x = 0: u = 0.2 accepts; the bonus is then drawn from p[1] with u = 0.95 -> token 3
    assert verify_sampled(np.stack([P, P]), Q[None], [0], ScriptedRng(0.2, 0.95)) == (1, 3)


def test_reject_resamples_from_residual():
    # u = 0.3 rejects; residual max(p - q, 0) = [0, 0, .1, .3] / .4; u = 0.1 -> token 2, u = 0.5 -> token 3
    assert verify_sampled(np.stack([P, P]), Q[None], [0], ScriptedRng(0.3, 0.1)) == (0, 2)
    assert verify_sampled(np.stack([P, P]), Q[None], [0], ScriptedRng(0.3, 0.5)) == (0, 3)


def test_residual_values():
    np.testing.assert_allclose(residual(P, Q, 0), [0, 0, 0.25, 0.75])


def test_q_zero_where_p_positive_is_always_accepted():
    q = np.array([0.5, 0.5, 0.0, 0.0])
    assert verify_sampled(np.stack([P, P]), q[None], [2], ScriptedRng(0.999, 0.0)) == (1, 0)


def test_p_zero_where_q_positive_is_always_rejected():
    p = np.array([0.0, 0.2, 0.3, 0.5])
    # even u = 0 rejects; the residual max(p - q, 0) = [0, 0, .1, .4] / .5 never gives token 0
    n, tok = verify_sampled(np.stack([p, p]), Q[None], [0], ScriptedRng(0.0, 0.0))
    assert (n, tok) == (0, 2)


def test_one_hot_proposal_accepts_with_probability_p_and_resamples_without_x():
    assert verify_sampled(np.stack([P, P]), None, [3], ScriptedRng(0.39, 0.0)) == (1, 0)
    assert verify_sampled(np.stack([P, P]), None, [3], ScriptedRng(0.41, 0.99)) == (0, 2)
    np.testing.assert_allclose(residual(P, None, 3), [1 / 6, 2 / 6, 3 / 6, 0])


def test_draft_id_outside_target_vocab_is_rejected():
    q = np.array([0.25, 0.25, 0.25, 0.25])
    n, _ = verify_sampled(np.stack([P, P]), q[None], [7], ScriptedRng(0.0, 0.5))
    assert n == 0


def test_stops_at_first_rejection_in_a_block():
    p = np.stack([P, P, P])
    q = np.stack([Q, Q])
    # position 0: x = 3, q = 0.1 < p = 0.4 -> accepted whatever u; position 1: x = 0, u = 0.9 -> rejected
    assert verify_sampled(p, q, [3, 0], ScriptedRng(0.5, 0.9, 0.1)) == (1, 2)


# ---- distribution: accepted-or-resampled tokens follow p --------------------------------------------------------

PAIRS = [
    (np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])),
    (np.array([0.5, 0.0, 0.25, 0.25, 0.0, 0.0]), np.array([0.1, 0.3, 0.1, 0.1, 0.2, 0.2])),  # q covers p = 0 ids
    (np.array([0.05, 0.05, 0.6, 0.1, 0.1, 0.1, 0.0, 0.0]), np.array([0.0, 0.0, 0.2, 0.0, 0.4, 0.0, 0.2, 0.2])),
    (np.full(10, 0.1), np.array([0.91] + [0.01] * 9)),
]
N = 100_000


def first_tokens(p, q, rng, n, verify=verify_sampled, k=2):
    """The first token of n rounds: draft k tokens from q, verify against p (the same p at each position)."""
    ps, qs = np.stack([p] * (k + 1)), (None if q is None else np.stack([q] * k))
    out = np.empty(n, dtype=int)
    for i in range(n):
        draft = [sample(q, rng) for _ in range(k)] if q is not None else [int(np.argmax(p))] * k
        accepted, nxt = verify(ps, qs, draft, rng)
        out[i] = draft[0] if accepted > 0 else nxt
    return out


@pytest.mark.parametrize("p,q", PAIRS)
def test_output_follows_target_distribution(p, q):
    rng = np.random.default_rng(1234)
    assert_follows(np.bincount(first_tokens(p, q, rng, N), minlength=len(p)), p)


@pytest.mark.parametrize("p", [pair[0] for pair in PAIRS])
def test_one_hot_proposal_output_follows_target_distribution(p):
    rng = np.random.default_rng(99)
    assert_follows(np.bincount(first_tokens(p, None, rng, N), minlength=len(p)), p)


def test_the_statistical_check_catches_a_wrong_residual():
    """A negative control: resampling from p itself (a classic bug) must fail the same check."""

    def wrong(p, q, draft, rng):
        for i, x in enumerate(draft):
            if rng.random() * q[i, x] < p[i, x]:
                continue
            return i, sample(p[i], rng)  # should be normalize(max(p - q, 0))
        return len(draft), sample(p[len(draft)], rng)

    p, q = PAIRS[0]
    rng = np.random.default_rng(1234)
    stat, df = chi2_stat(np.bincount(first_tokens(p, q, rng, N, verify=wrong), minlength=len(p)), p)
    assert stat > chi2_critical(df)


# ---- the same through sampling.Rows, which reads a row's support (ids and probabilities) instead of a dense row --

FLAT = SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)  # probabilities = softmax(logits): p itself


def through_rows(p: np.ndarray):
    """verify_sampled as the engine calls it: on sampling.Rows of logits whose distribution under FLAT is p."""
    with np.errstate(divide="ignore"):
        logits = np.log(p).astype(np.float32)

    def verify(ps, qs, draft, rng):
        return verify_sampled(Rows(np.stack([logits] * len(ps)), FLAT), qs, draft, rng)
    return verify


@pytest.mark.parametrize("p,q", PAIRS)
def test_rows_output_follows_target_distribution(p, q):
    rng = np.random.default_rng(4321)
    assert_follows(np.bincount(first_tokens(p, q, rng, N // 4, verify=through_rows(p)), minlength=len(p)), p / p.sum())


@pytest.mark.parametrize("p", [pair[0] for pair in PAIRS])
def test_rows_one_hot_proposal_output_follows_target_distribution(p):
    rng = np.random.default_rng(77)
    assert_follows(np.bincount(first_tokens(p, None, rng, N // 4, verify=through_rows(p)), minlength=len(p)),
                   p / p.sum())


def test_the_rows_check_catches_a_residual_that_keeps_the_rejected_token(monkeypatch):
    """A negative control for the support's residual: a draw after a rejected proposal that ignores which token was
    rejected must fail the same check."""
    keep = Rows.draw
    monkeypatch.setattr(Rows, "draw", lambda self, i, rng, without=None: keep(self, i, rng))
    p = PAIRS[0][0]
    rng = np.random.default_rng(77)
    stat, df = chi2_stat(np.bincount(first_tokens(p, None, rng, N // 4, verify=through_rows(p)), minlength=len(p)),
                         p)
    assert stat > chi2_critical(df)


def test_rows_read_the_dense_rows_values():
    """At a large vocabulary with the default filters: p_i(x) and each row as the dense probabilities give them, and
    a row's draws (with and without a token) follow it."""
    rng = np.random.default_rng(5)
    cfg = SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
    logits = (rng.standard_normal((3, 20000)) * 3).astype(np.float32)
    dense, rows = probabilities(logits, cfg), Rows(logits, cfg)
    support = np.flatnonzero(dense[1])
    assert all(rows.prob(1, int(x)) == dense[1][x] for x in support)
    assert rows.prob(1, int(np.setdiff1d(np.arange(20000), support)[0])) == 0.0
    np.testing.assert_array_equal(rows[2], dense[2])
    x = int(np.argmax(dense[1]))
    without = dense[1].copy()
    without[x] = 0.0
    for w, want in ((None, dense[1]), (x, without / without.sum())):
        counts = np.bincount([rows.draw(1, rng, without=w) for _ in range(20_000)], minlength=20000)
        assert_follows(counts[support], want[support])
