"""The speculative loop: propose -> verify in one target batch -> accept -> roll back. Yields, never prints.

Invariant at the top of each round: the target's cache holds seq[:-1]; seq[-1] (the newest token) is decoded in
the same batch as the draft, so one target call scores the K drafts and yields the bonus row. With no proposer,
or k = 0, the very same path is plain one-token-at-a-time decoding: the baseline shares every line of it. The one
exception is the first round: the prompt is read whole and its last row kept (_Run.first_row), so a first round
that drafts nothing decodes nothing, as llama.cpp's own examples take the first token from the prompt's batch.

Who drafts how many tokens in a round is chain.py's (its policies: drafting.py's); a generation's state is a _Run.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

from . import chat, fim, loading, profile
from .backend import Context, Model
from .errors import ContextOverflowError, EdgespecError, InvalidArgument
from .chain import Chain
from .drafting import CALIBRATION_SIZES, Drafting, parts
from .constraints import Constraint, Grammar
from .guide import Guide
from .proposers import EMPTY, Proposal, Proposer
from .results import GenerationResult, Response
from .sampling import GREEDY, Rows, SamplingConfig
from .stats import GenerationStats, RoundRecord
from .text import TextStream
from .tuning import CostModel, DraftLength
from .tree import Tree, verify_tree
from .turns import Turns
from .verify import verify_greedy, verify_sampled

DEFAULT_CTX = 4096
DEFAULT_DRAFT_MAX = 8


class Engine:
    """A target model, optionally with a proposer; load once, generate many times."""

    def __init__(self, target: Context, proposer: Proposer | None = None, draft_max: int = DEFAULT_DRAFT_MAX,
                 adaptive: bool = True, cost: CostModel | None = None, tree_width: int = 1):
        """draft_max: the most tokens drafted per round; adaptive: choose fewer (or none) by measured cost;
        tree_width > 1: trees of up to that many branches (the target context made with branches >= tree_width),
        each node verified only where it is expected to pay (chain.Chain; README "Verification trees").

        One generation runs at a time: a call from another thread waits until the one before it has finished
        (its output is what it would have been alone), and a stream left unfinished holds the engine until it is
        read to the end, closed, or dropped; a new generation in the same thread ends such a stream instead.
        """
        self.target = target
        self.model: Model = target.model
        self.proposer = proposer
        self.draft_max, self.adaptive = draft_max, adaptive
        self._cost = cost or CostModel()
        self.costs_from: str | None = None  # where the verify curve came from: "profile" or "measured" (this run)
        self.notes: list[str] = []  # one-line notes for the user (an ignored profile); the caller shows and clears
        if tree_width > getattr(target, "branches", 1):
            raise EdgespecError(f"a tree width of {tree_width} needs a target context made with branches >= "
                                f"{tree_width}")
        self._drafting = Drafting(draft_max, adaptive, self._cost, tree_width)
        if proposer is not None:
            self._drafting.policy(parts(proposer)[0])  # the engine's own proposer times the shared verify costs
        self._turns = Turns()
        self.closed = False

    @property
    def drafting(self) -> str:
        """What drafts for the target, in words (for banners and logs)."""
        names = {"PromptLookupProposer": "prompt-lookup drafting", "DraftModelProposer": "a draft model"}
        named = [names.get(type(p).__name__, type(p).__name__) for p in parts(self.proposer)] if self.proposer else []
        return "with " + " and ".join(named) if named else "without speculation (plain decoding)"

    def policy(self, proposer: Proposer) -> DraftLength:
        """The draft-length policy (and cost model) this engine keeps for a proposer (or a part of a chain)."""
        return self._drafting.policy(proposer)

    @classmethod
    def load(
        cls,
        target: str | os.PathLike,
        draft: str | os.PathLike | None = None,
        *,
        n_ctx: int = DEFAULT_CTX, n_threads: int | None = None, n_gpu_layers: int = 0,
        draft_n_ctx: int | None = None, draft_n_gpu_layers: int | None = None, draft_n_threads: int | None = None,
        draft_p_min: float = 0.0, lookup: bool = False, draft_max: int = DEFAULT_DRAFT_MAX, adaptive: bool = True,
        tree_width: int = 1, rpc: Sequence[str] = (), draft_rpc: Sequence[str] = (), tensor_split: Sequence[float] = (),
        output_here: bool = False, kv_cache: str | Sequence[str] = "f16",
    ) -> "Engine":
        """Load a target and its proposer: a draft model (checked against the target), prompt lookup (lookup=True,
        no model), or both (the hybrid: lookup first, the draft fills the rest). Draft settings left as None follow
        the target's. rpc: rpc-servers the target is split over (backend/rpc.py); output_here: its output layer
        stays on this machine; kv_cache: both caches' number type, "q8_0" say (backend.Model)."""
        target_ctx, proposer = loading.load(
            target, draft, n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers, draft_n_ctx=draft_n_ctx,
            draft_n_gpu_layers=draft_n_gpu_layers, draft_n_threads=draft_n_threads, draft_p_min=draft_p_min,
            lookup=lookup, draft_max=draft_max, tree_width=tree_width, rpc=rpc, draft_rpc=draft_rpc,
            tensor_split=tensor_split, output_here=output_here, kv_cache=kv_cache)
        return cls(target_ctx, proposer, draft_max, adaptive, tree_width=tree_width)

    # prompts ----------------------------------------------------------------------------------------------
    def tokenize(self, prompt: str, *, chat_format: bool = False, system: str | None = None,
                 suffix: str | None = None) -> list[int]:
        """Prompt text -> tokens: the model's input as written ("<|im_end|>" in it is that control token, as in
        llama.cpp's completion); with chat_format, message content (and system text) in the model's chat template,
        always literal; with a suffix, the text before and after a gap, in the model's FIM tokens (fim.py; literal)."""
        if not isinstance(prompt, str) or any(x is not None and not isinstance(x, str) for x in (system, suffix)):
            raise InvalidArgument("the prompt, the system message and the suffix must be text (str)")
        if suffix is not None and (chat_format or system is not None):
            raise InvalidArgument("a suffix (fill in the middle) frames raw text: no chat_format, no system")
        if suffix is not None:
            return fim.tokens(self.model, prompt, suffix)
        if chat_format:
            return self.tokenize_chat(([("system", system)] if system else []) + [("user", prompt)])
        return self.model.tokenize(prompt)

    def tokenize_chat(self, messages: Sequence, template: str | None = None,
                      tools: Sequence[dict] | None = None) -> list[int]:
        """Chat messages ((role, content) pairs or OpenAI's dicts) in the model's chat template (or the given one),
        ready for the assistant; `tools` as OpenAI's list of functions. Only the template's markup may become
        control tokens; what the messages say stays text."""
        return chat.tokenize(self.model, messages, template, tools)

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
        constraint: Constraint | None = None,
        tree_width: int | None = None,
        prompt_progress: Callable[[int, int, int], None] | None = None,
    ) -> Iterator[Response]:
        """Yield a Response per generated token as soon as it is accepted, then one with the result.

        draft_max / adaptive override the engine's for this call (adaptive=False drafts exactly draft_max per
        round); proposer replaces the engine's for this call. speculative=False (or an engine with no proposer)
        decodes one token per target call: the baseline. constraint: the output must match a grammar or JSON
        schema (edgespec.Constraint); checked before anything is decoded. With a constraint, speculation also
        proposes the tokens the grammar forces, free. tree_width: this call's in place of the engine's (at most the
        engine's context allows). prompt_progress(processed, total, cached): called after each batch of the prompt
        read, how many of its tokens the cache holds, and how many it held before (llama-server's return_progress)."""
        self._check_open()
        seq = list(self.tokenize(prompt) if isinstance(prompt, str) else prompt)
        if not seq:
            raise EdgespecError("the prompt is empty; give some text to continue (or a chat message)")
        self.model.check_tokens(seq)
        if len(seq) > self.target.n_ctx:
            raise ContextOverflowError(f"the prompt is {len(seq)} tokens but the context holds {self.target.n_ctx}; "
                                       "use a larger --ctx-size or a shorter prompt")
        for name, value in (("max_tokens", max_tokens), ("draft_max", 0 if draft_max is None else draft_max)):
            if not isinstance(value, int) or value < 0:
                raise InvalidArgument(f"{name} must be an integer >= 0, got {value!r}")
        if not isinstance(sampling, SamplingConfig):
            raise InvalidArgument(f"sampling must be an edgespec.SamplingConfig, got {type(sampling).__name__}")
        stop = [stop] if isinstance(stop, str) else list(stop)
        if not all(isinstance(s, str) for s in stop):
            raise InvalidArgument("stop must be a string or a list of strings")
        if prompt_progress is not None and not callable(prompt_progress):
            raise InvalidArgument(f"prompt_progress must be a function, got {type(prompt_progress).__name__}")
        if constraint is not None and not isinstance(constraint, Constraint):
            raise InvalidArgument(f"constraint must be an edgespec.Constraint, got {type(constraint).__name__}")
        grammar = Grammar(constraint, self.model.constraint_tokenizer(), self.model.n_vocab) if constraint else None
        proposer = (proposer or self.proposer) if speculative else None
        # Per-call limits apply to this call only; the policies themselves (and what they learned) are the engine's.
        if tree_width is not None and not 1 <= tree_width <= self.target.branches:
            raise InvalidArgument(f"tree_width must be from 1 to {self.target.branches} (the context's branches), "
                                  f"got {tree_width}")
        chain = self._drafting.chain(proposer, draft_max, adaptive, grammar=grammar is not None and speculative,
                                     tree_width=tree_width)
        guide = Guide(sampling, grammar, seq, self.model.n_vocab, self.model.is_eog) \
            if Guide.needed(sampling, grammar) else None
        turn = self._turns.begin()
        try:
            self._check_open()
            run = _Run(seq, sampling, max_tokens, TextStream(stop), GenerationStats(n_prompt=len(seq)),
                       np.random.default_rng(sampling.seed), chain, guide)
            # Where drafting has set-up work (the draft model reading the prompt, timing the target), the first
            # token comes from a plain round and that work follows it: the wait for it is the target's alone.
            later = chain is not None and (chain.reads_prompt or self._drafting.needs_costs(chain))
            self._prefill(run, begin=not later, progress=prompt_progress)
            finish = "length" if max_tokens == 0 else None
            while finish is None:
                room = self.target.room  # this round decodes seq[-1] and k drafts: k + 1 cells
                if room < 1 and run.first_row is None:  # (the prompt's row needs none: a full prompt's token)
                    finish = "length"
                    break
                emitted, finish = self._round(run, 0 if later else min(room - 1, max_tokens - len(run.out) - 1))
                for tok, source, piece in emitted:
                    yield Response(piece, tok, source is not None, source)
                    turn.check()  # resumed after a later generation took the caches: stop, do not mix texts
                if later and finish is None:
                    later = False
                    t0 = time.perf_counter()
                    costs = (lambda: self._start_costs(chain)) if self._drafting.needs_costs(chain) else None
                    chain.begin(run.seq, costs, min(max_tokens - len(run.out), self.target.room))  # (tokens left)
                    run.stats.prompt_s += time.perf_counter() - t0  # set-up, not generation
            if chain is not None:
                chain.end(len(run.out))  # (its length: what the next text's reading is weighed over)
            tail = run.text.flush()
            run.stats.constraint_s = grammar.seconds + guide.mask_s if grammar is not None else 0.0
            yield Response(tail, finish_reason=finish, result=GenerationResult(run.text.text, run.out, finish, run.stats))
        finally:
            self._turns.end(turn)

    def _check_open(self) -> None:
        if self.closed:
            raise EdgespecError("this engine is closed; load a new one with edgespec.Engine.load")

    def _prefill(self, run: "_Run", begin: bool = True, progress=None) -> None:
        t0 = time.perf_counter()
        # Reuse whatever prefix the cache already holds (a previous turn), read the rest in one batch and keep its
        # last row, the first token's: a decode fewer before the first token than reading seq[-1] in a round of
        # its own (over an rpc-server, a round trip fewer too).
        total = len(run.seq)
        run.stats.n_prompt_evaluated, run.first_row = self.target.read(
            run.seq, None if progress is None else lambda done, cached: progress(done, total, cached))
        self._drafting.decoded_other()
        if run.chain is not None and begin:
            run.chain.begin(run.seq, cap=min(run.max_tokens, self.target.room))
        run.stats.prompt_s = time.perf_counter() - t0

    def _round(self, run: "_Run", cap: int) -> tuple[list[tuple[int, str | None, str]], str | None]:
        """One propose -> verify -> accept step, at most cap drafts. Returns the emitted (token, source, text) and a
        finish reason."""
        seq, stats = run.seq, run.stats
        llama0 = self._llama_seconds(run)
        t0 = time.perf_counter()
        prop, reason = (run.chain.propose(seq, cap, run.sampling, run.rng, stats, run.guide, self.target.room - 1)
                        if run.chain else (EMPTY, "fixed"))
        if cap == 0 and not run.out and run.chain is not None:
            reason = "first"  # a plain first round: the drafting set-up follows the first token
        t1 = time.perf_counter()
        batch = [seq[-1], *prop.tokens]
        tree = None if prop.parents is None else \
            Tree(prop.tokens, prop.parents, list(prop.q) if prop.q is not None else [None] * len(prop.tokens),
                 prop.sources)
        t2 = time.perf_counter()
        first, run.first_row = run.first_row, None
        cached = first is not None and not prop.tokens  # the prompt's last row is this round's only row
        if cached:
            logits = first[None, :]
        else:
            if first is not None:  # the round decodes seq[-1] with its drafts: back to the invariant
                self.target.truncate(len(seq) - 1)
            logits = self.target.decode(batch, range(len(batch))) if tree is None else \
                self.target.decode_tree(seq[-1], tree.tokens, tree.parents)
        t3 = time.perf_counter()
        prop, path, nxt, dead_end = self._verify(run, prop, tree, logits)
        n = len(path)
        chosen = [(prop.tokens[i], prop.sources[i]) for i in path] + ([] if n == dead_end else [(nxt, None)])
        if run.chain is not None:
            run.chain.accepted(n, [tok for tok, _ in chosen], path)
        emitted, finish = self._emit(run, chosen)
        if finish is None and n == dead_end:
            finish = "grammar"  # the grammar allows no token here: end, rather than choose one it forbids
        t4 = time.perf_counter()
        for phase, dt in (("draft", t1 - t0), ("prepare", t2 - t1), ("verify", t3 - t2), ("accept", t4 - t3)):
            stats.phase_s[phase] += dt
        if not cached:  # (the prompt's row: read with it; a first round may finish its remote work: not timed)
            self._drafting.decoded(len(batch), None if reason == "first" else t3 - t2, bool(self.model.rpc))
        depth, taken = (max(tree.shape()[0]), tuple(prop.sources[i] for i in path)) if tree is not None \
            else (None, None)
        stats.add_round(RoundRecord(len(prop.tokens), n, len(emitted), t4 - t0, self._llama_seconds(run) - llama0,
                                    reason, tuple(prop.sources), depth, taken))
        return emitted, finish

    def _verify(self, run: "_Run", prop: Proposal, tree: Tree | None, logits: np.ndarray
                ) -> tuple[Proposal, list[int], int, int | None]:
        """The target's rows against the proposal: the accepted path (a chain's first n, or a tree's nodes), the
        token after it, and the target's cache cut back to them. Under a guide each row is masked and penalised by
        the text up to it, and where the grammar allows nothing after prop[:d] the proposal ends at d, the dead
        end, where no token is chosen. Returns the proposal as verified, the path, the next token, the dead end."""
        dead_end = None
        if run.guide is not None:
            logits = run.guide.rows(logits, prop.tokens)
            dead = np.flatnonzero(~np.isfinite(logits).any(axis=1))
            if len(dead):
                dead_end = int(dead[0])
                prop = Proposal(prop.tokens[:dead_end], None if prop.q is None else prop.q[:dead_end],
                                prop.sources[:dead_end])
                logits = logits[:dead_end + 1]
                logits[dead_end] = 0.0
        if tree is not None:  # (never with a guide: the chain offers trees only where nothing shapes the rows)
            path, nxt = verify_tree(logits, tree, run.sampling, run.rng)
            self.target.keep_path(path)
            return prop, path, nxt, dead_end
        if run.sampling.greedy:
            n, nxt = verify_greedy(logits.argmax(axis=1), prop.tokens)
        else:
            p = Rows(logits, run.sampling)  # rows are computed as verification reaches them
            n, nxt = verify_sampled(p, prop.q, prop.tokens, run.rng)
        # Keep seq[:-1] + seq[-1] + the accepted drafts: once nxt is appended, that is the new seq[:-1].
        self.target.truncate(len(run.seq) + n)
        return prop, list(range(n)), nxt, dead_end

    def _emit(self, run: "_Run", chosen: list[tuple[int, str | None]]) -> tuple[list[tuple[int, str | None, str]],
                                                                             str | None]:
        """The round's chosen tokens join the text, up to an end of generation, a stop string or max_tokens:
        the emitted (token, source, text) and the finish reason, if the text ended."""
        emitted, finish = [], None
        for tok, source in chosen:
            if self.model.is_eog(tok):
                return emitted, "stop"
            run.out.append(tok)
            run.seq.append(tok)
            if run.guide is not None:
                run.guide.push(tok)
            emitted.append((tok, source, run.text.push(self.model.piece(tok))))
            if run.text.stopped:
                finish = "stop"
            elif len(run.out) >= run.max_tokens:
                finish = "length"
            if finish:
                break
        return emitted, finish

    def _start_costs(self, chain: Chain) -> None:
        self.costs_from = self._drafting.start_costs(self.target, chain, self._profile_key(), self.notes)

    def use_profile(self, proposers: Sequence[Proposer] = (), curve: bool = True) -> bool:
        """Start from this machine's profile of the target (profile.py): its verify curve (curve=False: not that),
        and, for each draft model among `proposers` (or their parts), the step costs and acceptance measured for
        it with this target (by `edgespec tune`, and by earlier engines as they closed). False where there is no
        profile for exactly this set-up."""
        return self._drafting.start_from(self._profile_key(), proposers, curve, self.notes)

    def _profile_key(self) -> dict | None:
        try:
            return profile.key_of(self.model, self.target.n_threads)
        except OSError:  # the file is gone since it was loaded: time it, keep nothing
            return None

    @property
    def back_curve(self) -> dict[int, float]:
        """m rows -> a one-row decode right after m rows, its cost over one after a one-row decode (WayBack)."""
        return dict(self._cost.back.seconds)

    def calibrate(self, sizes: Sequence[int] = CALIBRATION_SIZES) -> dict[int, float]:
        """The target's verify curve timed now and fed to the cost model (Drafting.calibrate)."""
        return self._drafting.calibrate(self.target, sizes)

    def _llama_seconds(self, run: "_Run") -> float:
        return self.target.llama_s + (run.chain.llama_seconds() if run.chain is not None else 0.0)

    def close(self, remember: bool = True) -> None:
        """Free both models and their caches (waiting for a generation running in another thread to finish).
        remember: first add what drafting learned to this machine's profile (benchmarks, which measure, do not).
        Using the engine afterwards raises EdgespecError."""
        if self.closed:
            return
        turn = self._turns.begin()
        try:
            if remember:
                self._drafting.remember(self._profile_key())
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


@dataclass
class _Run:
    """One generation's state: the text so far (prompt included), what it generated, its chain and its rng."""

    seq: list[int]
    sampling: SamplingConfig
    max_tokens: int
    text: TextStream
    stats: GenerationStats
    rng: np.random.Generator
    chain: Chain | None
    guide: Guide | None = None  # grammar, penalties, logit bias: what shapes each row by the text before it
    out: list[int] = field(default_factory=list)
    first_row: np.ndarray | None = None  # the prompt's last row (the first token's), until the first round
