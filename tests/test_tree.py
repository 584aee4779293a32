"""Verification trees on small vocabularies: the structure, greedy by hand, and the distribution sampling keeps
(two positions deep, siblings sampled without replacement and deterministic ones mixed in), with negative
controls that break the multi-candidate residual."""
import numpy as np
import pytest

from edgespec.sampling import sample
from edgespec.tree import (Tree, best_subtree, main_line, node_values, subtree, verify_tree_greedy, verify_tree_sampled,
                          without)
from edgespec.verify import residual
from stats_util import assert_follows, chi2_critical, chi2_stat, in_processes


def test_a_chain_is_a_tree_whose_parents_are_the_nodes_before():
    t = Tree.chain([5, 6, 7])
    assert t.parents == [-1, 0, 1] and t.is_chain and t.leaves() == [2] and t.depth(2) == 3


def test_deterministic_paths_share_their_common_prefix():
    t = Tree()
    a = t.add_path(-1, [1, 2, 3], "lookup")
    b = t.add_path(-1, [1, 2, 4], "lookup")
    assert a[:2] == b[:2] and a[2] != b[2] and len(t) == 4 and not t.is_chain
    assert t.children(a[1]) == [a[2], b[2]] and t.path(b[2]) == b and sorted(t.leaves()) == [a[2], b[2]]


def test_a_parent_must_exist():
    with pytest.raises(ValueError):
        Tree().add(0, 1)


def test_greedy_follows_the_argmax_down_the_branch_that_has_it():
    t = Tree()
    t.add_path(-1, [1, 2, 3])
    t.add_path(-1, [4, 5])
    # rows: root, node0 (1), node1 (2), node2 (3), node3 (4), node4 (5)
    assert verify_tree_greedy([4, 0, 0, 0, 5, 9], t) == ([3, 4], 9)  # the second branch, to its end: bonus 9
    assert verify_tree_greedy([1, 2, 7, 0, 0, 0], t) == ([0, 1], 7)  # the first, rejected at its third token
    assert verify_tree_greedy([8, 0, 0, 0, 0, 0], t) == ([], 8)  # no child of the root is the target's


def test_without_removes_and_renormalises():
    assert np.allclose(without(np.array([0.5, 0.25, 0.25]), [0]), [0.0, 0.5, 0.5])
    assert not without(np.array([1.0, 0.0]), [0]).any()


# ---- the distribution -----------------------------------------------------------------------------------------

V = 5
RNG0 = np.random.default_rng(7)
# target and draft distributions after the root (row "root") and after each first token (row t)
P_ROOT = np.array([0.1, 0.35, 0.05, 0.3, 0.2])
P_NEXT = RNG0.dirichlet(np.ones(V), size=V)
Q_ROOT = np.array([0.4, 0.1, 0.3, 0.1, 0.1])
Q_NEXT = RNG0.dirichlet(np.ones(V), size=V)


def draw_tree(rng, width, lookup, q_of=without):
    """The root's children: an optional deterministic one (lookup's guess, token 3), then `width` drawn from Q_ROOT
    without replacement; under each, one token drawn from its Q_NEXT row. q_of(q, earlier tokens): the q each
    sampled sibling records."""
    t, earlier = Tree(), []
    if lookup:
        t.add(-1, 3, "lookup")
        earlier.append(3)
    for _ in range(width):
        qi = without(Q_ROOT, earlier)
        if not qi.any():
            break
        x = sample(qi, rng)
        node = t.add(-1, x, "draft", q_of(Q_ROOT, earlier))
        earlier.append(x)
        t.add(node, sample(Q_NEXT[x], rng), "draft", Q_NEXT[x])
    return t


def rows(t):
    """The target's rows for a tree: the root's, then each node's (after the path to it)."""
    out = [P_ROOT]
    for i in range(len(t)):
        out.append(P_NEXT[t.tokens[i]] if t.parents[i] == -1 else P_ROOT)  # depth 2 rows are never the test's
    return np.stack(out)


def first_two(width, lookup, n, rng, verify=verify_tree_sampled, q_of=without):
    """The first two tokens of n rounds, as pairs a * V + b (the second from a plain draw where the round ended
    after one)."""
    out = np.empty(n, dtype=int)
    for i in range(n):
        t = draw_tree(rng, width, lookup, q_of)
        path, nxt = verify(rows(t), t, rng)
        text = [t.tokens[j] for j in path] + [nxt]
        if len(text) < 2:
            text.append(sample(P_NEXT[text[0]], rng))
        out[i] = text[0] * V + text[1]
    return out


JOINT = (P_ROOT[:, None] * P_NEXT).ravel()
N = 60_000


def first_two_counts(width, lookup, n, seed, verify=verify_tree_sampled, q_of=without):
    """first_two's pairs counted, from a generator of its own seed (a part of a split simulation)."""
    return np.bincount(first_two(width, lookup, n, np.random.default_rng(seed), verify, q_of), minlength=V * V)


@pytest.mark.parametrize("width,lookup", [(1, False), (2, False), (3, False), (2, True), (4, True)])
def test_tree_output_follows_the_target_two_positions_deep(width, lookup):
    seed = 100 + width + 10 * lookup
    parts = in_processes(first_two_counts, [(width, lookup, N // 2, seed), (width, lookup, N - N // 2, seed + 1000)])
    assert_follows(sum(parts), JOINT)


def test_wider_trees_accept_more():
    rng = np.random.default_rng(5)

    def mean_accepted(width):
        total = 0
        for _ in range(4000):
            t = draw_tree(rng, width, False)
            total += len(verify_tree_sampled(rows(t), t, rng)[0])
        return total / 4000

    assert mean_accepted(3) > mean_accepted(1) + 0.1


def _proposers_own_q(q, earlier):
    """The mutation: a sibling verified against the proposer's q, not the renormalized one it was drawn from."""
    return q


def _against_p_itself(p, tree, rng):
    """The mutation: each sibling tested against p itself, not the residual the rejected ones left."""
    node, path = -1, []
    while True:
        for c in tree.children(node):
            r = p[node + 1]
            x, qc = tree.tokens[c], tree.q[c]
            if rng.random() * (1.0 if qc is None else qc[x]) < r[x]:
                path.append(c)
                node = c
                break
        else:
            return path, sample(residual(p[node + 1], tree.q[c], tree.tokens[c]) if tree.children(node)
                                else p[node + 1], rng)


def test_the_check_catches_siblings_that_carry_the_proposers_own_q():
    """Negative control: a sibling drawn without replacement but verified against the proposer's q (not the
    renormalized one it was drawn from) biases the output."""
    counts = sum(in_processes(first_two_counts, [(3, False, N // 2, 11, verify_tree_sampled, _proposers_own_q),
                                                 (3, False, N - N // 2, 1011, verify_tree_sampled, _proposers_own_q)]))
    stat, df = chi2_stat(counts, JOINT)
    assert stat > chi2_critical(df)


def test_the_check_catches_a_residual_not_carried_to_the_next_sibling():
    """Negative control: each sibling tested against p itself, not the residual the rejected ones left."""
    counts = sum(in_processes(first_two_counts, [(3, True, N // 2, 12, _against_p_itself),
                                                 (3, True, N - N // 2, 1012, _against_p_itself)]))
    stat, df = chi2_stat(counts, JOINT)
    assert stat > chi2_critical(df)


# ---- which nodes are worth verifying --------------------------------------------------------------------------

def test_node_values_multiply_down_the_tree_and_across_failed_siblings():
    t = Tree()
    t.add_path(-1, [1, 2])  # nodes 0, 1
    t.add(-1, 3)  # node 2: the root's second child
    v = node_values(t, lambda i: {0: 0.5, 1: 0.8, 2: 0.4}[i])
    assert v == pytest.approx([0.5, 0.4, 0.5 * 0.4])  # the second child is tried only where the first failed


def test_best_subtree_keeps_what_pays_for_its_rows():
    t = Tree()
    t.add_path(-1, [1, 2])  # a likely chain of two ...
    t.add(-1, 3)  # ... and two long shots beside it
    t.add(0, 4)
    values = [0.9, 0.8, 0.1, 0.05]
    assert best_subtree(t, values, lambda m: 1.0) == [0, 1, 2, 3]  # rows cost nothing: verify everything
    assert best_subtree(t, values, lambda m: 1.0 + 0.3 * (m - 1)) == [0, 1]  # 30% of a step a row: not the shots
    assert best_subtree(t, values, lambda m: float(m)) == []  # a row costs a step: nothing pays


def test_best_subtree_keeps_the_proposers_order_of_siblings():
    t = Tree()
    t.add(-1, 1)
    t.add(-1, 2)  # a second sibling the estimates rate above the first
    assert best_subtree(t, [0.1, 0.5], lambda m: 1.0 + 0.01 * (m - 1)) == [0, 1]  # not the second alone
    assert best_subtree(t, [0.1, 0.5], lambda m: float(m) * 0.7 + 0.3) == []


def test_a_kept_subtree_is_renumbered_with_its_parents():
    t = Tree()
    t.add_path(-1, [1, 2, 3])
    t.add_path(-1, [4, 5])
    s = subtree(t, [0, 3, 4])
    assert s.tokens == [1, 4, 5] and s.parents == [-1, -1, 1] and main_line(s) == [0]


def test_keep_tree_on_a_chain_is_keep():
    from edgespec.tuning import CostModel, DraftLength

    verify = {m: 0.1 * (1 + 0.2 * (m - 1)) for m in range(1, 20)}
    for accepted in ([0.9] * 8, [0.5] * 8, [0.1] * 8):
        d = DraftLength(8, True, CostModel(verify_s=verify))
        d.cost.reached, d.cost.accepted = [10.0] * 8, [10.0 * a for a in accepted]
        kept = d.keep_tree(Tree.chain(list(range(8))))
        assert len(kept) == d.keep(8) and kept.is_chain


def test_siblings_learn_how_often_they_pass_where_the_first_failed():
    from edgespec.tuning import DraftLength

    d = DraftLength(8, True)
    t = Tree()
    t.add_path(-1, [1, 2])
    t.add(-1, 3)
    t.add(-1, 4)
    for _ in range(20):
        d.observe_tree(t, [2], 0.0)  # the first branch failed at once, the second sibling passed
    alt = d.alternatives
    assert alt.reached[0] > 5 and alt.accepted[0] == pytest.approx(alt.reached[0])  # the 1st alternative: passed
    assert len(alt.reached) == 1  # ... so the 2nd was never tried
    assert d.cost.accepted[0] == 0 and d.cost.reached[0] > 5  # the first-ranked branch: failed at position 1


def test_a_fixed_k_verifies_a_fixed_shape_of_second_choices():
    from edgespec.tuning import DraftLength

    d = DraftLength(8, adaptive=False)
    assert d.second_choices([0.9] * 5, 1, 2) == [0, 1]  # positions 1 and 2 of the round, the draft's first two
    assert d.second_choices([0.9] * 5, 1, 9) == [0, 1, 2, 3]
    assert d.second_choices([0.9] * 5, 1, 2, adaptive=True) == []  # by cost: nothing timed yet


def test_a_branch_is_drafted_as_long_as_its_rows_pay():
    from edgespec.tuning import CostModel, DraftLength

    def policy(verify, adaptive=True):
        d = DraftLength(8, adaptive, CostModel(verify_s=verify))
        d.alternatives.reached, d.alternatives.accepted = [20.0], [12.0]  # a second choice passes 60% of the time
        return d

    flat = {m: 0.1 for m in range(1, 20)}  # memory-bound: rows cost nothing until 20
    steep = {m: 0.1 * m for m in range(1, 20)}  # compute-bound: each row costs a step
    accept = [0.5, 0.9, 0.9, 0.9, 0.9]
    assert policy(flat).branch_length(accept, 0, 4, 0.0, 0.0) == 4  # free rows: all of it
    assert policy(flat).branch_length(accept, 0, 4, 0.0, 0.05) < 4  # a dear draft row: less
    assert policy(steep).branch_length(accept, 0, 4, 0.0, 0.0) == 0
    assert policy(flat).branch_length([0.99] * 5, 0, 4, 0.0, 0.01) == 0  # the chain seldom fails there
    assert policy(steep, adaptive=False).branch_length(accept, 0, 3, 0.0, 0.0) == 3  # a fixed shape
    assert policy(flat).branch_length(accept, 3, 4, 0.0, 0.0) == 1  # no deeper than the chain


def test_what_alternatives_showed_goes_into_the_profile_entry_and_back():
    from edgespec import profile
    from edgespec.tuning import DraftLength

    d = DraftLength(8, True)
    t = Tree()
    t.add_path(-1, [1, 2])
    t.add(-1, 3)
    for _ in range(10):
        d.observe_tree(t, [2], 0.01)  # the first branch failed, its sibling passed
    entry = d.learned()
    assert entry["by_key"]["alternatives"]["accepted"][0] > 0
    merged = profile.merge(None, entry)
    fresh = DraftLength(8, True)
    fresh.seed(merged)
    assert fresh.alternatives.acceptance(0) > 0.6 > fresh.alternatives.prior_accept  # not the prior any more
    assert "alternatives" not in fresh.by_key
