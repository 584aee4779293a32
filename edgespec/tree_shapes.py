"""A draft-length policy's choices for verification trees (tree.py): which nodes of a free proposer's tree to verify,
which of a draft model's second choices get a row, how long a branch after one is drafted, and what a verified tree
teaches. A mixin of tuning.DraftLength, whose cost model, acceptance by kind and alternatives it reads."""
from __future__ import annotations

from typing import Sequence

from .tree import Tree, best_subtree, main_line, node_values, subtree, worthwhile_leaves

ALTERNATIVES = "alternatives"  # the profile's kind for a tree's later siblings (DraftLength.alternatives)


class TreeShapes:
    def keep_tree(self, tree: Tree, key: object = None, most: int | None = None) -> Tree:
        """keep() for a tree of free proposals (a lookup's several continuations): the nodes most likely to pass, as
        many as give the least expected verify time per token (tree.best_subtree). A first child at depth d passes
        as a chain's position d does (the acceptance for this kind of proposal); a later sibling as alternatives of
        its rank have, given the ones before failed (measured apart: `alternatives`). At most `most` nodes (the
        room left in the context)."""
        c = self.keyed(key)
        if c.t_verify(1) is None or not len(tree):
            return tree
        depth, rank = tree.shape()
        along, alt = c.acceptances(max(depth)), self.alternatives.acceptances(max(rank) + 1)
        kept = best_subtree(tree, node_values(tree, lambda i: alt[rank[i] - 1] if rank[i] else along[depth[i] - 1]),
                            c.t_verify, most)
        if not kept and self.keep(1, key) == 1:  # declined: verified one deep now and then all the same
            kept = [0]
        return subtree(tree, kept)

    def second_choices(self, accept: Sequence[float], offset: int, most: int, adaptive: bool | None = None
                       ) -> list[int]:
        """Which of a draft model's second choices get a verify row, as sibling leaves of its tokens: the round's
        chain passes position p with chance accept[p] given the positions before it passed, its first `offset`
        tokens being an earlier part's; returns positions counted from this part's first token. A second choice
        passes, where the first failed, as alternatives have (measured apart). Not adaptive (a fixed K): a fixed
        shape, the first `most` positions."""
        if len(accept) <= offset or most <= 0:
            return []
        if not (self.adaptive if adaptive is None else adaptive):
            return list(range(min(most, len(accept) - offset)))
        if self.cost.t_verify(1) is None:
            return []
        reach, chain, leaves = 1.0, [], []
        g = self.alternatives.acceptance(0)
        for p, a in enumerate(accept):
            if p >= offset:
                leaves.append(reach * (1.0 - a) * g)
            reach *= a
            chain.append(reach)
        return worthwhile_leaves(chain, leaves, self.cost.t_verify, most)

    def branch_length(self, accept: Sequence[float], at: int, most: int, draft_s: float, extra_s: float | None,
                      adaptive: bool | None = None) -> int:
        """How many tokens a draft model drafts after its second choice at position `at` of the round (accept: the
        round's chain passes position p with chance accept[p] given the ones before passed; draft_s: what its
        drafting costs), each in a decode of the chain's, so each costs a verify row and a draft row (extra_s):
        as many as give the least expected time per token, the second choice counted with them (0: the choice
        and a branch after it are not worth their rows, or the choice alone is best). A branch token passes, once
        the choice did, as the chain's token as deep does. Not adaptive (a fixed K): `most`."""
        if most <= 0 or not accept:
            return 0
        if not (self.adaptive if adaptive is None else adaptive):
            return most
        c = self.cost
        if c.t_verify(1) is None:
            return 0
        extra = extra_s if extra_s is not None else 0.5 * (c.t_draft(1) or 0.0)
        reach, expected = 1.0, 1.0
        for p, a in enumerate(accept):
            if p == at:
                value = reach * (1.0 - a) * self.alternatives.acceptance(0)
            reach *= a
            expected += reach
        rows = len(accept) + 1
        cost = c.t_verify(rows) + draft_s
        best, best_m = cost / expected, 0
        for m in range(most + 1):  # m tokens after the second choice
            if m:
                if at + m >= len(accept):
                    break
                value *= accept[at + m]
            rows, expected = rows + 1, expected + value
            cost += c.t_verify(rows) - c.t_verify(rows - 1) + (extra if m else 0.0)
            if cost / expected < best:
                best, best_m = cost / expected, m
        return best_m

    def observe_tree(self, tree: Tree, path: Sequence[int], seconds: float, key: object = None) -> None:
        """What verification made of a tree this policy's proposer offered: its first-ranked branch counts as a
        chain would (acceptance by position), the siblings tried where that branch failed as alternatives."""
        main = main_line(tree)
        n = next((i for i, (a, b) in enumerate(zip(main, path)) if a != b), min(len(main), len(path)))
        self.observe(len(main), n, seconds, key)
        if n < len(main):
            siblings = [i for i, p in enumerate(tree.parents) if p == (main[n - 1] if n else -1)][1:]
            if siblings:
                chosen = path[n] if len(path) > n else None
                tried = siblings.index(chosen) + 1 if chosen in siblings else len(siblings)
                self.alternatives.observe_tries(tried, chosen in siblings)
