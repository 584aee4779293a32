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


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_k=-1), dict(top_p=0), dict(min_p=1.5)])
def test_invalid_config_is_refused(bad):
    with pytest.raises(ValueError):
        SamplingConfig(**bad)
