"""Draft with a small model of the same vocabulary, K tokens one at a time."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..backend import Context
from ..costs import running
from ..sampling import SamplingConfig, draw, sample, top_probability
from ..tree import without
from . import Proposal


SPLIT = 0.8


@dataclass
class _Fork:
    """A branch drafted beside the chain after the second choice at position `at`: up to n tokens, their q
    (sampled), and the logits its last decode gave."""
    at: int
    n: int
    tokens: list[int] = field(default_factory=list)
    qs: list[np.ndarray] = field(default_factory=list)
    logits: np.ndarray | None = None


class DraftModelProposer:
    def __init__(self, ctx: Context, target_n_vocab: int, p_min: float = 0.0) -> None:
        self.ctx = ctx
        # Reading text it has not seen (what it skipped while it stood aside, what an earlier part of a chain
        # proposed), apart from drafting: the seconds the last propose() spent on it, and a running average per
        # token. The draft-length policy prices drafting without it, and a chain's plan adds it where it applies.
        self.catch_up_s = 0.0
        self.read_s: float | None = None
        self.prompt_read_s: float | None = None  # per token, a prompt's reading in one go (begin()), averaged
        self.n_vocab = target_n_vocab  # q rows are cut or padded to the target's vocab so p - q lines up
        self.p_min = p_min  # stop drafting when the draft's own top probability falls below this (0 = never)
        self.split = SPLIT  # a branch forks only where the draft's top probability is under this
        self._steps: list[float | None] = [None, None]  # seconds of a draft decode of one row, and of two
        self.branch_s = 0.0  # of the last propose(), the seconds its branch added (an estimate)
        self.refused_s = 0.0  # of the last propose(), the decode whose token it did not keep (stop, p_min)
        self.refused: tuple[int, float] | None = None  # greedy: that token and the draft's confidence in it
        self.floored = False  # of the last propose(): it ended at a token under p_min (a floor no cost model priced)

    def behind(self, seq: Sequence[int]) -> int:
        """Tokens of seq, before its last, that this model has not read: what a proposal from seq reads first."""
        return len(seq) - 1 - self.ctx.common_prefix(seq[:-1])

    def begin(self, seq: Sequence[int]) -> None:
        if len(seq) <= self.ctx.n_ctx:
            t0 = time.perf_counter()
            n = self.ctx.sync(seq[:-1])
            if n > 1:  # (a prompt's cost per token: what a policy weighs reading the next one against)
                self.prompt_read_s = running(self.prompt_read_s, (time.perf_counter() - t0) / n)

    def propose(self, seq: Sequence[int], k: int, sampling: SamplingConfig, rng: np.random.Generator,
                guide=None, alternatives: bool = False, branch: Callable[[int], int] | None = None,
                stop=None) -> Proposal:
        """alternatives: also a second choice at each position (Proposal.alternatives), for a verification tree:
        greedy, the best token other than the one drafted; sampling, a draw from q without it (tree.without),
        which is the q that choice carries. branch (with alternatives, on a context of 2 branches or more): at the
        first position i whose top probability is under `split` (where the draft's confidence splits),
        branch(i) tokens are drafted after the second choice there too (Proposal.branch), each in the same decode
        as a token of the chain, while the chain lasts. The decision looks at the draft's distribution at i, never
        at the tokens drawn there, so a sampled second choice still carries its q. stop
        (confidence.ConfidenceStop): asked before each token whether to keep it and after it whether to draft one
        more, by the draft's confidence, and whether a token drafted to check a hand-off to lookup agrees with it."""
        k = min(k, self.ctx.n_ctx - len(seq) + 1)  # seq plus k-1 drafted tokens must fit in the draft's cache
        self.branch_s = self.refused_s = 0.0
        self.refused, self.floored = None, False
        if k <= 0:
            return Proposal([])
        logits, last_s = self._read(seq)
        tokens: list[int] = []
        qs: list[np.ndarray] = []
        alts: list[tuple[int, np.ndarray | None]] = []
        fork: _Fork | None = None
        if guide is not None or not alternatives or self.ctx.branches < 2:
            branch = None
        pushed = 0
        try:
            for i in range(k):
                if guide is not None:  # the same mask and penalties as the target's row here: q is what we sample
                    logits = guide.shape(logits)
                    if not np.isfinite(logits).any():
                        break
                picked = self._pick(i, logits, sampling, rng, stop, qs, alts if alternatives else None,
                                    branch is not None)
                if picked is None:  # its confidence refused it: that decode bought nothing
                    self.refused_s = last_s
                    break
                tok, top = picked
                if stop is not None and stop.agrees(tok):  # a checked hand-off: lookup continues from here
                    tokens.append(tok)
                    break
                if fork is not None and len(fork.tokens) < fork.n:  # the branch's next token, from its own row
                    b, bq = self._choose(fork.logits, sampling, rng)
                    fork.tokens.append(b)
                    if bq is not None:
                        fork.qs.append(bq)
                tokens.append(tok)
                if i == k - 1 or self.ctx.model.is_eog(tok) or (stop is not None and not stop.further(i, tokens)):
                    break  # nothing is worth drafting past the end of the text (or where it would not pay)
                if guide is not None:
                    guide.push(tok)
                    pushed += 1
                if fork is None and branch is not None and top < self.split and alts[i][0] >= 0:
                    n = min(branch(i), k - 1 - i)
                    if n > 0:
                        self.ctx.fork(1)
                        fork = _Fork(i, n)
                logits, last_s = self._step(tok, fork, alts)
        finally:
            if pushed:
                guide.pop(pushed)
        out = Proposal(tokens, qs or None, ["draft"] * len(tokens), alternatives=alts if alternatives else None)
        if fork is not None:
            out.branch = (fork.at, fork.tokens, fork.qs or None)
        return out

    def _read(self, seq: Sequence[int]) -> tuple[np.ndarray, float]:
        """What it has not read, and seq[-1] (decoded afresh each round: its logits start the draft), in one decode:
        after a round whose drafts all passed, the last draft and the target's token; after standing aside, or
        behind an earlier part of a chain, all it missed. One batch of n rows costs less than n decodes of one.
        Returns the logits after seq and the seconds of a draft step in that decode (the rest, reading beyond the
        round's own, is catch_up_s, and per token read_s)."""
        t0 = time.perf_counter()
        keep = self.ctx.common_prefix(seq[:-1])
        behind = len(seq) - 1 - keep
        self.ctx.truncate(keep)
        logits = self.ctx.decode(seq[keep:], [behind])[0]
        first_s = time.perf_counter() - t0
        self.catch_up_s = 0.0  # one behind: the last round's own draft, part of drafting as a round's first step
        if behind > 1:  # reading beyond that: what this decode took over a draft step (its rows' share, untimed)
            step = self._steps[0]
            self.catch_up_s = max(0.0, first_s - step) if step is not None else first_s * behind / (behind + 1)
            self.read_s = running(self.read_s, self.catch_up_s / behind)
        return logits, first_s - self.catch_up_s

    def _pick(self, i: int, logits: np.ndarray, sampling: SamplingConfig, rng: np.random.Generator, stop,
              qs: list, alts: list | None, branching: bool) -> tuple[int, float] | None:
        """The token at draft position i and the draft's confidence in it (its top probability); None where that
        confidence refuses it (p_min, stop; greedy: the refused token and confidence in self.refused). Sampled,
        its q joins qs; with alts (a tree), the second choice there joins them."""
        if sampling.greedy:
            tok = int(np.argmax(logits))
            top = top_probability(logits) if self.p_min > 0 or branching or stop is not None else 1.0
            if top < self.p_min or (stop is not None and not stop.keep(i, top)):
                self.refused, self.floored = (tok, top), top < self.p_min
                return None
            if alts is not None:
                second = logits.copy()
                second[tok] = -np.inf
                alts.append((int(np.argmax(second)), None))
            return tok, top
        q, tok, top = draw(logits, sampling, rng)
        if top < self.p_min or (stop is not None and not stop.keep(i, top)):
            self.floored = top < self.p_min
            return None
        qs.append(self._fit(q))
        if alts is not None:
            rest = without(q, [tok])
            alts.append((sample(rest, rng), self._fit(rest)) if rest.any() else (-1, None))
        return tok, top

    def _step(self, tok: int, fork: _Fork | None, alts: list) -> tuple[np.ndarray, float]:
        """Decode a drafted token, and beside it, while a branch grows, the branch's last token (its next logits
        into fork.logits); returns the chain's next logits and the decode's seconds."""
        t1 = time.perf_counter()
        pair = False
        if fork is None:
            logits = self.ctx.decode([tok], [0])[0]
        else:
            last = fork.tokens[-1] if fork.tokens else alts[fork.at][0]
            if len(fork.tokens) < fork.n and not self.ctx.model.is_eog(last):
                logits, fork.logits = self.ctx.decode_rows([(tok, 0), (last, 1)])
                pair = True
            else:
                fork.n = len(fork.tokens)  # the branch ends here
                logits = self.ctx.decode_rows([(tok, 0)])[0]
        seconds = time.perf_counter() - t1
        self._time_step(seconds, pair=pair)
        return logits, seconds

    def _choose(self, logits: np.ndarray, sampling: SamplingConfig, rng: np.random.Generator
                ) -> tuple[int, np.ndarray | None]:
        if sampling.greedy:
            return int(np.argmax(logits)), None
        q, tok, _ = draw(logits, sampling, rng)
        return tok, self._fit(q)

    def _time_step(self, seconds: float, pair: bool) -> None:
        """The seconds of a decode of one row and of two (the chain's and a branch's), averaged: a draft step (step_s)
        and what a branch adds to it (extra_row_s, self.branch_s for this round), so a policy prices the chain's
        drafting without it."""
        i = int(pair)
        self._steps[i] = running(self._steps[i], seconds)
        if pair and self.extra_row_s is not None:
            self.branch_s += self.extra_row_s

    @property
    def step_s(self) -> float | None:
        """The seconds of one draft step in a round (a decode of one row after a drafted token), averaged."""
        return self._steps[0]

    @property
    def extra_row_s(self) -> float | None:
        one, two = self._steps
        return None if one is None or two is None else max(0.0, two - one)

    def keep_branch(self, took: int) -> None:
        """After verification: the draft's cache keeps the branch's first `took` tokens where the accepted path
        went through it (0: the chain's, as drafted); the rest is removed."""
        self.ctx.end_fork(1 if took else 0, took if took else None)

    def _fit(self, q: np.ndarray) -> np.ndarray:
        if len(q) == self.n_vocab:
            return q
        out = np.zeros(self.n_vocab)
        n = min(len(q), self.n_vocab)
        out[:n] = q[:n]
        return out

    def accepted(self, n_accepted: int) -> None:
        pass  # the next propose() reconciles the cache by common prefix

    def llama_seconds(self) -> float:
        return self.ctx.llama_s

    def close(self) -> None:
        self.ctx.close()
        self.ctx.model.close()

