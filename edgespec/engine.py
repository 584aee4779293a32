"""The speculative loop: propose -> verify in one target batch -> accept -> roll back. Yields, never prints.

Invariant at the top of each round: the target's cache holds seq[:-1]; seq[-1] (the newest token) is decoded in
the same batch as the draft, so one target call scores the K drafts and yields the bonus row. With no proposer,
or k = 0, the very same path is plain one-token-at-a-time decoding: the baseline shares every line of it.

A proposer may be a chain of parts (`proposer.parts`, e.g. the hybrid: prompt lookup, then the draft model). Each
part has its own draft-length policy, fed its own costs and acceptance; in a round each part in turn proposes from
where the earlier ones stopped, up to the round length its own policy wants.
"""
from __future__ import annotations

import os
import time
import weakref
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from . import chat
from .backend import Context, Model
from .errors import ContextOverflowError, EdgespecError, InvalidArgument
from .pairing import VocabInfo, check_pair
from .proposers import EMPTY, DraftModelProposer, HybridProposer, PromptLookupProposer, Proposal, Proposer
from .sampling import GREEDY, SamplingConfig, probabilities
from .stats import GenerationStats, RoundRecord
from .text import TextStream
from .tuning import CostModel, Decision, DraftLength
from .turns import Turns
from .verify import verify_greedy, verify_sampled

DEFAULT_CTX = 4096
DEFAULT_DRAFT_MAX = 8
CALIBRATION_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    finish_reason: str  # "stop": end-of-generation token or stop string; "length": max_tokens or a full context
    stats: GenerationStats

    def to_dict(self) -> dict:
        return {"text": self.text, "tokens": self.tokens, "finish_reason": self.finish_reason,
                "stats": self.stats.to_dict()}


@dataclass
class Response:
    """One streamed step: a token and the text it made showable. The last one has finish_reason and result."""

    text: str
    token: int | None = None
    from_draft: bool = False
    source: str | None = None  # the proposer that drafted this token ("draft", "lookup"), None for the target's
    finish_reason: str | None = None
    result: GenerationResult | None = field(default=None, repr=False)


class Engine:
    """A target model, optionally with a proposer; load once, generate many times."""

    def __init__(self, target: Context, proposer: Proposer | None = None, draft_max: int = DEFAULT_DRAFT_MAX,
                 adaptive: bool = True, cost: CostModel | None = None):
        """draft_max: the most tokens drafted per round; adaptive: choose fewer (or none) by measured cost.

        One generation runs at a time: a call from another thread waits until the one before it has finished
        (its output is what it would have been alone), and a stream left unfinished holds the engine until it is
        read to the end, closed, or dropped; a new generation in the same thread ends such a stream instead.
        """
        self.target = target
        self.model: Model = target.model
        self.proposer = proposer
        self.draft_max, self.adaptive = draft_max, adaptive
        # One draft-length policy per proposer (acceptance and draft cost are the proposer's own); the target's
        # verify timings are the same whoever drafts, so all policies share them. What a policy learned (costs,
        # acceptance, a fallback and its backoff) carries across texts and across per-call limits.
        self._cost = cost or CostModel()
        self._policies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        if proposer is not None:
            self._policies[_parts(proposer)[0]] = DraftLength(draft_max, adaptive, self._cost)
        self._turns = Turns()
        self.closed = False

    @property
    def drafting(self) -> str:
        """What drafts for the target, in words (for banners and logs)."""
        names = {"PromptLookupProposer": "prompt-lookup drafting", "DraftModelProposer": "a draft model"}
        parts = [names.get(type(p).__name__, type(p).__name__) for p in _parts(self.proposer)] if self.proposer else []
        return "with " + " and ".join(parts) if parts else "without speculation (plain decoding)"

    def policy(self, proposer: Proposer) -> DraftLength:
        """The draft-length policy (and cost model) this engine keeps for a proposer (or a part of a chain)."""
        if proposer not in self._policies:
            self._policies[proposer] = DraftLength(self.draft_max, self.adaptive,
                                                   CostModel(verify_s=self._cost.verify_s))
        return self._policies[proposer]

    @classmethod
    def load(
        cls,
        target: str | os.PathLike,
        draft: str | os.PathLike | None = None,
        *,
        n_ctx: int = DEFAULT_CTX,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        draft_n_ctx: int | None = None,
        draft_n_gpu_layers: int | None = None,
        draft_n_threads: int | None = None,
        draft_p_min: float = 0.0,
        lookup: bool = False,
        draft_max: int = DEFAULT_DRAFT_MAX,
        adaptive: bool = True,
    ) -> "Engine":
        """Load a target and its proposer: a draft model (checked against the target), prompt lookup
        (lookup=True, no model), or both (the hybrid: lookup first, the draft fills the rest). Draft settings
        left as None follow the target's."""
        if n_ctx < 1:
            raise EdgespecError(f"context size must be at least 1, got {n_ctx}")
        if draft_max < 0:
            raise EdgespecError(f"draft length must be >= 0, got {draft_max}")
        tm = Model(target, n_gpu_layers)
        proposer = None
        if draft is not None:
            dm = Model(draft, n_gpu_layers if draft_n_gpu_layers is None else draft_n_gpu_layers)
            check_pair(VocabInfo.of(tm), VocabInfo.of(dm))
            proposer = DraftModelProposer(Context(dm, draft_n_ctx or n_ctx, draft_n_threads or n_threads), tm.n_vocab,
                                          p_min=draft_p_min)
        if lookup:
            proposer = PromptLookupProposer() if proposer is None else HybridProposer(proposer)
        if proposer is not None and (tm.is_recurrent or (draft is not None and dm.is_recurrent)):
            raise EdgespecError("speculative decoding needs a target whose KV cache can be rolled back; recurrent "
                                "and hybrid models cannot (run without --draft or --lookup)")
        return cls(Context(tm, n_ctx, n_threads), proposer, draft_max, adaptive)

    # prompts ----------------------------------------------------------------------------------------------
    def tokenize(self, prompt: str, *, chat_format: bool = False, system: str | None = None) -> list[int]:
        """Prompt text -> tokens. Without chat_format the prompt is the model's input as written, so text such as
        "<|im_end|>" in it is that control token (as in llama.cpp's completion); with chat_format the prompt and
        system text are message content, wrapped in the model's chat template and always literal text."""
        if not isinstance(prompt, str) or (system is not None and not isinstance(system, str)):
            raise InvalidArgument("the prompt and the system message must be text (str)")
        if chat_format:
            return self.tokenize_chat(([("system", system)] if system else []) + [("user", prompt)])
        return self.model.tokenize(prompt)

    def tokenize_chat(self, messages: Sequence[tuple[str, str]], template: str | None = None) -> list[int]:
        """(role, content) messages in the model's chat template (or the given one), ready for the assistant.
        Only the template's markup may become control tokens; what the messages say stays text."""
        return chat.tokenize(self.model, messages, template)

    # generation -------------------------------------------------------------------------------------------
    def generate(self, prompt: str | Sequence[int], **kwargs) -> GenerationResult:
        """Run to the end; the same arguments as stream()."""
        for r in self.stream(prompt, **kwargs):
            if r.result is not None:
                return r.result
        raise AssertionError("stream() ended without a result")  # pragma: no cover

    def stream(
        self,
        prompt: str | Sequence[int],
        *,
        max_tokens: int = 256,
        sampling: SamplingConfig = GREEDY,
        stop: Sequence[str] = (),
        draft_max: int | None = None,
        adaptive: bool | None = None,
        speculative: bool = True,
        proposer: Proposer | None = None,
    ) -> Iterator[Response]:
        """Yield a Response per generated token as soon as it is accepted, then one with the result.

        draft_max / adaptive override the engine's for this call (adaptive=False drafts exactly draft_max per
        round); proposer replaces the engine's for this call. speculative=False (or an engine with no proposer)
        decodes one token per target call: the baseline.
        """
        self._check_open()
        seq = list(self.tokenize(prompt) if isinstance(prompt, str) else prompt)
        if not seq:
            raise EdgespecError("the prompt is empty; give some text to continue (or a chat message)")
        self.model.check_tokens(seq)
        if len(seq) > self.target.n_ctx:
            raise ContextOverflowError(f"the prompt is {len(seq)} tokens but the context holds {self.target.n_ctx}; "
                                       "use a larger --ctx-size or a shorter prompt")
        if not isinstance(max_tokens, int) or max_tokens < 0:
            raise InvalidArgument(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
        if draft_max is not None and (not isinstance(draft_max, int) or draft_max < 0):
            raise InvalidArgument(f"draft_max must be an integer >= 0, got {draft_max!r}")
        if not isinstance(sampling, SamplingConfig):
            raise InvalidArgument(f"sampling must be an edgespec.SamplingConfig, got {type(sampling).__name__}")
        stop = [stop] if isinstance(stop, str) else list(stop)
        if not all(isinstance(s, str) for s in stop):
            raise InvalidArgument("stop must be a string or a list of strings")
        proposer = (proposer or self.proposer) if speculative else None
        # Per-call limits apply to this call only; the policy itself (and what it learned) is the engine's.
        plan = [(part, self.policy(part), draft_max, adaptive) for part in (_parts(proposer) if proposer else ())]
        turn = self._turns.begin()
        try:
            self._check_open()
            for _, policy, _, _ in plan:
                policy.new_text()
            rng = np.random.default_rng(sampling.seed)
            stats = GenerationStats(n_prompt=len(seq))
            self._prefill(seq, proposer, stats)
            adaptive_now = any(policy.adaptive if a is None else a for _, policy, _, a in plan)
            if adaptive_now and len(self._cost.verify_s) < 2:  # plain rounds time m = 1 only
                t0 = time.perf_counter()
                self.calibrate()
                stats.prompt_s += time.perf_counter() - t0  # once per engine: set-up, not generation

            out: list[int] = []
            text = TextStream(stop)
            finish = "length" if max_tokens == 0 else None
            while finish is None:
                room = self.target.room  # this round decodes seq[-1] and k drafts: k + 1 cells
                if room < 1:
                    finish = "length"
                    break
                cap = min(room - 1, max_tokens - len(out) - 1)
                emitted, finish = self._round(seq, out, cap, plan, proposer, sampling, rng, text, stats, max_tokens)
                for tok, source, piece in emitted:
                    yield Response(piece, tok, source is not None, source)
                    turn.check()  # resumed after a later generation took the caches: stop, do not mix texts
            tail = text.flush()
            result = GenerationResult(text.text, out, finish, stats)
            yield Response(tail, finish_reason=finish, result=result)
        finally:
            self._turns.end(turn)

    def _check_open(self) -> None:
        if self.closed:
            raise EdgespecError("this engine is closed; load a new one with edgespec.Engine.load")

    def _prefill(self, seq: list[int], proposer: Proposer | None, stats: GenerationStats) -> None:
        t0 = time.perf_counter()
        # Reuse whatever prefix the cache already holds (a previous turn); seq[-1] is decoded by the first round.
        stats.n_prompt_evaluated = self.target.sync(seq[:-1])
        if proposer is not None:
            proposer.begin(seq)
        stats.prompt_s = time.perf_counter() - t0

    def _propose(self, seq, cap, plan, sampling, rng, stats):
        """Each part of the chain proposes in turn, from where the earlier ones stopped, up to the round length its
        own policy wants. Returns the joint Proposal and, per part that proposed, (part, policy, start, n, key,
        seconds); the decisions' reasons go into the round's record."""
        tokens: list[int] = []
        qs: list[np.ndarray | None] = []
        sources: list[str] = []
        sampled = False
        done, reasons = [], []
        for part, policy, k_max, adaptive in plan:
            decision = policy.decide(cap, k_max, adaptive) if len(tokens) < cap else Decision(0, "full")
            reasons.append(decision.reason)
            if decision.reason == "fallback" and decision.why:
                stats.fallbacks.append({"round": stats.n_rounds, "why": decision.why})
            if decision.reason not in ("free", "fixed") and len(done) == 1 and decision.k > 0:
                _, lead_policy, _, n_lead, lead_key, _ = done[0]
                if policy.alone_is_better(decision.k, lead_policy.keyed(lead_key), n_lead):
                    # this part's own draft is expected to do better than following the earlier one's
                    tokens, qs, sources, done, sampled = [], [], [], [], False
                    reasons[0] = "dropped"
            k = decision.k - len(tokens)
            if k <= 0:
                continue
            t0 = time.perf_counter()
            prop = part.propose(seq + tokens if tokens else seq, k, sampling, rng)
            seconds = time.perf_counter() - t0
            n = policy.keep(len(prop.tokens), prop.key) if decision.reason == "free" else len(prop.tokens)
            done.append((part, policy, len(tokens), n, prop.key, seconds))
            tokens += prop.tokens[:n]
            sources += prop.sources[:n]
            qs += list(prop.q[:n]) if prop.q is not None else [None] * n
            sampled = sampled or prop.q is not None
        return Proposal(tokens, qs if sampled else None, sources), done, "+".join(reasons) or "fixed"

    def _round(self, seq, out, cap, plan, proposer, sampling, rng, text, stats, max_tokens):
        """One propose -> verify -> accept step. Returns the emitted (token, source, text) and a finish reason."""
        llama0 = self._llama_seconds(proposer)
        t0 = time.perf_counter()
        prop, parts, reason = self._propose(seq, cap, plan, sampling, rng, stats) if cap > 0 else (EMPTY, [], "fixed")
        t1 = time.perf_counter()
        batch = [seq[-1], *prop.tokens]
        t2 = time.perf_counter()
        logits = self.target.decode(batch, range(len(batch)))
        t3 = time.perf_counter()
        if sampling.greedy:
            n, nxt = verify_greedy(logits.argmax(axis=1), prop.tokens)
        else:
            p = np.stack([probabilities(row, sampling) for row in logits])
            n, nxt = verify_sampled(p, prop.q, prop.tokens, rng)
        # Keep seq[:-1] + seq[-1] + the accepted drafts: once nxt is appended, that is the new seq[:-1].
        self.target.truncate(len(seq) + n)
        for part, policy, start, n_part, key, seconds in parts:
            tested = n >= start  # every token before this part's passed
            part.accepted(min(n_part, n - start) if tested else 0)
            policy.observe(n_part, min(n_part, n - start) if tested else None, seconds, key)
        emitted, finish = [], None
        for tok, source in [*zip(prop.tokens[:n], prop.sources[:n]), (nxt, None)]:
            if self.model.is_eog(tok):
                finish = "stop"
                break
            out.append(tok)
            seq.append(tok)
            emitted.append((tok, source, text.push(self.model.piece(tok))))
            if text.stopped:
                finish = "stop"
            elif len(out) >= max_tokens:
                finish = "length"
            if finish:
                break
        t4 = time.perf_counter()
        for phase, dt in (("draft", t1 - t0), ("prepare", t2 - t1), ("verify", t3 - t2), ("accept", t4 - t3)):
            stats.phase_s[phase] += dt
        self._cost.observe_verify(len(batch), t3 - t2)
        stats.add_round(RoundRecord(len(prop.tokens), n, len(emitted), t4 - t0, self._llama_seconds(proposer) - llama0,
                                    reason, tuple(prop.sources)))
        return emitted, finish

    def calibrate(self, sizes: Sequence[int] = CALIBRATION_SIZES) -> dict[int, float]:
        """Time a target decode of m rows (m in sizes) at the end of what the cache holds, and feed the cost
        model. Costs about one decode per size, once per engine; the cache is left as it was."""
        held = len(self.target.tokens)
        sizes = [m for m in sizes if m <= self.target.room]
        filler = self.target.tokens[-1:] or [self.model.bos]
        self.target.decode(filler, [0])  # the first call of a shape allocates; keep that out of the numbers
        self.target.truncate(held)
        curve = {}
        for m in sizes:
            t0 = time.perf_counter()
            self.target.decode(filler * m, range(m))
            curve[m] = time.perf_counter() - t0
            self.target.truncate(held)
        for m, t in curve.items():
            self._cost.observe_verify(m, t)
        return curve

    def _llama_seconds(self, proposer: Proposer | None) -> float:
        return self.target.llama_s + (proposer.llama_seconds() if proposer is not None else 0.0)

    def close(self) -> None:
        """Free both models and their caches (waiting for a generation running in another thread to finish).
        Using the engine afterwards raises EdgespecError."""
        if self.closed:
            return
        turn = self._turns.begin()
        try:
            self.closed = True
            if self.proposer is not None:
                self.proposer.close()
            self.target.close()
            self.model.close()
        finally:
            self._turns.end(turn)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _parts(proposer: Proposer) -> Sequence[Proposer]:
    """The chain a proposer stands for: its parts, or itself alone."""
    return getattr(proposer, "parts", None) or (proposer,)
