"""A verification tree in one target decode (Context.decode_tree / keep_path) on the tiny model: each node's logits
are those of its own path decoded alone, the kept path leaves the cache equal to a fresh decode of it, and every
other node is gone."""
import numpy as np
import pytest

from edgespec.backend import Context, Model
from edgespec.errors import EdgespecError

PREFIX = [5, 17, 42, 99, 3, 8]
ROOT = 11
# two branches sharing their first node, and a third from the root: 12-13-14, 12-15, 16
TOKENS = [12, 13, 14, 15, 16]
PARENTS = [-1, 0, 1, 0, -1]
DRIFT = 1e-2  # an F16 KV cache rounds batches of other shapes a little differently (measured ~2e-3)


@pytest.fixture(scope="module")
def model(tiny_pair):
    m = Model(tiny_pair[0])
    yield m
    m.close()


def alone(model, tokens, probe=None):
    """The last row of decoding tokens (then probe, if given) in a fresh cache."""
    ctx = Context(model, n_ctx=256)
    try:
        if probe is None:
            return ctx.decode(tokens, [len(tokens) - 1])[0]
        ctx.decode(tokens)
        return ctx.decode([probe], [0])[0]
    finally:
        ctx.close()


def path_tokens(i):
    out = []
    while i >= 0:
        out.append(TOKENS[i])
        i = PARENTS[i]
    return out[::-1]


def test_each_node_sees_its_own_path_only(model):
    ctx = Context(model, n_ctx=256, branches=4)
    ctx.decode(PREFIX)
    rows = ctx.decode_tree(ROOT, TOKENS, PARENTS)
    assert rows.shape[0] == len(TOKENS) + 1
    assert np.abs(rows[0] - alone(model, PREFIX + [ROOT])).max() < DRIFT
    for i in range(len(TOKENS)):
        assert np.abs(rows[i + 1] - alone(model, PREFIX + [ROOT] + path_tokens(i))).max() < DRIFT, i
    ctx.close()


@pytest.mark.parametrize("path", [[], [0], [0, 1, 2], [0, 3], [4]])
def test_the_kept_path_leaves_the_cache_as_a_fresh_decode_of_it(model, path):
    ctx = Context(model, n_ctx=256, branches=4)
    ctx.decode(PREFIX)
    ctx.decode_tree(ROOT, TOKENS, PARENTS)
    ctx.keep_path(path)
    kept = PREFIX + [ROOT] + [TOKENS[i] for i in path]
    assert ctx.tokens == kept
    probe = 77
    got = ctx.decode([probe], [0])[0]
    assert np.abs(got - alone(model, kept, probe)).max() < DRIFT
    # the check can tell: the same probe after another branch differs by far more
    other = PREFIX + [ROOT] + ([16] if path[:1] != [4] else [12])
    assert np.abs(alone(model, other, probe) - got).max() > 10 * DRIFT
    ctx.close()


def test_many_tree_rounds_leave_the_cache_as_a_fresh_decode(model):
    rng = np.random.default_rng(3)
    ctx = Context(model, n_ctx=512, branches=4)
    ctx.decode(PREFIX)
    root = ROOT
    for _ in range(40):
        n = int(rng.integers(0, 8))
        parents = [int(rng.integers(-1, i)) for i in range(n)]
        kids = {p for p in parents}
        while sum(i not in kids for i in range(n)) > 4:  # at most 4 leaves
            parents = [int(rng.integers(-1, i)) for i in range(n)]
            kids = {p for p in parents}
        tokens = [int(t) for t in rng.integers(3, 200, size=n)]
        ctx.decode_tree(root, tokens, parents)
        leaf = int(rng.integers(-1, n))
        path = []
        while leaf >= 0:
            path.append(leaf)
            leaf = parents[leaf]
        path = path[::-1][: int(rng.integers(0, 4))]
        ctx.keep_path(path)
        root = int(rng.integers(3, 200))
    held = list(ctx.tokens)
    got = ctx.decode([root], [0])[0]
    assert np.abs(got - alone(model, held, root)).max() < DRIFT
    ctx.close()


def test_trees_are_refused_where_they_do_not_fit(model):
    ctx = Context(model, n_ctx=256, branches=2)
    ctx.decode(PREFIX)
    with pytest.raises(EdgespecError, match="branches"):
        ctx.decode_tree(ROOT, TOKENS, PARENTS)  # three leaves
    with pytest.raises(EdgespecError, match="parent"):
        ctx.decode_tree(ROOT, [1, 2], [-1, 1])
    assert ctx.tokens == PREFIX
    ctx.decode_tree(ROOT, [12, 13], [-1, -1])
    with pytest.raises(EdgespecError, match="not a path"):
        ctx.keep_path([0, 1])
    assert ctx.tokens == PREFIX + [ROOT]  # the tree is dropped, the root kept
    ctx.close()


def test_an_undecided_tree_is_dropped_before_the_next_decode(model):
    ctx = Context(model, n_ctx=256, branches=4)
    ctx.decode(PREFIX)
    ctx.decode_tree(ROOT, TOKENS, PARENTS)
    got = ctx.decode([77], [0])[0]  # as if the round had failed between verify and keep
    assert ctx.tokens == PREFIX + [ROOT, 77]
    assert np.abs(got - alone(model, PREFIX + [ROOT], 77)).max() < DRIFT
    ctx.close()


def test_a_forked_branch_grows_apart_and_the_kept_one_equals_a_fresh_decode(model):
    """A draft model's branch: sequence 1 forks from sequence 0, each grows by one row per decode (together), each
    row equals its own text decoded alone, and end_fork() keeps either as sequence 0, removing the other."""
    for keep, n in ((0, None), (0, 1), (1, 2), (1, 3)):
        ctx = Context(model, n_ctx=256, branches=2)
        ctx.decode(PREFIX)
        ctx.fork(1)
        own = {0: [], 1: []}
        for a, b in ((12, 20), (13, 21), (14, 22)):
            rows = ctx.decode_rows([(a, 0), (b, 1)])
            own[0].append(a)
            own[1].append(b)
            assert np.abs(rows[0] - alone(model, PREFIX + own[0])).max() < DRIFT
            assert np.abs(rows[1] - alone(model, PREFIX + own[1])).max() < DRIFT
        row = ctx.decode_rows([(15, 0)])[0]  # sequence 0 goes on alone
        own[0].append(15)
        assert np.abs(row - alone(model, PREFIX + own[0])).max() < DRIFT
        ctx.end_fork(keep, n)
        kept = PREFIX + (own[keep] if n is None else own[keep][:n])
        assert ctx.tokens == kept
        assert np.abs(ctx.decode([7], [0])[0] - alone(model, kept, 7)).max() < DRIFT
        ctx.close()


def test_forks_are_refused_where_they_cannot_be_and_dropped_by_any_other_use(model):
    ctx = Context(model, n_ctx=256)
    ctx.decode(PREFIX)
    with pytest.raises(EdgespecError, match="branches"):
        ctx.fork(1)
    ctx.close()
    ctx = Context(model, n_ctx=256, branches=2)
    ctx.decode(PREFIX)
    ctx.fork(1)
    with pytest.raises(EdgespecError, match="one row for each"):
        ctx.decode_rows([(12, 0), (13, 0)])
    with pytest.raises(EdgespecError, match="one row for each"):
        ctx.decode_rows([(12, 2)])
    ctx.decode_rows([(12, 0), (20, 1)])
    ctx.decode([13])  # a plain decode keeps sequence 0's own and drops the branch
    assert ctx.tokens == PREFIX + [12, 13]
    assert np.abs(ctx.decode([7], [0])[0] - alone(model, PREFIX + [12, 13], 7)).max() < DRIFT
    ctx.close()


def test_many_forked_rounds_leave_the_cache_as_a_fresh_decode(model):
    # a draft model's rounds: a chain from the root, a branch forked somewhere along it, one of them kept in part
    rng = np.random.default_rng(1)
    ctx = Context(model, n_ctx=512, branches=2)
    ctx.decode(PREFIX)
    for _ in range(30):
        n = int(rng.integers(1, 6))
        chain = [int(t) for t in rng.integers(3, 200, size=n)]
        at = int(rng.integers(0, n))
        ctx.decode(chain[:at])
        ctx.fork(1)
        grown = [int(t) for t in rng.integers(3, 200, size=int(rng.integers(1, 4)))]
        for i in range(max(n - at, len(grown))):
            rows = [(chain[at + i], 0)] if at + i < n else []
            ctx.decode_rows(rows + ([(grown[i], 1)] if i < len(grown) else []))
        keep = int(rng.integers(0, 2))
        ctx.end_fork(keep, int(rng.integers(0, 1 + (len(grown) if keep else n - at))))
    held = list(ctx.tokens)
    assert len(held) > len(PREFIX) + 20
    assert np.abs(ctx.decode([7], [0])[0] - alone(model, held, 7)).max() < DRIFT
    ctx.close()
