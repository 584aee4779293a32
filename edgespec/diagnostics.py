"""Why would speculative output differ from plain output at temperature 0? Measure it.

llama.cpp may compute a row of logits slightly differently inside a batch than one token at a time (quantized
kernels take other code paths; the F16 KV cache rounds differently). Where the target's top two logits are closer
than that difference, a batched verify can legitimately pick the other token. `divergence` finds the first
differing token and measures both numbers there, so a test or a benchmark can tell such a near-tie from a bug.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .backend import Context, Model


@dataclass
class Divergence:
    position: int  # index into the generated tokens
    margin: float  # top-1 minus top-2 logit, target alone, one token at a time
    batch_difference: float  # largest |batched - single| logit at that position over the verify batch shapes

    @property
    def near_tie(self) -> bool:
        return self.margin <= self.batch_difference

    def __str__(self) -> str:
        verdict = "a near-tie" if self.near_tie else "NOT a near-tie"
        return (f"first difference at generated token {self.position}: top-2 margin {self.margin:.4f}, "
                f"batched-vs-single logit difference {self.batch_difference:.4f} ({verdict})")


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for j, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return j
    return None if len(a) == len(b) else min(len(a), len(b))


def divergence(model: Model, prompt: Sequence[int], plain: Sequence[int], spec: Sequence[int], k: int,
               n_threads: int | None = None, trees: bool = False) -> Divergence | None:
    """None when the two outputs are identical; otherwise the measurements at the first difference. trees: the
    verify batches were also verification trees (the position scored beside another branch, in a cache its cells
    share with other sequences), so those shapes are measured too."""
    j = first_difference(plain, spec)
    if j is None:
        return None
    prefix = list(prompt) + list(plain[:j])
    after = list(plain[j:]) + [0] * (k + 1)  # rows after the one measured; causal attention ignores them
    ctx = Context(model, n_ctx=len(prefix) + k + 2, n_threads=n_threads)
    try:
        ctx.decode(prefix[:-1])
        single = ctx.decode(prefix[-1:], [0])[0]
        diffs = [0.0]
        for m in range(2, k + 2):  # the position scored as row 0 .. m-1 of an m-token batch, as a verify does
            for row in range(min(m, len(prefix))):
                start = len(prefix) - 1 - row
                ctx.truncate(start)
                batched = ctx.decode((prefix + after)[start:start + m], [row])[0]
                diffs.append(float(np.abs(batched - single).max()))
    finally:
        ctx.close()
    if trees:
        diffs += _tree_differences(model, prefix, single, k, n_threads)
    top2 = np.sort(single)[-2:]
    return Divergence(j, float(top2[1] - top2[0]), max(diffs))


def _tree_differences(model: Model, prefix: list[int], single: np.ndarray, k: int, n_threads: int | None
                      ) -> list[float]:
    """|tree - single| at the position, scored at depth d of a tree's first branch (more of that branch after it),
    with one-token branches beside it, over a cache filled in order and over one filled by tree rounds whose
    accepted tokens sit after rejected ones (cells out of position order, as after real tree rounds: the attention
    then sums in another order)."""
    ctx = Context(model, n_ctx=len(prefix) + 2 * k + 8, n_threads=n_threads, branches=4)
    diffs = []
    try:
        for fragmented in (False, True):
            for d in range(min(k, len(prefix) - 1) + 1):
                base = len(prefix) - 1 - d
                path = prefix[base + 1:]
                _fill(ctx, prefix[:base], fragmented, 2 * k)  # once per depth: each shape below is then cut off
                for extra in sorted({0, k - d}):
                    for width in (2, 4):
                        ctx.truncate(base)
                        chain = path + [0] * extra
                        leaves = [i % (d + 1) - 1 for i in range(width - 1)]  # under the root, then along the path
                        rows = ctx.decode_tree(prefix[base], chain + [0] * len(leaves),
                                               list(range(-1, len(chain) - 1)) + leaves)
                        ctx.keep_path([])
                        diffs.append(float(np.abs(rows[d] - single).max()))
    finally:
        ctx.close()
    return diffs


def _fill(ctx: Context, tokens: list[int], fragmented: bool, tail: int) -> None:
    """The cache holding tokens; fragmented: its last `tail` read two at a time as a root and the second branch
    of a tree, the first branch rejected (its cell freed, to be reused by a later position)."""
    ctx.clear()
    start = max(0, len(tokens) - tail) if fragmented else len(tokens)
    ctx.decode(tokens[:start])
    i = start
    while i + 1 < len(tokens):
        ctx.decode_tree(tokens[i], [0, tokens[i + 1]], [-1, -1])
        ctx.keep_path([1])
        i += 2
    ctx.decode(tokens[i:])
