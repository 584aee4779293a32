"""What the batch engine times once at start: a target decode of m rows on a free sequence, a draft step, and the
draft reading a prompt per token; each fed to the cost model the step planner decides by."""
from __future__ import annotations

import time

from .backend import SeqContext
from .scheduling import StepPlanner
from .tuning import CostModel

SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


def calibrate(target: SeqContext, draft: SeqContext | None, cost: CostModel, planner: StepPlanner,
              most_rows: int) -> None:
    """Sequence 0 of both contexts is used and left empty."""
    filler = [target.model.bos if 0 <= target.model.bos < target.model.n_vocab else 0]
    target.decode([(0, filler, [0])])  # the first call of a shape allocates: keep it out of the numbers
    target.clear(0)
    for m in (m for m in SIZES if m <= most_rows):
        t0 = time.perf_counter()
        target.decode([(0, filler * m, range(m))])
        cost.observe_verify(m, time.perf_counter() - t0)
        target.clear(0)
    if draft is not None:  # a draft step, and the draft reading a prompt (its catch-up), per token
        draft.decode([(0, filler, [0])])
        t0 = time.perf_counter()
        draft.decode([(0, filler, [0])])
        planner.observe_draft_step(time.perf_counter() - t0)
        m = min(32, draft.n_ctx - 2)
        t0 = time.perf_counter()
        draft.decode([(0, filler * m, [m - 1])])
        planner.observe_catch_up(m, time.perf_counter() - t0)
        draft.clear(0)
