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
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from . import chat
from .backend import Context, Model
from .errors import ContextOverflowError, EdgespecError
from .pairing import VocabInfo, check_pair
from .proposers import EMPTY, DraftModelProposer, HybridProposer, PromptLookupProposer, Proposal, Proposer
from .sampling import GREEDY, SamplingConfig, probabilities
from .stats import GenerationStats, RoundRecord
from .text import TextStream
from .tuning import CostModel, Decision, DraftLength
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
        """draft_max: the most tokens drafted per round; adaptive: choose fewer (or none) by measured cost."""
        self.target = target
        self.model: Model = target.model
        self.proposer = proposer
        self.draft_max, self.adaptive = draft_max, adaptive
        # One draft-length policy per proposer (acceptance and draft cost are the proposer's own); the target's
        # verify timings are the same whoever drafts, so all policies share them.
        self._cost = cost or CostModel()
        self._policies: dict[int, DraftLength] = {}
        if proposer is not None:
            self._policies[id(_parts(proposer)[0])] = DraftLength(draft_max, adaptive, self._cost)

    def policy(self, proposer: Proposer) -> DraftLength:
        """The draft-length policy (and cost model) this engine keeps for a proposer (or a part of a chain)."""
        if id(proposer) not in self._policies:
            self._policies[id(proposer)] = DraftLength(self.draft_max, self.adaptive,
                                                       CostModel(verify_s=self._cost.verify_s))
        return self._policies[id(proposer)]

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
        """Prompt text -> tokens; with chat_format, wrapped in the model's own chat template first."""
        if chat_format:
            return self.tokenize_chat(([("system", system)] if system else []) + [("user", prompt)])
        return self.model.tokenize(prompt)

    def tokenize_chat(self, messages: Sequence[tuple[str, str]], template: str | None = None) -> list[int]:
        """(role, content) messages in the model's chat template (or the given one), ready for the assistant."""
        text = chat.format_messages(self.model, messages, template)
        bos_text = self.model.token_text(self.model.bos).decode("utf-8", "replace")
        return self.model.tokenize(text, add_special=not (bos_text and text.startswith(bos_text)))

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
        seq = list(self.tokenize(prompt) if isinstance(prompt, str) else prompt)
        if not seq:
            raise EdgespecError("the prompt is empty")
        if len(seq) > self.target.n_ctx:
            raise ContextOverflowError(f"the prompt is {len(seq)} tokens but the context holds {self.target.n_ctx}; "
                                       "use a larger --ctx-size or a shorter prompt")
        if max_tokens < 0:
            raise EdgespecError(f"max_tokens must be >= 0, got {max_tokens}")
        proposer = (proposer or self.proposer) if speculative else None
        plan: list[tuple[Proposer, DraftLength]] = []
        for part in _parts(proposer) if proposer is not None else ():
            policy = self.policy(part)
            if draft_max is not None or adaptive is not None:  # a per-call policy that still feeds the same costs
                policy = DraftLength(policy.k_max if draft_max is None else draft_max,
                                     policy.adaptive if adaptive is None else adaptive, policy.cost)
                policy.by_key = self.policy(part).by_key
            policy.new_text()
            plan.append((part, policy))
        rng = np.random.default_rng(sampling.seed)
        stats = GenerationStats(n_prompt=len(seq))
        self._prefill(seq, proposer, stats)
        if any(policy.adaptive for _, policy in plan) and len(self._cost.verify_s) < 2:  # plain rounds time m = 1 only
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
        tail = text.flush()
        result = GenerationResult(text.text, out, finish, stats)
        yield Response(tail, finish_reason=finish, result=result)

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
        for part, policy in plan:
            decision = policy.decide(cap) if len(tokens) < cap else Decision(0, "full")
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
        self.target.close()
        if self.proposer is not None:
            self.proposer.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _parts(proposer: Proposer) -> Sequence[Proposer]:
    """The chain a proposer stands for: its parts, or itself alone."""
    return getattr(proposer, "parts", None) or (proposer,)
