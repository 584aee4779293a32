"""Who drafts how much for an engine: one draft-length policy (tuning.DraftLength) per proposer or part of a chain,
fed its own costs and acceptance, and the costs they share. The engine asks Drafting for a generation's Chain
(chain.py: the rounds' proposals) and for the target's verify curve.

A proposer may be a chain of parts (`proposer.parts`, e.g. the hybrid: prompt lookup, then the draft model), each
with its own policy. Policies belong to the engine and outlive a generation: what they learned carries across texts
and per-call limits, and across processes through the machine's profile (profile.py: read at the start, added to at
the close).

Drafting also owns the costs the policies share: the target's verify curve, from the profile or timed at the first
drafted round (start_costs, calibrate).
"""
from __future__ import annotations

import statistics
import time
import weakref
from typing import Sequence

from . import profile
from .backend import Context
from .chain import Chain, Link
from .costs import HOLD_UP
from .proposers import DraftModelProposer, GrammarProposer, PromptLookupProposer, Proposer
from .tuning import CostModel, DraftLength


CALIBRATION_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)  # verify rows timed for the curve
BACK_SIZES = (2, 4, 8, 16)  # over a link, and the largest size timed: the way back to a one-row step timed after these


def parts(proposer: Proposer) -> Sequence[Proposer]:
    """The chain a proposer stands for: its parts, or itself alone."""
    return getattr(proposer, "parts", None) or (proposer,)


class Drafting:
    """An engine's draft-length policies, one per proposer (or part of a chain), sharing the target's verify costs
    (the same whoever drafts); acceptance and draft costs are each proposer's own."""

    def __init__(self, draft_max: int, adaptive: bool, cost: CostModel, tree_width: int = 1) -> None:
        self.draft_max, self.adaptive, self.cost = draft_max, adaptive, cost
        self.tree_width = tree_width  # > 1: rounds may be verification trees of up to that many branches
        self._policies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.grammar = GrammarProposer()  # one for the engine, so its policy (and acceptance) carries over

    def policy(self, proposer: Proposer) -> DraftLength:
        if proposer not in self._policies:
            shared = self.cost if not self._policies else CostModel(verify_s=self.cost.verify_s,
                                                                    back=self.cost.back)
            self._policies[proposer] = DraftLength(self.draft_max, self.adaptive, shared)
        return self._policies[proposer]

    def start_from(self, key: dict | None, proposers: Sequence[Proposer], curve: bool, notes: list[str]) -> bool:
        """Start from the profile under `key`: its verify curve (unless curve=False) and, for each draft model or
        prompt lookup among `proposers` (or their parts), its costs and acceptance. False where there is none for
        exactly this key."""
        known = profile.load(key, notes) if key is not None else None
        if known is None:
            return False
        if curve:
            for m, t in known.verify_s.items():
                self.cost.observe_verify(m, t)
            for m, t in known.back_s.items():
                self.cost.back.observe(m, t)
        for part in (x for p in proposers for x in parts(p)):
            name = _entry_name(part)
            if name in known.proposers:
                self.policy(part).seed(known.proposers[name])
        return True

    def needs_costs(self, chain: "Chain") -> bool:
        """The chain decides by measured cost and the target's verify curve is not known yet (plain rounds time
        only m = 1)."""
        return chain.measures and len(self.cost.verify_s) < 2

    def start_costs(self, target: Context, chain: "Chain", key: dict | None, notes: list[str]) -> str:
        """The target's verify curve before the first drafted round: this machine's profile of the model (with
        what it holds for the chain's proposers), else timed now and saved for the next process. Returns where
        it came from: "profile" or "measured"."""
        if self.start_from(key, [link.part for link in chain.links], True, notes):
            return "profile"
        curve = self.calibrate(target)
        if key is not None:
            profile.save(key, curve, back_s=self.cost.back.seconds)
        return "measured"

    def calibrate(self, target: Context, sizes: Sequence[int] = CALIBRATION_SIZES) -> dict[int, float]:
        """Time a target decode of m rows (m in sizes) at the end of what the cache holds, and feed the cost
        model. Costs about one decode per size, once per engine; the cache is left as it was."""
        held = len(target.tokens)
        sizes = [m for m in sizes if m <= target.room]
        filler = target.tokens[-1:] or [target.model.bos]
        # The first call of a shape allocates; keep that out of the numbers. Over an rpc-server the first decode of
        # each batch size is slow, the next ones not (10 ms away: a first two-row decode took 5.1x a one-row one,
        # 1.3-1.5x the next times; bench/results/calibrate-*.log), so there each size is decoded once before timing.
        # Over a network single timings stray as well (a one-row decode 99 ms where the others took 16-22, two
        # rows dearer than three: bench/results/rpc-smollm-synced.log's `verify cost` lines), and a row count the
        # policy then never drafts is never timed again: there each size is timed in three passes, the median kept.
        for m in sizes if target.model.rpc else [1]:
            target.decode(filler * m, range(m))
            target.truncate(held)
        # Over a link a decode whose batch differs in shape from the one before it first sends the server its graph
        # again (llama.cpp's RPC client keeps only the last; 380-435 KB, bench/rpc_rows.py): a plain step after a
        # plain step does not, a verify after a plain step does, and so does the plain step after the verify. So
        # there a one-row decode is timed after another, as plain decoding pays it, each longer one after a shorter
        # one, as a verify after a step pays it, and a one-row decode after some of them: what a round of m rows adds
        # to the next plain step (WayBack). Locally no graph is sent, and the warm-up row already stands before the
        # one-row timing.
        times: dict[int, list[float]] = {m: [] for m in sizes}
        after: dict[int, list[float]] = {m: [] for m in sizes if m > 1 and target.model.rpc and
                                         (m in BACK_SIZES or m == sizes[-1])}
        for _ in range(3 if target.model.rpc else 1):
            for m in sizes:
                if m == 1 and target.model.rpc:
                    target.decode(filler, [0])
                    target.truncate(held)
                times[m].append(_timed(target, filler * m, held))
                if m in after:
                    after[m].append(_timed(target, filler, held))
        self.decoded_other()
        curve = {m: statistics.median(t) for m, t in times.items()}
        for m, t in curve.items():
            self.cost.observe_verify(m, t)
        if 1 in curve:
            for m, t in after.items():
                self.cost.back.observe(m, statistics.median(t) - curve[1])
        return curve

    def decoded(self, rows: int, seconds: float | None, over_link: bool) -> None:
        """The target decoded `rows` rows in a round, in `seconds` (None: not to be timed). Over an rpc-server
        (over_link) a decode of another shape than the last resends its graph (WayBack): there a verify, or a plain
        step after a plain step, times the verify curve, and a plain step after a verify the way back from it; a
        decode after something else (decoded_other) teaches neither. Locally there is no way back to pay (a one-row
        SmolLM2 decode after a five-row one: 0.1-1.7 ms over 13, within a step's noise,
        bench/results/rpc-rows-smollm.log), and every decode times the curve: priced there, the noise of that
        difference cost the replayed hybrid 0.7% (docs/rpc.md)."""
        back = self.cost.back
        if seconds is None:
            back.last = rows
            return
        plain = self.cost.verify_s.get(1)
        if rows > 1 or back.last == 1 or not over_link:
            self.cost.observe_verify(rows, seconds)
        if over_link:
            extra = None
            if rows == 1 and plain is not None:  # (a hold-up counts as costs.running() counts one)
                extra = min(seconds, HOLD_UP * (plain + max(0.0, back.after(back.last)))) - plain
            back.decoded(rows, extra)

    def decoded_other(self) -> None:
        """The target decoded something that was not a round (a prompt, the curve's timing)."""
        self.cost.back.last = 0

    def remember(self, key: dict | None) -> None:
        """Add what the proposers' policies learned to the profile under `key`, where there is one (its verify
        curve stays as it was measured), so the next process starts from it."""
        learned = self.learned()
        known = profile.load(key) if key is not None and learned else None
        if known is None:
            return
        entries = dict(known.proposers)
        for name, entry in learned.items():
            entries[name] = profile.merge(entries.get(name), entry)
        profile.save(key, known.verify_s, entries, known.back_s)

    def learned(self, min_rounds: int = 8) -> dict[str, dict]:
        """What the policies of draft models and prompt lookup learned here (those with min_rounds of evidence), by
        profile name; of several policies for one proposer, the one with the most evidence."""
        out, evidence = {}, {}
        for part, policy in list(self._policies.items()):
            name, n = _entry_name(part), policy.cost.n_observed
            if name is not None and n >= min_rounds and policy.cost.draft_round_s and n > evidence.get(name, 0):
                out[name], evidence[name] = policy.learned(), n
        return out

    def chain(self, proposer: Proposer | None, k_max: int | None, adaptive: bool | None,
              grammar: bool = False, tree_width: int | None = None) -> "Chain | None":
        """This generation's chain (None: nothing proposes); k_max, adaptive and tree_width: this call's limits
        (None: the policies' own). grammar: the output is constrained, so the tokens the grammar forces come
        first, free."""
        chain = ([self.grammar] if grammar else []) + list(parts(proposer) if proposer is not None else ())
        width = self.tree_width if tree_width is None else tree_width
        return Chain([Link(p, self.policy(p)) for p in chain], k_max, adaptive, width) if chain else None


def _entry_name(part: Proposer) -> str | None:
    """A proposer's entry in the target's profile: a draft model's (by its file and settings), prompt lookup's; None
    for others (or a draft file gone since)."""
    if isinstance(part, PromptLookupProposer):
        return profile.lookup_name(part.n_min, part.n_max)
    if not isinstance(part, DraftModelProposer):
        return None
    try:
        return profile.proposer_name(profile.key_of(part.ctx.model, part.ctx.n_threads))
    except OSError:
        return None


def _timed(target: Context, tokens: list[int], held: int) -> float:
    """Seconds of a decode of tokens (every row's logits) at the end of the cache, which is then cut back to held."""
    t0 = time.perf_counter()
    target.decode(tokens, range(len(tokens)))
    seconds = time.perf_counter() - t0
    target.truncate(held)
    return seconds
