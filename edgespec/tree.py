"""Verification trees: several candidate continuations under one prefix, checked in one target decode.

A tree's nodes are drafted tokens in topological order: node i follows the path root -> ... -> parents[i] -> i,
the root being the text's last token (decoded in the same batch, like a chain's). Row 0 of the target's logits
belongs to the root, row i + 1 to node i: what the target would choose after the path to that node. A node's
children are tried in the order they appear. A chain is the tree whose parents are -1, 0, 1, ...

Greedy: follow the target's argmax down the tree; the first node without the chosen child ends the round, and
the argmax there is the target's own next token.

Sampling (recursive rejection sampling over siblings, as in SpecInfer and Recursive Speculative Decoding): at a
node with target distribution r_0 = p, try the children x_1, x_2, ... in turn. Child x_i was drawn from q_i (one-hot
for a deterministic proposal: lookup, a greedy draft). Accept it with probability min(1, r_{i-1}(x_i) / q_i(x_i));
on rejection r_i = normalize(max(r_{i-1} - q_i, 0)). If every child is rejected, the token is drawn from the last
residual r_w.

Why the output follows p: one step is ordinary speculative sampling of target r_{i-1} with proposal q_i. Given
everything before it, the step ends "accepted y" with probability min(r_{i-1}(y), q_i(y)) and "rejected" with
probability 1 - sum_y min(r_{i-1}(y), q_i(y)) = Z_i, after which the rest of the procedure is asked for a token
from r_i = max(r_{i-1} - q_i, 0) / Z_i. If the rest delivers r_i (induction from the last step, where drawing from
r_w does), the step delivers min(r_{i-1}, q_i) + Z_i r_i = r_{i-1}; so the node's token follows r_0 = p, and below
an accepted child the same holds for the next position given the path. The induction needs only that x_i is drawn
from q_i given everything decided before it (earlier siblings and their verdicts), so a sibling may be drawn
*without replacement*: from its proposer's distribution with the earlier siblings' tokens removed, renormalized.
That distribution, not the proposer's own, is the q_i the node must carry (`without`). A rejected token has
r_i = 0 there, so siblings repeating it could never pass: drawing without replacement wastes no rows on them.
Deterministic siblings are one-hot q_i at their own token: their tokens must differ, and a sampled sibling after
them is drawn with their tokens removed too.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .sampling import Rows, SamplingConfig, sample
from .verify import residual


@dataclass
class Tree:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # -1: the root (the text's last token), else an earlier node
    q: list[np.ndarray | None] = field(default_factory=list)  # the q_i node i was drawn from; None: one-hot
    sources: list[str] = field(default_factory=list)  # who proposed each node: "draft", "lookup"

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def chain(cls, tokens: Sequence[int], q: Sequence[np.ndarray | None] | None = None,
              sources: Sequence[str] = ()) -> "Tree":
        n = len(tokens)
        return cls(list(tokens), list(range(-1, n - 1)), list(q) if q is not None else [None] * n,
                   list(sources) or [""] * n)

    def copy(self) -> "Tree":
        return Tree(list(self.tokens), list(self.parents), list(self.q), list(self.sources))

    def add(self, parent: int, token: int, source: str = "", q: np.ndarray | None = None) -> int:
        """Add a child under parent (-1: the root), or return the one already there with this token (a
        deterministic proposal only: a sampled one is drawn without replacement, so it never repeats a sibling)."""
        if q is None:
            for c in self.children(parent):
                if self.tokens[c] == token:
                    return c
        if parent >= len(self.tokens):
            raise ValueError(f"node {parent} does not exist yet (a tree has {len(self.tokens)} nodes)")
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.q.append(q)
        self.sources.append(source)
        return len(self.tokens) - 1

    def add_path(self, parent: int, tokens: Sequence[int], source: str = "") -> list[int]:
        """Deterministic tokens one below the other from parent, sharing nodes already there; their node ids."""
        out = []
        for t in tokens:
            parent = self.add(parent, t, source)
            out.append(parent)
        return out

    def children(self, node: int) -> list[int]:
        return [i for i, p in enumerate(self.parents) if p == node]

    def depth(self, node: int) -> int:
        """1 for a child of the root."""
        d = 0
        while node >= 0:
            node, d = self.parents[node], d + 1
        return d

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to node."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    @property
    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def shape(self) -> tuple[list[int], list[int]]:
        """Each node's depth (1 below the root) and rank among its siblings (0: the first)."""
        depth, rank, seen = [], [], {}
        for p in self.parents:
            depth.append(1 if p < 0 else depth[p] + 1)
            rank.append(seen.get(p, 0))
            seen[p] = rank[-1] + 1
        return depth, rank

    def leaves(self) -> list[int]:
        inner = set(self.parents)
        return [i for i in range(len(self.tokens)) if i not in inner]


def without(q: np.ndarray, removed: Sequence[int]) -> np.ndarray:
    """q with the removed tokens taken out, renormalized: the distribution of a sibling drawn without replacement
    after them. All of q's mass removed: an all-zero row (no such sibling can be drawn)."""
    out = q.copy()
    ids = [t for t in removed if t < len(out)]
    out[ids] = 0.0
    total = out.sum()
    return out / total if total > 0 else out


def verify_tree_greedy(target_argmax: Sequence[int], tree: Tree) -> tuple[list[int], int]:
    """Follow the target's argmax down the tree. target_argmax[0] is the root's row, [i + 1] node i's. Returns the
    accepted nodes (a path from the root) and the target's own next token after them."""
    kids = _children(tree)
    node, path = -1, []
    while True:
        want = int(target_argmax[node + 1])
        nxt = next((c for c in kids.get(node, ()) if tree.tokens[c] == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)
        node = nxt


def verify_tree_sampled(p: np.ndarray, tree: Tree, rng: np.random.Generator) -> tuple[list[int], int]:
    """Recursive rejection sampling over each node's children (module docstring). p: the target's distributions,
    p[0] the root's row, p[i + 1] node i's (an array, or sampling.Rows computing a row when first read). Returns
    the accepted nodes and the next token, which together follow the target's distribution exactly."""
    kids = _children(tree)
    node, path = -1, []
    while True:
        r = p[node + 1]
        for c in kids.get(node, ()):
            x, qc = tree.tokens[c], tree.q[c]
            in_vocab = x < r.shape[0]
            rx = r[x] if in_vocab else 0.0
            qx = qc[x] if qc is not None and in_vocab else 1.0
            if rng.random() * qx < rx:  # u < rx / qx without the division (see verify.verify_sampled)
                path.append(c)
                node = c
                break
            r = residual(r, qc, x)
        else:
            return path, sample(r, rng)


def verify_tree(logits: np.ndarray, tree: Tree, sampling: SamplingConfig, rng: np.random.Generator
                ) -> tuple[list[int], int]:
    """A tree round's verdict from the target's logits (the root's row, then each node's)."""
    if sampling.greedy:
        return verify_tree_greedy(logits.argmax(axis=1), tree)
    return verify_tree_sampled(Rows(logits, sampling), tree, rng)


def _children(tree: Tree) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for i, parent in enumerate(tree.parents):
        kids.setdefault(parent, []).append(i)
    return kids


def node_values(tree: Tree, accept: Callable[[int], float]) -> list[float]:
    """The chance each node is accepted, from accept(i): the chance node i passes given that its parent passed and
    its earlier siblings failed."""
    values, failed = [0.0] * len(tree), {}  # failed[parent]: the chance all its children so far failed
    for i, parent in enumerate(tree.parents):
        f, a = failed.get(parent, 1.0), accept(i)
        values[i] = (1.0 if parent < 0 else values[parent]) * f * a
        failed[parent] = f * (1.0 - a)
    return values


def best_subtree(tree: Tree, values: Sequence[float], t_verify: Callable[[int], float],
                 most: int | None = None) -> list[int]:
    """The nodes worth verifying. Grown from the root one node at a time, always the likeliest to pass (values)
    among the next candidates: the first child of a node taken, or the next sibling of one (so the tree verified
    keeps the proposer's order of siblings); of the trees so grown (at most `most` nodes), the one of m nodes with
    the least expected verify time per token, T_v(m + 1) / (1 + the sum of their chances); m = 0 is a plain step.
    The selection must not depend on which tokens were drawn (only on positions, ranks and measured acceptance):
    a sampled sibling's q is valid whatever else is cut."""
    kids = _children(tree)
    frontier = [(-values[c], c) for c in kids.get(-1, ())[:1]]
    taken, best, best_cost, expected = [], 0, t_verify(1), 1.0
    while frontier and (most is None or len(taken) < most):
        _, node = heapq.heappop(frontier)
        taken.append(node)
        expected += values[node]
        cost = t_verify(len(taken) + 1) / expected
        if cost < best_cost:
            best, best_cost = len(taken), cost
        siblings = kids[tree.parents[node]]
        nxt = siblings.index(node) + 1
        for c in ([siblings[nxt]] if nxt < len(siblings) else []) + kids.get(node, [])[:1]:
            heapq.heappush(frontier, (-values[c], c))
    return sorted(taken[:best])


def worthwhile_leaves(chain: Sequence[float], leaves: Sequence[float], t_verify: Callable[[int], float],
                      most: int) -> list[int]:
    """Beside a chain verified whole (its nodes' chances to pass: `chain`), the candidate leaves (theirs) worth a
    verify row each: the likeliest first, each while it lowers the expected verify time per token, at most `most`.
    As best_subtree, the choice must not depend on which tokens were drawn."""
    rows, expected, kept = 1 + len(chain), 1.0 + sum(chain), []
    for i in sorted(range(len(leaves)), key=lambda i: (-leaves[i], i))[:most]:
        if leaves[i] <= 0 or t_verify(rows + 1) / (expected + leaves[i]) >= t_verify(rows) / expected:
            break
        rows, expected = rows + 1, expected + leaves[i]
        kept.append(i)
    return sorted(kept)


def subtree(tree: Tree, keep: Sequence[int]) -> Tree:
    """The tree of the kept nodes (each kept node's parent kept too), renumbered in the same order."""
    new = {-1: -1}
    out = Tree()
    for i in sorted(keep):
        new[i] = len(out)
        out.tokens.append(tree.tokens[i])
        out.parents.append(new[tree.parents[i]])
        out.q.append(tree.q[i])
        out.sources.append(tree.sources[i])
    return out


def main_line(tree: Tree) -> list[int]:
    """The first child of the root, its first child, and so on: the branch the proposer ranked first."""
    kids, node, out = _children(tree), -1, []
    while kids.get(node):
        node = kids[node][0]
        out.append(node)
    return out
