"""Verification trees through the real loop: prompt lookup offering several continuations, checked in one target
decode. Greedy output is the target's own (tiny model; SmolLM2 in F16 exactly), sampling keeps the target's
distribution, and the cache after many tree rounds equals a fresh decode."""
import numpy as np
import pytest

import edgespec
from edgespec.backend import Context, Model
from edgespec.proposers import PromptLookupProposer
from conftest import PROMPTS
from identity import assert_identical_or_near_tie
from stats_util import assert_follows, first_two_counts
from test_proposers_engine import FixedCosts

TOP5 = dict(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0)
# texts whose n-grams are followed by different continuations in different places
BRANCHING = ["the cat sat. the dog ran. the cat ran. the dog sat. the", "ab ac ad ab ac ad ab ae ab",
             "x = 1\ny = 2\nx = 3\ny = 4\nx =", "red blue, red green, red blue, red", "1 2 3 1 2 4 1 2 5 1 2",
             # random letters from a small alphabet: every short n-gram has several continuations
             *(" ".join(np.random.default_rng(s).choice(list("abc"), 80)) for s in range(4))]


class Trees:
    """Counts the tree decodes of a context (and checks each tree's size)."""

    def __init__(self, ctx, monkeypatch):
        self.calls, self.nodes = 0, 0
        real = ctx.decode_tree

        def counting(root, tokens, parents):
            self.calls += 1
            self.nodes += len(tokens)
            return real(root, tokens, parents)

        monkeypatch.setattr(ctx, "decode_tree", counting)


def tree_engine(path, verify=lambda m: 1.0, width=4, n_ctx=1024):
    """Lookup alone, adaptive, its costs fixed: a verify of any size costs one step (memory-bound), so the whole
    tree is worth verifying."""
    t = Model(path)
    cost = FixedCosts(verify_s={m: verify(m) for m in range(1, 40)}, draft_s=0.0)
    return edgespec.Engine(Context(t, n_ctx, branches=width), PromptLookupProposer(), 8, True, cost, tree_width=width)


def test_greedy_identity_with_trees(tiny_pair, monkeypatch):
    e = tree_engine(tiny_pair[0])
    trees = Trees(e.target, monkeypatch)
    for prompt in PROMPTS + BRANCHING:
        tokens = e.tokenize(prompt)
        plain = e.generate(tokens, max_tokens=48, speculative=False)
        spec = e.generate(tokens, max_tokens=48)
        assert_identical_or_near_tie(e.model, tokens, plain.tokens, spec.tokens, 8, trees=True)
    e.close()
    assert trees.calls >= 10 and trees.nodes > 3 * trees.calls  # (the tiny model soon loops: most rounds chains)


def test_the_cache_after_many_tree_rounds_equals_a_fresh_decode(tiny_pair, monkeypatch):
    e = tree_engine(tiny_pair[0], n_ctx=2048)
    trees = Trees(e.target, monkeypatch)
    seq = []
    for prompt in BRANCHING * 2:  # one growing text: each turn keeps the cache the tree rounds before it left
        seq += e.tokenize(prompt)
        seq += e.generate(seq, max_tokens=24).tokens
    assert trees.calls >= 10
    held = list(e.target.tokens)
    got = e.target.decode([42], [0])[0]
    fresh = Context(e.model, n_ctx=2048)
    fresh.decode(held)
    expected = fresh.decode([42], [0])[0]
    fresh.close(), e.close()
    assert np.abs(got - expected).max() < 1e-2  # an F16 cache rounds batches of other shapes (~2e-3)


def test_sampled_first_two_tokens_follow_the_target_with_trees(tiny_pair, monkeypatch):
    e = tree_engine(tiny_pair[0])
    trees = Trees(e.target, monkeypatch)
    # token ids: ";=>" followed by 187, 205 and 139 in turn, then ";=>" again: lookup offers three continuations,
    # and the tiny target gives their first tokens 0.06, 0.40 and 0.39 (top-5 sampling): every sibling matters
    prompt = [59, 61, 62, 187, 59, 61, 62, 205, 59, 61, 62, 139, 59, 61, 62]
    counts, expected = first_two_counts(e, prompt, TOP5, 3000, max_tokens=4)
    e.close()
    assert trees.calls >= 3000  # the first round of every generation is a tree
    assert_follows(counts, expected)


def test_a_compute_bound_target_verifies_no_more_than_pays(tiny_pair, monkeypatch):
    # each verify row costs as much as a step: no proposal can pay, so the tree is cut to nothing (a plain step)
    # but for the occasional one-deep recheck
    e = tree_engine(tiny_pair[0], verify=lambda m: float(m))
    trees = Trees(e.target, monkeypatch)
    for prompt in BRANCHING:
        tokens = e.tokenize(prompt)
        assert e.generate(tokens, max_tokens=40).tokens == e.generate(tokens, max_tokens=40, speculative=False).tokens
    e.close()
    assert trees.calls == 0


def test_a_tree_wider_than_the_context_allows_is_refused(tiny_pair):
    t = Model(tiny_pair[0])
    with pytest.raises(edgespec.EdgespecError, match="branches"):
        edgespec.Engine(Context(t, 256), PromptLookupProposer(), tree_width=4)
    with pytest.raises(edgespec.EdgespecError, match="tree width"):
        edgespec.Engine.load(tiny_pair[0], lookup=True, tree_width=0)
    t.close()
    with edgespec.Engine.load(tiny_pair[0], lookup=True, tree_width=2) as e:
        for bad in (0, 3):  # a call may narrow the engine's width, not pass its context's
            with pytest.raises(edgespec.InvalidArgument, match="tree_width"):
                e.generate("abc abc ab", max_tokens=4, tree_width=bad)
        assert e.generate("abc abc ab", max_tokens=4, tree_width=1).tokens  # still usable


def test_smollm_f16_greedy_with_trees_equals_plain_exactly(smollm_f16, monkeypatch):
    e = tree_engine(smollm_f16, n_ctx=2048)
    trees = Trees(e.target, monkeypatch)
    prompts = ["List the planets in order, one per line, twice: first as written, then in reverse.",
               "Write a Python function that checks whether a string is a palindrome, then a version for lists.",
               "Repeat after me: the red fox ran, the red hen sat, the red fox sat, the red hen ran."]
    for prompt in prompts:
        tokens = e.tokenize(prompt, chat_format=True)
        plain = e.generate(tokens, max_tokens=64, speculative=False)
        spec = e.generate(tokens, max_tokens=64)
        assert spec.tokens == plain.tokens, prompt
    e.close()
    assert trees.calls >= 5



def draft_tree_engine(target, draft, width=3, n_ctx=1024, lookup=False, branch=False, row=0.01):
    """A draft model (alone, or behind lookup) with trees on: rows cost almost nothing (`row` of a step each), so
    its second choices are worth verifying as sibling leaves. branch: its context made for a branch, which it drafts
    at its first position whatever its confidence."""
    from edgespec.proposers import DraftModelProposer, HybridProposer

    t, d = Model(target), Model(draft)
    dm = DraftModelProposer(Context(d, n_ctx, branches=2 if branch else 1), t.n_vocab)
    dm.split = 1.0
    proposer = HybridProposer(dm, PromptLookupProposer()) if lookup else dm
    verify = {m: 1.0 + row * (m - 1) for m in range(1, 40)}
    e = edgespec.Engine(Context(t, n_ctx, branches=width), proposer, 4, True,
                        FixedCosts(verify_s=verify, draft_s=0.0 if lookup else 0.01), tree_width=width)
    e.policy(dm).cost = FixedCosts(verify_s=verify, draft_s=0.01)
    return e


def leaf_rounds(stats):
    return sum(n for why, n in stats.rounds_by_reason.items() if "tree" in why.split("+"))


@pytest.mark.parametrize("lookup", [False, True])
def test_greedy_identity_with_the_draft_models_second_choices(tiny_pair, lookup):
    e = draft_tree_engine(*tiny_pair, lookup=lookup)
    trees = 0
    for prompt in PROMPTS + BRANCHING:
        tokens = e.tokenize(prompt)
        plain = e.generate(tokens, max_tokens=40, speculative=False)
        spec = e.generate(tokens, max_tokens=40)
        assert_identical_or_near_tie(e.model, tokens, plain.tokens, spec.tokens, 8, trees=True)
        trees += leaf_rounds(spec.stats)
    e.close()
    assert trees >= 50


def sampled_first_two(e, rounds=8000):
    trees = []
    counts, expected = first_two_counts(e, e.tokenize("Once upon a time"), TOP5, rounds, max_tokens=4,
                                        each=lambda r: trees.append(leaf_rounds(r.stats)))
    return counts, expected, sum(trees)


def test_sampled_with_the_draft_models_second_choices_follows_the_target(tiny_pair):
    e = draft_tree_engine(*tiny_pair)
    counts, expected, trees = sampled_first_two(e)
    e.close()
    assert trees >= 5000
    assert_follows(counts, expected)


def test_sampled_hybrid_with_second_choices_follows_the_target(tiny_pair):
    # lookup's deterministic tokens first, the draft model's sampled ones and their second choices after them
    e = draft_tree_engine(*tiny_pair, lookup=True)
    trees = []
    counts, expected = first_two_counts(e, e.tokenize("abc abc abc abc ab"), TOP5, 3000, max_tokens=6,
                                        each=lambda r: trees.append(leaf_rounds(r.stats)))
    e.close()
    assert sum(trees) >= 1500
    assert_follows(counts, expected)


def test_the_check_catches_a_second_choice_that_carries_the_draft_models_own_q(tiny_pair, monkeypatch):
    """Negative control: the second choice drawn from the draft's own q (a draw equal to the first is dropped, so
    in effect drawn without it) and verified against that q, not the renormalized one."""
    import edgespec.proposers.draft_model as dm
    from stats_util import chi2_critical, chi2_stat

    monkeypatch.setattr(dm, "without", lambda q, removed: q)
    e = draft_tree_engine(*tiny_pair)
    counts, expected, trees = sampled_first_two(e)
    e.close()
    stat, df = chi2_stat(counts, expected)
    assert trees >= 5000 and stat > chi2_critical(df)


def test_smollm_f16_with_second_choices_equals_plain_exactly(smollm_f16):
    from edgespec import default_model

    for lookup in (False, True):
        # rows at a thousandth of a step: SmolLM2's Q4_1 passes about 95% of its tokens, and a second choice is
        # worth its row only where the first may fail (at 1% a row, after the first prompt it seldom was)
        e = draft_tree_engine(smollm_f16, default_model.path(), n_ctx=2048, lookup=lookup, row=0.001)
        trees = 0
        prompts = ["List the planets in order, one per line.", "Explain in two sentences why the sky is blue.",
                   "Write a Python function that reverses a list."]
        for prompt in prompts:
            tokens = e.tokenize(prompt, chat_format=True)
            plain = e.generate(tokens, max_tokens=48, speculative=False)
            spec = e.generate(tokens, max_tokens=48)
            assert spec.tokens == plain.tokens, (prompt, lookup)
            trees += leaf_rounds(spec.stats)
        e.close()
        assert trees >= 10, lookup


@pytest.mark.parametrize("kind", ["lookup", "draft", "hybrid"])
def test_trees_stop_at_a_full_context(tiny_pair, kind):
    # trees add nodes beside the chain: near the end of the context they must still fit (and the output end there)
    e = tree_engine(tiny_pair[0], n_ctx=256, width=4) if kind == "lookup" else \
        draft_tree_engine(*tiny_pair, width=4, n_ctx=256, lookup=kind == "hybrid")
    tokens = e.tokenize(" ".join(BRANCHING))[:200]
    r = e.generate(tokens, max_tokens=500)
    plain = e.generate(tokens, max_tokens=500, speculative=False)
    e.close()
    assert r.finish_reason == "length" and len(tokens) + len(r.tokens) >= 255
    assert r.tokens[:20] == plain.tokens[:20]


@pytest.mark.slow
def test_qwen_f16_pair_with_trees_equals_plain_exactly(monkeypatch):
    from test_real_models import PROMPTS as REAL, qwen_pair

    target, draft = qwen_pair("1.5b-instruct-f16")
    for kind in ("lookup", "draft", "hybrid", "draft+branch", "hybrid+branch"):
        e = tree_engine(target, n_ctx=2048) if kind == "lookup" else \
            draft_tree_engine(target, draft, width=4, n_ctx=2048, lookup=kind.startswith("hybrid"),
                              branch=kind.endswith("branch"))
        trees = Trees(e.target, monkeypatch)
        for prompt in REAL[:3] + ["Repeat after me: the red fox ran, the red hen sat, the red fox sat, the red hen ran."]:
            tokens = e.tokenize(prompt, chat_format=True)
            plain = e.generate(tokens, max_tokens=48, speculative=False)
            spec = e.generate(tokens, max_tokens=48)
            assert spec.tokens == plain.tokens, (kind, prompt)
        e.close()
        assert trees.calls >= (1 if kind == "lookup" else 3), kind  # lookup: few prompts repeat themselves


def test_a_fixed_k_with_trees_verifies_second_choices_every_round(tiny_pair):
    e = edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=1024, tree_width=3)
    for prompt in PROMPTS[:8]:
        tokens = e.tokenize(prompt)
        plain = e.generate(tokens, max_tokens=30, speculative=False)
        spec = e.generate(tokens, max_tokens=30, draft_max=4, adaptive=False)
        assert_identical_or_near_tie(e.model, tokens, plain.tokens, spec.tokens, 8, trees=True)
        rounds = spec.stats.rounds_by_reason
        assert leaf_rounds(spec.stats) >= sum(rounds.values()) - rounds.get("first", 0) - 2, rounds  # the last may be short
    e.close()


class Branches:
    """Counts, per round, how many tokens of the draft model's branch the accepted path took (0: none)."""

    def __init__(self, engine):
        from edgespec.proposers import DraftModelProposer

        dm = next(p for p in getattr(engine.proposer, "parts", (engine.proposer,)) if isinstance(p, DraftModelProposer))
        self.took = []
        real = dm.keep_branch

        def counting(n):
            self.took.append(n)
            real(n)

        dm.keep_branch = counting
        self.draft = dm

    @property
    def deep(self):  # rounds whose path went past the branch's first token
        return sum(n >= 2 for n in self.took)


@pytest.mark.parametrize("lookup", [False, True])
def test_greedy_identity_with_the_draft_models_branches(tiny_pair, lookup):
    e = draft_tree_engine(*tiny_pair, lookup=lookup, branch=True)
    branches = Branches(e)
    for prompt in PROMPTS + BRANCHING:
        tokens = e.tokenize(prompt)
        plain = e.generate(tokens, max_tokens=40, speculative=False)
        spec = e.generate(tokens, max_tokens=40)
        assert_identical_or_near_tie(e.model, tokens, plain.tokens, spec.tokens, 8, trees=True)
    # the draft's cache after all those branches holds what it says it holds, and no branch's cells
    from edgespec.backend.llama import ll

    ctx = branches.draft.ctx
    held = list(ctx.tokens)
    assert ll.llama_memory_seq_pos_max(ctx._mem, 0) == len(held) - 1
    assert ll.llama_memory_seq_pos_max(ctx._mem, 1) == -1
    row = ctx.decode([7], [0])[0]
    fresh = Context(ctx.model, 1024)
    # ~200 tokens decoded a few at a time against all at once: a chain-only draft differs by up to ~0.02 here too
    assert np.abs(row - fresh.decode(held + [7], [len(held)])[0]).max() < 0.05
    fresh.close()
    e.close()
    assert len(branches.took) >= 100 and branches.deep >= 20, branches.took


SPREAD = "x = 1\ny = 2\nx = 3\ny = 4\nx ="  # the tiny draft and target differ much at its next positions


def first_three(e, rounds=5000):
    """The first round is a plain step, so a branch at the second round's first position decides the second and
    third tokens: the joint of the first three against the exact one (top-5, 125 outcomes)."""
    branches = Branches(e)
    counts, expected = first_two_counts(e, e.tokenize(SPREAD), TOP5, rounds, n=3, max_tokens=4)
    e.close()
    return counts, expected, branches


def test_sampled_with_the_draft_models_branches_follows_the_target(tiny_pair):
    counts, expected, branches = first_three(draft_tree_engine(*tiny_pair, branch=True))
    assert branches.deep >= 300, branches.deep
    assert_follows(counts, expected)


def test_a_sampled_branch_carries_the_q_each_of_its_tokens_was_drawn_from(tiny_pair):
    """The chi-square above sees a branch only where its first round's head passed (weak against a wrong q: a flat
    one in place of the draft's gave 63 against a threshold of 123), so the q each branch token carries is checked
    directly: the draft's distribution after the text, the chain up to the fork, the second choice and the branch's
    tokens before it, decoded alone."""
    from edgespec import SamplingConfig
    from edgespec.sampling import probabilities

    e = draft_tree_engine(*tiny_pair, branch=True)
    dm = Branches(e).draft
    seen, real = [], dm.propose

    def spy(seq, *args, **kwargs):
        prop = real(seq, *args, **kwargs)
        if prop.branch is not None:
            seen.append((list(seq), prop))
        return prop

    dm.propose = spy
    cfg = SamplingConfig(**TOP5)
    for seed in range(12):
        e.generate(e.tokenize(SPREAD), sampling=SamplingConfig(**TOP5, seed=seed), max_tokens=12)
    fresh = Context(dm.ctx.model, 256)
    checked = 0
    for seq, prop in seen[:30]:
        at, grown, qs = prop.branch
        text = seq + prop.tokens[:at] + [prop.alternatives[at][0]]
        for token, q in zip(grown, qs):
            fresh.clear()
            want = probabilities(fresh.decode(text, [len(text) - 1])[0], cfg)
            assert np.abs(q[:len(want)] - want).max() < 0.02 and q[token] > 0
            text.append(token)
            checked += 1
    fresh.close(), e.close()
    assert checked >= 20


def test_smollm_f16_with_branches_equals_plain_exactly(smollm_f16):
    from edgespec import default_model

    for lookup in (False, True):
        e = draft_tree_engine(smollm_f16, default_model.path(), n_ctx=2048, lookup=lookup, branch=True)
        branches = Branches(e)
        branches.draft.split = 0.6  # where the draft is unsure: a near copy of the target rarely fails elsewhere
        for prompt in ["List the planets in order, one per line.", "Explain in two sentences why the sky is blue.",
                       "Write a Python function that reverses a list."]:
            # (llama.cpp's ChatML, without SmolLM2's default system prompt: texts where its draft is unsure often)
            tokens = e.tokenize_chat([("user", prompt)], "chatml")
            plain = e.generate(tokens, max_tokens=48, speculative=False)
            spec = e.generate(tokens, max_tokens=48, draft_max=4, adaptive=False)  # a branch every round
            assert spec.tokens == plain.tokens, (prompt, lookup)
        e.close()
        assert len(branches.took) >= 10 and max(branches.took) >= 2, (lookup, branches.took)
