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
               n_threads: int | None = None) -> Divergence | None:
    """None when the two outputs are identical; otherwise the measurements at the first difference."""
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
    top2 = np.sort(single)[-2:]
    return Divergence(j, float(top2[1] - top2[0]), max(diffs))
