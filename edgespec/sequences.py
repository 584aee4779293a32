"""One request as the batch serves it: what it asks (Request), what it hears back (Event), its state while it is
served (Generation: slot, tokens, text, rng, proposers, guide, stats), and the handle its caller holds."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from .backend import Model
from .constraints import Constraint, Grammar
from .errors import EdgespecError
from .guide import Guide
from .proposers import PromptLookupProposer
from .sampling import GREEDY, SamplingConfig
from .stats import GenerationStats
from .text import TextStream

if TYPE_CHECKING:
    from .batch import BatchEngine

MODES = ("auto", "off", "draft", "lookup", "hybrid")


class QueueFull(EdgespecError):
    """Every sequence is busy and the waiting line is full."""


@dataclass
class Request:
    prompt: list[int]
    max_tokens: int = 256
    sampling: SamplingConfig = GREEDY
    stop: Sequence[str] = ()
    mode: str = "auto"  # auto: the server's measured choice; off; or a proposer at a fixed draft_max
    draft_max: int | None = None
    logprobs: int | None = None  # None: none; n >= 0: the chosen token's log-probability and the n most likely
    on_event: Callable[["Event"], None] | None = None  # called from the scheduler thread
    constraint: Constraint | None = None  # the output must match a grammar or JSON schema
    # llama-server's t_max_predict_ms and n_indent (editors' completions): once the text holds a line end and its
    # generation has taken this long, it ends there; a line after the first indented less than min_indent ends it
    # where its first character would be (both a "length", llama-server's limit)
    time_limit_s: float | None = None
    min_indent: int = 0
    progress: bool = False  # llama-server's return_progress: an event after each step that reads part of the prompt


@dataclass
class Event:
    """A token (with its text, and log-probabilities when asked), the end (finish_reason, stats, error), or how far
    the prompt's reading has come (progress)."""

    text: str
    token: int | None = None
    logprob: float | None = None
    top: list[tuple[int, float]] | None = None
    from_draft: bool = False
    finish_reason: str | None = None
    stats: GenerationStats | None = None
    error: str | None = None
    stop_word: str | None = None  # at the end: the stop string that ended the text, if one did
    # while the prompt is read (Request.progress): (processed, total, cached, seconds since the request joined)
    progress: tuple[int, int, int, float] | None = None


class Generation:
    """One request's state while it is served: its sequence slot, tokens, text, rng, proposers, guide and stats."""

    def __init__(self, req: Request, slot: int, model: Model) -> None:
        self.req, self.slot = req, slot
        self.seq = list(req.prompt)
        grammar = Grammar(req.constraint, model.constraint_tokenizer(), model.n_vocab) if req.constraint else None
        self.guide = Guide(req.sampling, grammar, self.seq, model.n_vocab, model.is_eog) \
            if Guide.needed(req.sampling, grammar) else None
        self.out: list[int] = []
        self.text = TextStream(req.stop, req.min_indent)
        self.rng = np.random.default_rng(req.sampling.seed)
        self.stats = GenerationStats(n_prompt=len(req.prompt))
        self.lookup = PromptLookupProposer.for_model(model)
        self.lookup.begin(self.seq)
        self.kind = "off"  # the proposer this step: "draft", "lookup" or "off"
        self.k = self.k_max = 0
        self.reason = "off"
        self.proposal: list[int] = []
        self.q: list[np.ndarray | None] = []
        self.forced = 0  # how many of the proposal the grammar forced
        self.pushed = 0  # proposed tokens being tried on the guide
        self.pending: list[int] = []  # prompt tokens not yet in the target's cache
        self.finish: str | None = None
        self.started = time.perf_counter()


class Handle:
    """What submit() returns: cancel() frees the request's sequence at the next step (a client went away)."""

    def __init__(self, engine: "BatchEngine", req: Request) -> None:
        self._engine, self.req = engine, req
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self._engine._wake()


def _logprobs(row: np.ndarray, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    """The target's own log-probabilities at this position (temperature 1, no filters), as OpenAI reports them."""
    row = row.astype(np.float64)
    z = row - row.max()
    logz = math.log(np.exp(z).sum())
    best = np.argpartition(-row, top)[:top] if 0 < top < len(row) else np.arange(len(row))[:top]
    best = best[np.argsort(-row[best], kind="stable")]
    return float(z[token] - logz), [(int(t), float(z[t] - logz)) for t in best]
