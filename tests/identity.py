"""Temperature-0 identity, judged honestly.

llama.cpp may compute a row of logits slightly differently in a batch than one token at a time (quantized kernels
take other paths; Q4_K differs by up to ~0.5). Speculative output can then differ from plain output where the
target's top two logits are that close. A divergence passes only if, at that position, the plain top-2 margin is
smaller than the measured batched-vs-single difference of the logits there. Anything else is a bug.
"""
from __future__ import annotations

import numpy as np

from edgespec.backend import Context


def first_difference(a: list[int], b: list[int]) -> int | None:
    for j, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return j
    return None if len(a) == len(b) else min(len(a), len(b))


def near_tie(model, prompt: list[int], plain: list[int], j: int, k: int) -> tuple[float, float]:
    """(top-2 margin of the single-token logits at generated position j, largest batched-vs-single difference)."""
    prefix = prompt + plain[:j]
    after = plain[j:] + [0] * (k + 1)  # rows after the one measured; causal attention ignores them
    ctx = Context(model, n_ctx=len(prefix) + k + 2, n_threads=2)
    try:
        ctx.decode(prefix[:-1])
        single = ctx.decode(prefix[-1:], [0])[0]
        diffs = []
        for m in range(2, k + 2):  # the position scored as row 0 .. m-1 of an m-token batch, as a verify does
            for row in range(min(m, len(prefix))):
                start = len(prefix) - 1 - row
                ctx.truncate(start)
                batched = ctx.decode((prefix + after)[start:start + m], [row])[0]
                diffs.append(float(np.abs(batched - single).max()))
    finally:
        ctx.close()
    top2 = np.sort(single)[-2:]
    return float(top2[1] - top2[0]), max(diffs, default=0.0)


def assert_identical_or_near_tie(model, prompt, plain, spec, k) -> str | None:
    """None when identical; a description when the divergence is a measured near-tie; AssertionError otherwise."""
    j = first_difference(plain, spec)
    if j is None:
        return None
    margin, diff = near_tie(model, prompt, plain, j, k)
    assert margin <= diff, (f"speculative output diverges from plain at token {j} (plain {plain[j:j+3]}, "
                            f"spec {spec[j:j+3]}) where the top-2 margin {margin:.4f} exceeds the batched-vs-single "
                            f"logit difference {diff:.4f}: not a near-tie, a bug")
    return f"near-tie at token {j}: margin {margin:.4f} <= batched-vs-single difference {diff:.4f}"
