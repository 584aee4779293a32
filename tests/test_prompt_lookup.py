import numpy as np

from edgespec.proposers import PromptLookupProposer
from edgespec.sampling import GREEDY


def propose(p, seq, k):
    return p.propose(seq, k, GREEDY, np.random.default_rng(0)).tokens


def test_copies_what_followed_the_longest_matching_suffix():
    p = PromptLookupProposer(n_max=3, n_min=1)
    seq = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3]
    p.begin(seq)
    # suffix [1, 2, 3] occurred at the start, followed by 4, 5, 9
    assert propose(p, seq, 3) == [4, 5, 9]


def test_most_recent_occurrence_wins():
    p = PromptLookupProposer(n_max=2, n_min=1)
    seq = [5, 6, 1, 7, 6, 2, 8, 6]
    p.begin(seq)
    assert propose(p, seq, 2) == [2, 8]


def test_no_match_proposes_nothing():
    p = PromptLookupProposer(n_max=3, n_min=2)
    seq = [1, 2, 3, 4]
    p.begin(seq)
    assert propose(p, seq, 4) == []


def test_continuation_is_cut_at_the_end_of_the_text():
    p = PromptLookupProposer(n_max=2, n_min=1)
    seq = [1, 2, 3, 1, 2]
    p.begin(seq)
    assert propose(p, seq, 10) == [3, 1, 2]


def test_incremental_index_equals_a_fresh_one():
    rng = np.random.default_rng(0)
    seq = list(rng.integers(0, 6, 50))
    inc = PromptLookupProposer(n_max=3)
    inc.begin(seq[:10])
    for end in range(11, 51, 3):
        propose(inc, seq[:end], 4)
        fresh = PromptLookupProposer(n_max=3)
        fresh.begin(seq[:end])
        assert inc._index == fresh._index and propose(inc, seq[:end], 4) == propose(fresh, seq[:end], 4)


class CountingDict(dict):
    writes = 0

    def __setitem__(self, key, value):
        CountingDict.writes += 1
        super().__setitem__(key, value)


def test_a_round_indexes_only_the_new_tokens_whatever_the_context_length():
    for length in (100, 10_000):
        p = PromptLookupProposer(n_max=4, n_min=1)
        seq = list(np.random.default_rng(1).integers(0, 50, length))
        p.begin(seq)
        p._index = CountingDict(p._index)
        CountingDict.writes = 0
        propose(p, seq + [7, 8, 9], 4)
        assert CountingDict.writes == 3 * 4  # three new followed positions x four n-gram sizes


def test_a_tree_holds_the_distinct_continuations_most_recent_first():
    p = PromptLookupProposer(n_max=2, n_min=2)
    seq = [7, 1, 2, 3, 9, 1, 2, 4, 9, 1, 2, 3, 5, 1, 2]
    p.begin(seq)
    tree, n = p.match_tree(2, width=4)
    assert n == 2
    # continuations of [1, 2]: 3 5 (latest), 4 9, 3 9 (shares its 3 with the latest)
    assert tree.tokens == [3, 5, 4, 9, 9] and tree.parents == [-1, 0, -1, 2, 0]
    narrow, _ = p.match_tree(2, width=2)
    assert narrow.tokens == [3, 5, 4, 9]  # the third continuation would be a third branch
    chain = p.propose_tree(seq, 2, width=1)
    assert chain.tokens == propose(p, seq, 2) and chain.parents is None


def test_older_occurrences_are_remembered_per_n_gram_a_few_at_most():
    from edgespec.proposers.prompt_lookup import EARLIER

    p = PromptLookupProposer(n_max=2, n_min=2)
    seq = [1, 2, 0] * 10 + [1, 2]
    p.begin(seq)
    assert len(p._earlier[(1, 2)]) == EARLIER


def test_shorter_suffixes_add_their_continuations_after_the_longest():
    p = PromptLookupProposer(n_max=3, n_min=2)
    seq = [8, 1, 2, 6, 9, 1, 2, 3, 9, 1, 2]
    p.begin(seq)
    tree, n = p.match_tree(1, width=4)
    assert n == 3  # [9, 1, 2] once, followed by 3; [1, 2] also by 6
    assert tree.tokens == [3, 6] and tree.parents == [-1, -1]
    assert p.match(1) == ([3], 3)  # the first branch is the chain's proposal
