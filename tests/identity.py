"""Temperature-0 identity, judged honestly (see edgespec.diagnostics): outputs must be identical, or differ first
at a measured near-tie, where the plain top-2 margin is below the batched-vs-single logit difference there."""
from __future__ import annotations

from edgespec.diagnostics import divergence


def assert_identical_or_near_tie(model, prompt, plain, spec, k, trees: bool = False) -> str | None:
    """None when identical; a description when the divergence is a measured near-tie; AssertionError otherwise.
    trees: verification trees were among the batches (their shapes are measured too)."""
    d = divergence(model, prompt, plain, spec, k, n_threads=2, trees=trees)
    if d is None:
        return None
    assert d.near_tie, f"speculative output diverges from plain, and not at a near-tie: {d}"
    return str(d)
