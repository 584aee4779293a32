import pytest

from edgespec.stats import GenerationStats, RoundRecord


def test_ms_per_token_is_total_time_over_total_tokens_not_a_mean_of_ratios():
    s = GenerationStats()
    s.add_round(RoundRecord(n_drafted=4, n_accepted=4, n_emitted=5, seconds=0.5, llama_seconds=0.45))
    s.add_round(RoundRecord(n_drafted=4, n_accepted=0, n_emitted=1, seconds=0.3, llama_seconds=0.28))
    assert s.ms_per_token == pytest.approx(800 / 6)  # a mean of ratios would say (100 + 300) / 2 = 200
    assert s.tokens_per_s == pytest.approx(6 / 0.8)
    assert s.python_overhead == pytest.approx(1 - 0.73 / 0.8)


def test_acceptance_by_position_and_mean_accepted_length():
    s = GenerationStats()
    s.add_round(RoundRecord(4, 2, 3, 1.0, 1.0))
    s.add_round(RoundRecord(2, 2, 3, 1.0, 1.0))
    s.add_round(RoundRecord(4, 0, 1, 1.0, 1.0))
    assert s.accept_by_position == [2 / 3, 2 / 3, 0.0, 0.0]
    assert s.tested_at == [3, 2, 1, 0]  # drafted with all before it accepted: what a_i is conditioned on
    assert s.acceptance_rate == pytest.approx(4 / 10)
    assert s.mean_accepted_length == pytest.approx(4 / 3)
    assert s.tokens_per_round == pytest.approx(7 / 3)


def test_empty_stats_have_no_rates():
    d = GenerationStats().to_dict()
    assert d["acceptance_rate"] is None and d["ms_per_token"] is None and d["accept_by_position"] == []


def test_fallback_rounds_count_a_chain_part_that_was_off():
    s = GenerationStats()
    for reason in ("fallback", "free+fallback", "free+cost", "probe", "free+fallback"):
        s.add_round(RoundRecord(0, 0, 1, 0.1, 0.1, reason))
    assert s.fallback_rounds == 3


def test_a_tree_round_counts_its_depth_by_position_and_its_path_by_proposer():
    s = GenerationStats()
    # a chain of 3 drafted tokens with 2 second-choice leaves: 5 nodes, 3 positions; a leaf passed at position 2
    s.add_round(RoundRecord(5, 2, 3, 0.1, 0.1, "cost+tree", ("draft",) * 5, depth=3,
                            accepted_sources=("draft", "draft")))
    s.add_round(RoundRecord(2, 1, 2, 0.1, 0.1, "tree", ("lookup", "lookup"), depth=1, accepted_sources=("lookup",)))
    assert s.drafted_at == [2, 1, 1] and s.accepted_at == [2, 1, 0] and s.tested_at == [2, 1, 1]
    assert s.drafted_by_source == {"draft": 5, "lookup": 2} and s.accepted_by_source == {"draft": 2, "lookup": 1}
