"""What shapes a row of logits by the text so far, beyond the sampling filters: logit bias, the penalties (by the
tokens in the window), and a grammar's mask. One Guide per generation, for the target's rows and the draft's alike.

It follows the text: push() extends it (a drafted token being tried, or accepted text), pop(n) takes the last n
back, so a rejected draft leaves no trace in the counts or the grammar. rows() shapes a verify batch: row j with the
history up to row j, i.e. the text plus the first j drafted tokens.
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Sequence

import numpy as np

from .constraints import Grammar
from .sampling import SamplingConfig, penalise


class Guide:
    def __init__(self, sampling: SamplingConfig, grammar: Grammar | None, text: Sequence[int], n_vocab: int,
                 is_eog=lambda t: False) -> None:
        self.sampling, self.grammar, self.n_vocab, self.is_eog = sampling, grammar, n_vocab, is_eog
        self.window = sampling.repeat_last_n if sampling.penalises else 0
        self.text = list(text)
        self.counts: Counter = Counter(self.text[-self.window:] if self.window else ())
        self._shapes = bool(sampling.logit_bias) or self.window > 0
        self._pushed_to_grammar: list[bool] = []  # per pushed token: did the grammar take it (not after an end)
        self.mask_s = 0.0  # time applying the grammar's masks to rows (the matcher's own time is the grammar's)

    @staticmethod
    def needed(sampling: SamplingConfig, grammar: Grammar | None) -> bool:
        return grammar is not None or sampling.penalises or bool(sampling.logit_bias)

    # the text ---------------------------------------------------------------------------------------------
    def push(self, token: int) -> None:
        self.text.append(token)
        if self.window:
            self.counts[token] += 1
            if len(self.text) > self.window:
                self._uncount(self.text[-self.window - 1])
        took = self.grammar is not None and not self.is_eog(token)
        if took:
            self.grammar.push(token)
        self._pushed_to_grammar.append(took)

    def pop(self, n: int) -> None:
        grammar_n = 0
        for _ in range(n):
            token = self.text.pop()
            if self.window:
                self._uncount(token)
                if len(self.text) >= self.window:
                    self.counts[self.text[-self.window]] += 1  # back inside the window
            grammar_n += self._pushed_to_grammar.pop()
        if self.grammar is not None:
            self.grammar.pop(grammar_n)

    def _uncount(self, token: int) -> None:
        self.counts[token] -= 1
        if not self.counts[token]:
            del self.counts[token]

    # shaping ----------------------------------------------------------------------------------------------
    def shape(self, logits: np.ndarray) -> np.ndarray:
        """One row for the next position (a copy; -inf where the grammar forbids). A draft's row of another
        vocabulary size is cut or padded to the target's first."""
        row = np.asarray(logits, dtype=np.float32)
        if len(row) != self.n_vocab:
            row = np.concatenate([row, np.full(max(0, self.n_vocab - len(row)), -np.inf, np.float32)])[:self.n_vocab]
        row = penalise(row, self.counts, self.sampling) if self._shapes else row.copy()
        if self.grammar is not None:
            mask = self.grammar.mask()
            t0 = time.perf_counter()
            row[~mask] = -np.inf
            self.mask_s += time.perf_counter() - t0
        return row

    def rows(self, logits: np.ndarray, proposal: Sequence[int]) -> np.ndarray:
        """The verify batch's rows shaped: row j by the text plus proposal[:j]. Past a drafted token the grammar
        forbids (it will be rejected there) or an end of generation, the rows are never read: they keep the last
        shaping."""
        out = np.empty((len(logits), self.n_vocab), dtype=np.float32)
        pushed = 0
        for j, row in enumerate(logits):
            out[j] = self.shape(row)
            if j < len(proposal) and pushed == j:
                tok = proposal[j]
                if not np.isfinite(out[j][tok]) or self.is_eog(tok):
                    continue
                self.push(tok)
                pushed += 1
        self.pop(pushed)
        return out

    # the grammar's help -----------------------------------------------------------------------------------
    def forced(self) -> list[int]:
        return self.grammar.forced() if self.grammar is not None else []

    def allowed_prefix(self, tokens: list[int]) -> int:
        """How many of these proposed tokens could be accepted at all (the grammar allows them, in order)."""
        return len(tokens) if self.grammar is None else self.grammar.allowed_prefix(tokens)

    @property
    def finished(self) -> bool:
        return self.grammar is not None and self.grammar.finished
