"""Many generations at once on one target (and one draft) context: continuous batching, with speculation chosen per
sequence and per step by measured cost. The engine under `edgespec serve`; usable without HTTP.

Each step: (1) every active sequence gets a draft length K, or none: its request's own (a fixed mode), or (auto,
`scheduling.StepPlanner`) the K that most raises the whole batch's tokens per second, from the measured cost of a
target decode of m rows, of the draft, and each proposer's acceptance, so drafting fades as the batch fills and
returns when it empties; (2) prompt lookup proposes for free, the draft model drafts for all drafting sequences
together, one decode per draft position; (3) **one** target decode holds every sequence's rows (1 when plain, K+1
when it speculates) and, up to the batch size, the prompt tokens of requests that just joined; (4) each sequence
verifies its own rows (greedy, or rejection sampling with its own rng) and rolls back its own cache cells. Requests
join and leave between steps; a free sequence slot whose cache shares the longest prefix with a new prompt is
reused, and only the rest of the prompt is decoded.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Sequence

import numpy as np

from . import batch_costs
from .batch_drafting import StepDrafter
from .backend import Model, SeqContext
from .constraints import Grammar
from .errors import ContextOverflowError, EdgespecError, InvalidArgument
from .pairing import VocabInfo, check_pair
from .sampling import Rows
from .scheduling import StepPlanner
from .sequences import MODES, Event, Generation, Handle, QueueFull, Request, _logprobs  # noqa: F401 (MODES: callers import it from here)
from .stats import GenerationStats, RoundRecord
from .tuning import CostModel
from .verify import verify_greedy, verify_sampled

class BatchEngine:
    def __init__(self, target: str, draft: str | None = None, *, parallel: int = 4, n_ctx: int = 4096,
                 n_threads: int | None = None, n_gpu_layers: int = 0, draft_n_gpu_layers: int | None = None,
                 draft_n_threads: int | None = None, lookup: bool = False, draft_max: int = 8,
                 max_queue: int | None = None, rpc: Sequence[str] = (), draft_rpc: Sequence[str] = (),
                 tensor_split: Sequence[float] = (), output_here: bool = False,
                 kv_cache: str | Sequence[str] = "f16") -> None:
        if parallel < 1:
            raise InvalidArgument(f"parallel must be at least 1, got {parallel}")
        self.model = Model(target, n_gpu_layers, rpc=rpc, tensor_split=tensor_split, output_here=output_here,
                           kv_cache=kv_cache)
        self.parallel, self.draft_max = parallel, draft_max
        n_batch = max(512, parallel * (draft_max + 1))
        self.target = SeqContext(self.model, n_ctx, parallel, n_threads, n_batch)
        self.draft: SeqContext | None = None
        if draft is not None:
            dm = Model(draft, n_gpu_layers if draft_n_gpu_layers is None else draft_n_gpu_layers, rpc=draft_rpc,
                       kv_cache=kv_cache)
            check_pair(VocabInfo.of(self.model), VocabInfo.of(dm))
            self.draft = SeqContext(dm, n_ctx, parallel, draft_n_threads or n_threads, n_batch)
        if self.model.is_recurrent:
            raise EdgespecError("speculative decoding needs a target whose KV cache can be rolled back")
        self.auto = "hybrid" if draft and lookup else "draft" if draft else "lookup" if lookup else "off"
        self.max_queue = 4 * parallel if max_queue is None else max_queue
        self.cost = CostModel()  # verify_s: seconds of a target decode of m rows, whatever sequences they belong to
        self.planner = StepPlanner(self.cost)
        self.drafter = StepDrafter(self.model, self.target, self.draft, self.planner, self.auto, draft_max)
        self.metrics: collections.Counter = collections.Counter()
        self._queue: collections.deque[Handle] = collections.deque()
        self._active: list[tuple[Handle, Generation]] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._finish_all: str | None = None
        self.calibrate()

    # requests -----------------------------------------------------------------------------------------------
    def modes(self) -> list[str]:
        return ["auto", "off", "lookup"] + (["draft", "hybrid"] if self.draft else [])

    def check(self, req: Request) -> None:
        """Refuse a request that cannot be served, before it is queued."""
        if req.mode not in self.modes():
            raise InvalidArgument(f"unknown speculative mode {req.mode!r}; this server offers {', '.join(self.modes())}")
        if not req.prompt:
            raise InvalidArgument("the prompt is empty")
        self.model.check_tokens(req.prompt)
        if len(req.prompt) > self.target.n_ctx:
            raise ContextOverflowError(f"the prompt is {len(req.prompt)} tokens but a sequence holds "
                                       f"{self.target.n_ctx}")
        if req.draft_max is not None and not 0 <= req.draft_max <= 32:
            raise InvalidArgument(f"draft_max must be between 0 and 32, got {req.draft_max}")
        if req.constraint is not None:  # a grammar or schema that does not compile: refused now, not mid-stream
            Grammar(req.constraint, self.model.constraint_tokenizer(), self.model.n_vocab)

    def submit(self, req: Request) -> Handle:
        self.check(req)
        handle = Handle(self, req)
        with self._cond:
            if self._stopping:
                raise QueueFull("the server is shutting down")
            if len(self._queue) >= self.max_queue and len(self._active) >= self.parallel:
                raise QueueFull(f"all {self.parallel} sequences are busy and {len(self._queue)} requests wait")
            self._queue.append(handle)
            self.metrics["requests"] += 1
            self._cond.notify_all()
        return handle

    def generate(self, req: Request) -> tuple[list[Event], Event]:
        """Serve one request to the end from this thread (when no scheduler thread runs): its events, the last."""
        events: list[Event] = []
        req.on_event = events.append
        self.submit(req)
        while not events or events[-1].finish_reason is None:
            self.step()
        return events[:-1], events[-1]

    @property
    def n_active(self) -> int:
        return len(self._active)

    @property
    def n_queued(self) -> int:
        return len(self._queue)

    # the scheduler ------------------------------------------------------------------------------------------
    def run(self) -> None:
        """Step until stop(): the scheduler thread of a server."""
        while True:
            with self._cond:
                while not self._stopping and not self._queue and not self._active:
                    self._cond.wait()
                if self._stopping and not self._active and not self._queue:
                    return
            try:
                self.step()
            except Exception as e:  # one failed step ends the requests in it, not the server
                for handle, g in list(self._active):
                    self._end(handle, g, "error", error=f"{type(e).__name__}: {e}")

    def stop(self, finish_reason: str = "length") -> None:
        """End every request now (each gets its final event) and let run() return."""
        with self._cond:
            self._stopping = True
            self._finish_all = finish_reason
            self._cond.notify_all()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def step(self) -> bool:
        """One step of every active sequence; False when there was nothing to do."""
        self._admit()
        if self._finish_all:
            for handle, g in list(self._active):
                self._end(handle, g, self._finish_all)
            while self._queue:
                handle = self._queue.popleft()
                self._emit(handle, Event("", finish_reason=self._finish_all, stats=GenerationStats()))
            return False
        for handle, g in list(self._active):
            if handle.cancelled:
                self._end(handle, g, "cancelled", free=True)
        live = [(h, g) for h, g in self._active]
        if not live:
            return False
        t0 = time.perf_counter()
        llama0 = self.target.llama_s + (self.draft.llama_s if self.draft else 0.0)
        ready = [(h, g) for h, g in live if not g.pending]
        gens = [g for _, g in ready]
        if gens:
            self.drafter.decide(gens)
        t1 = time.perf_counter()
        self.drafter.propose(gens)
        t2 = time.perf_counter()
        items = [(g.slot, [g.seq[-1], *g.proposal], range(1 + len(g.proposal))) for g in gens]
        rows = sum(len(tokens) for _, tokens, _ in items)
        filling = [(h, g) for h, g in live if g.pending]
        chunks = self._prompt_chunks([g for _, g in filling], self.target.n_batch - rows)
        logits = self.target.decode(items + [(g.slot, chunk, ()) for g, chunk in chunks])
        t3 = time.perf_counter()
        for (handle, _), (g, chunk) in zip(filling, chunks):
            del g.pending[:len(chunk)]
            if not g.pending:
                g.stats.prompt_s = t3 - g.started  # from joining to its prompt's last step
            self._progress(handle, g)
        if not chunks:  # prompt rows would make it a prefill's timing, not a verify's
            self.cost.observe_verify(rows, t3 - t2)
        self.metrics["steps"] += 1
        self.metrics["batch_rows"] += rows
        self.metrics["last_batch_rows"] = rows
        self.metrics["prompt_rows"] += sum(len(c) for _, c in chunks)
        llama = self.target.llama_s + (self.draft.llama_s if self.draft else 0.0) - llama0
        for (handle, g), rows_logits in zip(ready, logits):
            self._accept(handle, g, rows_logits, time.perf_counter() - t0, llama, t1 - t0 + (t2 - t1), t3 - t2)
        t4 = time.perf_counter()
        self.planner.observe_step(t4 - t0)
        self.metrics["step_s"] += t4 - t0
        for phase, dt in (("decide", t1 - t0), ("draft", t2 - t1), ("verify", t3 - t2), ("accept", t4 - t3)):
            self.metrics[f"{phase}_s"] += dt  # verify: the target's decode (an rpc-server's network waits inside)
        return True

    @staticmethod
    def _prompt_chunks(filling: list[Generation], budget: int) -> list[tuple[Generation, list[int]]]:
        """Prompt tokens that join this step's decode: the oldest requests' first, up to budget tokens in all (at
        least one chunk, so a prompt always advances)."""
        out = []
        for g in filling:
            chunk = g.pending[:max(budget, 1 if not out else 0)]
            if not chunk:
                break
            out.append((g, chunk))
            budget -= len(chunk)
        return out

    def _admit(self) -> None:
        """Free sequences take waiting requests; their prompts are decoded by the next steps, with everyone's rows."""
        with self._cond:
            while self._queue and len(self._active) < self.parallel:
                handle = self._queue.popleft()
                if handle.cancelled:
                    continue
                g = Generation(handle.req, self._slot_for(handle.req.prompt), self.model)
                keep = min(self.target.common_prefix(g.slot, g.seq), len(g.seq) - 1)
                self.target.truncate(g.slot, keep)
                g.pending = g.seq[keep:-1]  # seq[-1] is decoded by its first step, with the drafts
                g.stats.n_prompt_evaluated = len(g.seq) - keep  # (that last one included, as Engine counts)
                self.metrics["prompt_tokens"] += len(g.seq)
                self._active.append((handle, g))
                if not g.pending:  # (all of it in the cache already: read by its first step)
                    self._progress(handle, g)
                if handle.req.max_tokens <= 0:  # nothing to write (its first step would write a token regardless)
                    self._end(handle, g, "length")

    def _slot_for(self, prompt: list[int]) -> int:
        """The free slot whose cache shares the longest prefix with the prompt (same system prompt, next turn)."""
        busy = {g.slot for _, g in self._active}
        free = [s for s in range(self.parallel) if s not in busy]
        return max(free, key=lambda s: self.target.common_prefix(s, prompt))

    # verification -------------------------------------------------------------------------------------------
    def _accept(self, handle: Handle, g: Generation, logits: np.ndarray, seconds: float, llama: float,
                draft_s: float, verify_s: float) -> None:
        sampling, prop, q = g.req.sampling, g.proposal, g.q
        rows, dead_end = logits, None
        if g.guide is not None:  # each row masked and penalised by the text up to it
            rows = g.guide.rows(logits, prop)
            dead = np.flatnonzero(~np.isfinite(rows).any(axis=1))
            if len(dead):  # the grammar allows nothing after prop[:d]: verify no further, choose nothing there
                dead_end = int(dead[0])
                prop, q, rows = prop[:dead_end], q[:dead_end], rows[:dead_end + 1]
                rows[dead_end] = 0.0
        if sampling.greedy:
            n, nxt = verify_greedy(rows.argmax(axis=1), prop)
        else:
            p = Rows(np.asarray(rows), sampling)
            n, nxt = verify_sampled(p, q if any(x is not None for x in q) else None, prop, g.rng)
        self.target.truncate(g.slot, len(g.seq) + n)  # seq[:-1] + seq[-1] + the accepted drafts
        sources = ["grammar"] * min(g.forced, len(prop)) + [g.kind] * (len(prop) - g.forced)
        if prop:
            if len(prop) > g.forced and n >= g.forced:  # the proposer's own tokens were put to the test
                self.planner.accept[g.kind].observe_acceptance(len(prop) - g.forced, n - g.forced)
            for source in set(sources):
                self.metrics[f"drafted_{source}"] += sources.count(source)
                self.metrics[f"accepted_{source}"] += sources[:n].count(source)
            self.metrics["rounds_speculative"] += 1
        else:
            self.metrics["rounds_plain"] += 1
        self.metrics[f"rounds_reason_{g.reason}"] += 1
        emitted = 0
        for j, tok in enumerate([*prop[:n]] + ([] if n == dead_end else [nxt])):
            if self.model.is_eog(tok):
                g.finish = "stop"
                break
            g.out.append(tok)
            g.seq.append(tok)
            if g.guide is not None:
                g.guide.push(tok)
            emitted += 1
            event = Event(g.text.push(self.model.piece(tok)), tok, from_draft=j < n)
            if g.req.logprobs is not None:  # the target's own, before any mask or penalty
                event.logprob, event.top = _logprobs(logits[j], tok, g.req.logprobs)
            self._emit(handle, event)
            if g.text.stopped:
                g.finish = "length" if g.text.stopped_by is None else "stop"  # (None: min_indent's limit)
            elif len(g.out) >= g.req.max_tokens or self._out_of_time(g):
                g.finish = "length"
            if g.finish:
                break
        if g.finish is None and n == dead_end:
            g.finish = "grammar"  # the constraint allows no token here: end, rather than choose one it forbids
        if g.finish is None and self.target.room(g.slot) < 1:
            g.finish = "length"
        g.stats.phase_s["draft"] += draft_s
        g.stats.phase_s["verify"] += verify_s
        g.stats.add_round(RoundRecord(len(prop), n, emitted, seconds, llama, g.reason, tuple(sources)))
        self.metrics["generated_tokens"] += emitted
        if g.finish:
            self._end(handle, g, g.finish)

    @staticmethod
    def _out_of_time(g: Generation) -> bool:
        """A request's time limit (llama-server's t_max_predict_ms) is spent and its text holds a line end."""
        return (g.req.time_limit_s is not None and "\n" in g.text.text
                and time.perf_counter() - g.started - g.stats.prompt_s >= g.req.time_limit_s)

    def _end(self, handle: Handle, g: Generation, finish: str, error: str | None = None, free: bool = False) -> None:
        """Finish a request: its last event, its slot freed (its cells too when it was cancelled or failed)."""
        self._active = [(h, x) for h, x in self._active if x is not g]
        if free or error:
            self.target.clear(g.slot)
            if self.draft is not None:
                self.draft.clear(g.slot)
        self.metrics[f"finished_{finish}"] += 1
        tail = "" if error else g.text.flush()
        self._emit(handle, Event(tail, finish_reason=finish, stats=g.stats, error=error, stop_word=g.text.stopped_by))

    def _progress(self, handle: Handle, g: Generation) -> None:
        """Where the request asked (llama-server's return_progress): how far its prompt's reading has come. The last
        prompt token is read by the first step, with the drafts: counted read once the rest is."""
        if handle.req.progress:
            total, cached = len(g.seq), len(g.seq) - g.stats.n_prompt_evaluated
            read = total - len(g.pending) - (1 if g.pending else 0)
            self._emit(handle, Event("", progress=(read, total, cached, time.perf_counter() - g.started)))

    @staticmethod
    def _emit(handle: Handle, event: Event) -> None:
        if handle.req.on_event is not None and not handle.cancelled:
            handle.req.on_event(event)

    def calibrate(self) -> None:
        """Time target decodes of m rows (every sequence drafting draft_max at most) on a free slot, once."""
        batch_costs.calibrate(self.target, self.draft, self.cost, self.planner,
                              min(self.parallel * (self.draft_max + 1), 64, self.target.n_ctx))

    def close(self) -> None:
        for ctx in (self.draft, self.target):
            if ctx is not None:
                ctx.close()
                ctx.model.close()

