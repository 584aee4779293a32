import numpy as np
import pytest

from edgespec.sampling import SamplingConfig, probabilities, sample

LOGITS = np.log(np.array([0.5, 0.25, 0.15, 0.07, 0.03]))


def cfg(**kw):
    base = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    return SamplingConfig(**(base | kw))


def test_temperature_one_no_filters_is_softmax():
    np.testing.assert_allclose(probabilities(LOGITS, cfg()), [0.5, 0.25, 0.15, 0.07, 0.03])


def test_greedy_is_one_hot_on_argmax():
    np.testing.assert_array_equal(probabilities(LOGITS[::-1], SamplingConfig(temperature=0)), [0, 0, 0, 0, 1])


def test_top_k_keeps_k_largest_renormalised():
    np.testing.assert_allclose(probabilities(LOGITS, cfg(top_k=2)), [2 / 3, 1 / 3, 0, 0, 0])


def test_top_p_keeps_the_token_that_crosses_the_mass():
    # 0.5 < 0.7, 0.75 >= 0.7: the first two tokens stay.
    np.testing.assert_allclose(probabilities(LOGITS, cfg(top_p=0.7)), [2 / 3, 1 / 3, 0, 0, 0])


def test_min_p_is_relative_to_the_top_token():
    # keep p >= 0.2 * 0.5 = 0.1: tokens 0, 1, 2
    np.testing.assert_allclose(probabilities(LOGITS, cfg(min_p=0.2)), np.array([0.5, 0.25, 0.15, 0, 0]) / 0.9)


def test_temperature_applies_after_filters():
    p = probabilities(LOGITS, cfg(top_k=2, temperature=0.5))
    np.testing.assert_allclose(p, np.array([0.25, 0.0625, 0, 0, 0]) / 0.3125)


def test_sample_follows_distribution():
    rng = np.random.default_rng(0)
    p = np.array([0.1, 0.0, 0.6, 0.3])
    counts = np.bincount([sample(p, rng) for _ in range(20000)], minlength=4)
    assert counts[1] == 0
    np.testing.assert_allclose(counts / 20000, p, atol=0.015)


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_k=-1), dict(top_p=-0.1), dict(min_p=1.5)])
def test_invalid_config_is_refused(bad):
    with pytest.raises(ValueError):
        SamplingConfig(**bad)


def test_top_p_zero_keeps_the_most_likely_token():
    """top_p 0 is legal (llama.cpp and OpenAI's API take it): the most likely token only, ties by the lowest id."""
    np.testing.assert_array_equal(probabilities(LOGITS, SamplingConfig(temperature=1.0, top_p=0.0, min_p=0.0)),
                                  np.eye(len(LOGITS))[int(np.argmax(LOGITS))])


# ---- large vocabularies: top-k by groups, sampling by blocks, rows computed on demand ---------------------------

def reference(logits, c):
    """The filters written out plainly on one row: sort everything, cut, softmax (float64)."""
    x = np.asarray(logits, dtype=np.float64)
    order = np.lexsort((np.arange(len(x)), -x))
    ids, kept = order, x[order]
    if 0 < c.top_k < len(x):
        ids, kept = ids[:c.top_k], kept[:c.top_k]
    if c.top_p < 1.0:
        e = np.exp(kept - kept[0])
        n = int(np.searchsorted(np.cumsum(e / e.sum()), c.top_p)) + 1
        ids, kept = ids[:n], kept[:n]
    if c.min_p > 0.0:
        keep = kept >= kept[0] + np.log(c.min_p)
        ids, kept = ids[keep], kept[keep]
    out = np.zeros(len(x))
    e = np.exp((kept - kept[0]) / c.temperature)
    out[ids] = e / e.sum()
    return out


@pytest.mark.parametrize("vocab", [20_000, 20_001, 151_936])  # a multiple of the group size, and not
@pytest.mark.parametrize("c", [cfg(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05), cfg(top_k=7),
                               cfg(temperature=1.3, top_k=100, top_p=0.9), cfg(top_k=60, min_p=0.2),
                               # without top-k (the min-p recipe among them): the candidates found without sorting
                               # the whole vocabulary, top-p's mass still over all of it
                               cfg(temperature=0.7, top_k=0, top_p=1.0, min_p=0.05), cfg(top_k=0, top_p=0.9),
                               cfg(top_k=0, top_p=0.95, min_p=0.02), cfg(temperature=0.8, top_k=0, top_p=1.0)])
def test_large_vocabularies_match_the_plain_filters(vocab, c):
    rng = np.random.default_rng(vocab)
    logits = (rng.standard_normal((3, vocab)) * 3).astype(np.float32)
    logits[0, rng.integers(0, vocab, 30)] += 12  # a peaked row, a flat one, one with ties at the top-k boundary
    logits[2, :200] = logits[2, 0]
    rows = probabilities(logits, c)
    for r in range(3):
        np.testing.assert_allclose(rows[r], reference(logits[r], c), atol=1e-6)


def test_large_vocabulary_sampling_follows_the_distribution():
    from edgespec.sampling import BLOCK
    from stats_util import assert_follows, chi2_critical, chi2_stat

    rng = np.random.default_rng(5)
    vocab = 50_003
    p = np.zeros(vocab, dtype=np.float32)
    # scattered over many blocks, a dozen inside two blocks, and the short last block
    ids = np.unique(np.r_[rng.choice(vocab, 16, replace=False), 640 + 5 * np.arange(12), vocab - 1])
    p[ids] = rng.dirichlet(np.ones(len(ids)))
    want = p[ids] / p[ids].sum()
    counts = np.bincount([sample(p, rng) for _ in range(60_000)], minlength=vocab)
    assert counts.sum() == counts[ids].sum()  # never a token of probability zero
    assert_follows(counts[ids], want)

    def wrong(p, rng):  # negative control: the right block, then its first possible entry (no walk inside it)
        blocks = np.add.reduceat(p, np.arange(0, len(p), BLOCK))
        b = int(np.searchsorted(np.cumsum(blocks), rng.random() * blocks.sum(), side="right"))
        return b * BLOCK + int(np.flatnonzero(p[b * BLOCK:(b + 1) * BLOCK])[0])

    bad = np.bincount([wrong(p, rng) for _ in range(60_000)], minlength=vocab)
    assert chi2_stat(bad[ids], want)[0] > chi2_critical(len(ids) - 1)


def test_rows_computes_only_what_verification_reads():
    from edgespec.sampling import Rows
    from edgespec.verify import verify_sampled

    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 3000)).astype(np.float32)
    c = cfg(top_k=20)
    lazy, dense = Rows(logits, c), probabilities(logits, c)
    draft = [int(np.argmax(logits[0])), 2999, 5, 6]  # 2999 is far outside the top 20: rejected at position 1
    a = verify_sampled(lazy, None, draft, np.random.default_rng(3))
    b = verify_sampled(dense, None, draft, np.random.default_rng(3))
    assert a == b and a[0] <= 1
    assert set(lazy._done) <= {0, 1}  # rows past the rejection were never computed
    np.testing.assert_array_equal(lazy[1], dense[1])


def test_rows_are_computed_together_as_verification_goes_on_and_equal_the_dense_rows():
    from edgespec.sampling import Rows
    from edgespec.verify import verify_sampled

    rng = np.random.default_rng(1)
    logits = (rng.standard_normal((9, 4096)) * 3).astype(np.float32)
    draft = [int(np.argmax(row)) for row in logits[:-1]]
    logits[np.arange(8), draft] += 30  # each drafted token nearly certain: verification reads every row
    c = cfg(top_k=40)
    dense = probabilities(logits, c)
    lazy = Rows(logits, c)
    assert verify_sampled(lazy, None, draft, np.random.default_rng(5)) == \
        verify_sampled(dense, None, draft, np.random.default_rng(5))
    assert sorted(lazy._done) == list(range(9))
    for i in range(9):  # a row computed in a group is the row computed alone, bit for bit
        np.testing.assert_array_equal(lazy[i], dense[i])
    early = Rows(logits, c)  # position 3's token is outside the top 40: rejected there, with rows 0-3 read
    assert verify_sampled(early, None, draft[:3] + [int(np.argmin(logits[3]))] + draft[4:], rng)[0] == 3
    assert set(early._done) == set(range(6))  # rows 0-1, then 2-5; 6-8 never computed
    neg = Rows(logits, c)
    np.testing.assert_array_equal(neg[-1], dense[-1])  # a negative index names the row it names in the array
    assert set(neg._done) == {8}


@pytest.mark.parametrize("scale", [1.0, 3.0, 8.0])
def test_top_probability_is_the_softmax_maximum(scale):
    from edgespec.sampling import top_probability

    rng = np.random.default_rng(7)
    for peak in (0.0, 5.0, 25.0):  # flat, middling, near certain
        logits = (rng.standard_normal(151936) * scale).astype(np.float32)
        logits[rng.integers(151936)] += peak
        exact = 1.0 / np.exp(logits.astype(np.float64) - logits.max()).sum()
        assert top_probability(logits) == pytest.approx(exact, rel=1e-5)


def test_a_drafted_tokens_draw_is_its_distributions():
    """sampling.draw (a sampled drafted token): q as probabilities() gives it, its top probability, and tokens that
    follow q, at a vocabulary large enough for top-k by groups and with top-k off."""
    from edgespec.sampling import draw
    from stats_util import assert_follows

    rng = np.random.default_rng(11)
    logits = (rng.standard_normal(20000) * 3).astype(np.float32)
    for c in (cfg(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05), cfg(top_k=0, min_p=0.02)):
        want = probabilities(logits, c)
        q, _, top = draw(logits, c, rng)
        np.testing.assert_array_equal(q, want)
        assert top == want.max()
        support = np.flatnonzero(want)
        counts = np.bincount([draw(logits, c, rng)[1] for _ in range(20_000)], minlength=len(want))
        assert counts.sum() == counts[support].sum()
        assert_follows(counts[support], want[support])
