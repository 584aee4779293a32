"""What each sequence of a batch proposes in a step: its proposer and draft length (the step planner's choice
from measured costs, or its request's fixed mode), then the tokens: what its grammar forces, prompt lookup's copy,
or the draft model's, drafted for all drafting sequences together, one draft decode per position."""
from __future__ import annotations

import time

import numpy as np

from .backend import Model, SeqContext
from .sampling import draw
from .scheduling import Option, StepPlanner
from .sequences import Generation


class StepDrafter:
    def __init__(self, model: Model, target: SeqContext, draft: SeqContext | None, planner: StepPlanner,
                 auto: str, draft_max: int) -> None:
        """auto: what a request's "auto" mode means here (hybrid, draft, lookup or off)."""
        self.model, self.target, self.draft, self.planner = model, target, draft, planner
        self.auto, self.draft_max = auto, draft_max

    def decide(self, gens: list[Generation]) -> None:
        """Each sequence's proposer and K for this step (scheduling.StepPlanner decides from measured costs)."""
        options = []
        for g in gens:
            cap = min(self.target.room(g.slot) - 1, g.req.max_tokens - len(g.out) - 1)
            mode = self.auto if g.req.mode == "auto" else g.req.mode
            g.kind = "off" if mode == "off" or cap <= 0 else "lookup" if mode == "lookup" else "draft"
            if mode == "hybrid" and g.lookup.propose(g.seq, 1, g.req.sampling, g.rng).tokens:
                g.kind = "lookup"  # the text repeats: copy it for free, else the draft model
            behind = 0
            if g.kind == "draft":
                cap = min(cap, self.draft.n_ctx - len(g.seq) + 1)  # seq and k-1 drafts in the draft's cells
                behind = len(g.seq) - 1 - self.draft.common_prefix(g.slot, g.seq)
            g.k_max = min(self.draft_max if g.req.draft_max is None else g.req.draft_max, cap)
            options.append(Option(g.kind, g.k_max, g.req.mode == "auto", g.req.max_tokens - len(g.out), behind,
                                  first=not g.out))
        for g, o, (k, reason) in zip(gens, options, self.planner.plan(options)):
            g.k, g.reason = k, reason
            if reason == "off":
                g.reason = "off" if (self.auto if g.req.mode == "auto" else g.req.mode) == "off" else "full"
            if reason == "probe" and g.kind == "draft" and self.auto == "hybrid" and g.lookup.propose(
                    g.seq, 1, g.req.sampling, g.rng).tokens:
                g.kind = "lookup"
            if not k:
                g.kind = "off"

    def propose(self, gens: list[Generation]) -> None:
        """Each sequence's proposal for its K: what its grammar forces, then prompt lookup's or the draft model's."""
        drafting = []
        for g in gens:
            g.proposal, g.q, g.forced = [], [], 0
            if g.k and g.guide is not None and g.guide.grammar is not None:
                g.proposal = g.guide.forced()[:g.k]  # what the grammar forces comes first, free
                g.forced = len(g.proposal)
                for t in g.proposal:
                    self._push(g, t)
            if g.kind == "lookup" and len(g.proposal) < g.k:
                more = g.lookup.propose(g.seq + g.proposal, g.k - len(g.proposal), g.req.sampling, g.rng).tokens
                if g.guide is not None:  # cut where the grammar forbids: past that, certain rejections
                    more = more[:g.guide.allowed_prefix(more)]
                g.proposal += more
                for t in more:
                    self._push(g, t)
            elif g.kind == "draft" and len(g.proposal) < g.k:
                drafting.append(g)
            g.q = [None] * len(g.proposal)
        try:
            self._draft(drafting)
        finally:
            for g in gens:
                if g.pushed:
                    g.guide.pop(g.pushed)
                g.pushed = 0

    def _draft(self, drafting: list[Generation]) -> None:
        """The draft model drafts for every drafting sequence together: one catch-up decode, then one per
        position; each sequence under its own guide (the target's mask and penalties: q is what it samples)."""
        if not drafting:
            return
        # Catch each draft sequence up to seq (its last token's logits start the draft), all in one decode.
        items = []
        for g in drafting:
            text = g.seq + g.proposal  # a constrained sequence's forced tokens are read with the text
            keep = min(self.draft.common_prefix(g.slot, text), len(text) - 1)
            self.draft.truncate(g.slot, keep)
            items.append((g.slot, text[keep:], [len(text) - keep - 1]))
        t0 = time.perf_counter()
        logits = [rows[0] for rows in self.draft.decode(items)]
        self.planner.observe_catch_up(sum(len(tokens) for _, tokens, _ in items), time.perf_counter() - t0)
        while drafting:
            still, nxt = [], []
            for g, row in zip(drafting, logits):
                if g.guide is not None:
                    row = g.guide.shape(row)
                    if not np.isfinite(row).any():
                        continue
                if g.req.sampling.greedy:
                    tok = int(np.argmax(row))
                else:
                    q, tok, _ = draw(row, g.req.sampling, g.rng)
                    g.q.append(_fit(q, self.model.n_vocab))
                g.proposal.append(tok)
                if len(g.proposal) < g.k and not self.model.is_eog(tok):
                    self._push(g, tok)
                    still.append(g)
                    nxt.append((g.slot, [tok], [0]))
            drafting = still
            if nxt:
                t0 = time.perf_counter()
                logits = [rows[0] for rows in self.draft.decode(nxt)]
                self.planner.observe_draft_step(time.perf_counter() - t0)

    @staticmethod
    def _push(g: Generation, token: int) -> None:
        """Try a proposed token on the sequence's guide (popped once the step's proposals are made)."""
        if g.guide is not None and not g.guide.is_eog(token):
            g.guide.push(token)
            g.pushed += 1


def _fit(q: np.ndarray, n: int) -> np.ndarray:
    """A draft distribution over the target's vocabulary (sizes may differ by a few ids)."""
    if len(q) == n:
        return q
    out = np.zeros(n)
    out[: min(len(q), n)] = q[:n]
    return out
