"""A chain round's verification tree (a mixin of chain.Chain): a draft model's second choices and its branch as
leaves beside the chain, and a lone free proposer's tree, each node where it is expected to pay (tuning.DraftLength's
TreeShapes decide which)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from .proposers import Proposal
from .tree import Tree

if TYPE_CHECKING:
    from .chain import Link


class ChainTrees:
    def _branching(self, link: Link, offset: int, k: int) -> Callable[[int], int]:
        """For a draft model drafting k tokens after `offset` of earlier parts': how many to draft after its second
        choice at its position i (DraftLength.branch_length), from the round's measured acceptance only."""
        def length(i: int) -> int:
            accept = self._accept()[:offset] + link.policy.keyed(None).acceptances(k)
            return link.policy.branch_length(accept, offset + i, k - 1 - i, link.policy.cost.t_draft(k) or 0.0,
                                             link.part.extra_row_s, self.adaptive)
        return length

    def _second_choices(self, tokens: list[int], rows: int) -> tuple[list, list[int]] | None:
        """Beside the chain, (token, q) and parent of each node: the draft's second choices worth a row as leaves
        (DraftLength.second_choices), then its branch if it drafted one; `rows` nodes in all; None: none."""
        link = next((x for x in self._used if x.alternatives), None)
        if link is None:
            return None
        n_chain, room, fork = len(tokens), rows - len(tokens), None
        if link.branch is not None and room > 0 and self.tree_width > 1:
            at, grown, bq = link.branch
            fork = (link.start + at, [link.alternatives[at]] + [(t, bq[j] if bq else None)
                                                               for j, t in enumerate(grown[:room - 1])])
        most = min(self.tree_width - 1 - (fork is not None), room - (len(fork[1]) if fork else 0))
        leaves, parents = [], []
        for p in link.policy.second_choices(self._accept(), link.start, most + (fork is not None), self.adaptive):
            token, q = link.alternatives[p]
            p += link.start
            if token >= 0 and token != tokens[p] and (fork is None or p != fork[0]) and len(leaves) < most:
                leaves.append((token, q))
                parents.append(p - 1)
        at = {parents[i] + 1 for i in range(len(leaves))}
        if fork is not None:
            head = n_chain + len(leaves)
            leaves += fork[1]
            parents += [fork[0] - 1] + list(range(head, head + len(fork[1]) - 1))
            at.add(fork[0])
            fork = (fork[0], head, len(fork[1]))
        if not leaves:
            return None
        self._leaves = (link, n_chain, at, fork)
        return leaves, parents

    def _tree(self, link: Link, seq: list[int], k: int, rows: int) -> Proposal:
        """A free proposer's continuations as a tree, cut to the nodes worth verifying (DraftLength.keep_tree), at
        most `rows` of them."""
        t0 = time.perf_counter()
        prop = link.part.propose_tree(seq, k, self.tree_width)
        n = len(prop.tokens)
        offered = Tree(prop.tokens, prop.parents or list(range(-1, n - 1)), [None] * n, prop.sources)
        tree = link.policy.keep_tree(offered, prop.key, rows)
        link.seconds, link.key, link.start, link.n, link.tree = time.perf_counter() - t0, prop.key, 0, len(tree), tree
        self._used.append(link)
        return Proposal(tree.tokens, None, tree.sources, prop.key, None if tree.is_chain else tree.parents)
