"""The engine's drafting policies replayed on recorded texts under a cost model, on a virtual clock.

A benchmark on a busy or drifting machine moves by +-10% per category from run to run, so a change to the drafting
policies cannot be told apart from noise prompt by prompt. Greedy speculation depends on the models only through
what each predicts at each position of the text, and on the machine only through what each decode costs; both can
be recorded once (recording.py):

- for each prompt, the target's greedy text (its plain decoding, to the end-of-generation token or max_tokens) and
  the draft model's prediction at each position of it, each from a one-token decode at the end of its cache, as
  drafting computes them. Where the draft's earlier tokens matched the text its context is the text, so its next
  token is that prediction; where one did not, the target rejects the draft there and what follows is never used;
- the seconds of a target decode and of a draft decode of m tokens on this machine (medians of a few timings).

A replay (Replay) runs the real engine, proposers, policies, `edgespec bench` and `edgespec tune` over contexts that
answer from the recording and advance a virtual clock by what each decode costs (time.perf_counter reads that clock
while the replay runs; Python's own time is left out). The same policies on the same recording take the same time
every run, so a change's effect is exact under the recorded costs, on every prompt recorded, and the costs can be
changed at will: noise on each decode, a network's latency on each target decode, a flatter verify curve (a GPU).
What it cannot show is the machine itself: recorded costs are one day's, and a real run times what it runs.

Greedy chains only: sampling needs the models' distributions, a tree the draft's second choices.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .backend import Context, common_prefix
from .workloads import Item
from .engine import DEFAULT_CTX, DEFAULT_DRAFT_MAX, Engine
from .errors import ContextOverflowError, EdgespecError, InvalidArgument
from .proposers import DraftModelProposer, HybridProposer, PromptLookupProposer

FORMAT = "edgespec-replay"
VERSION = 1


# the costs ------------------------------------------------------------------------------------------------
def _line(table: dict[int, float], m: int) -> float:
    """table[m] as timed, linear between timed sizes and along the last two past them."""
    if m in table:
        return table[m]
    known = sorted(table)
    if m < known[0] or len(known) == 1:
        return table[known[0]]
    lo = max([k for k in known if k < m], default=known[-2])
    hi = min([k for k in known if k > m], default=known[-1])
    if hi == lo:
        lo = known[-2]
    return max(0.0, table[lo] + (table[hi] - table[lo]) * (m - lo) / (hi - lo))


@dataclass
class Curve:
    """Seconds for a decode of m tokens asking for r rows of logits: timed with one row (a prompt, a plain step,
    a draft's step) and with every row (a verify), linear in the rows between the two; plus latency_s on every
    decode (a network's round trip), and switch_s on a decode of another shape (tokens, rows) than the one before
    it (over an rpc-server: its graph sent again; the context charges it, and its model says it is on a server)."""

    one_row: dict[int, float]
    all_rows: dict[int, float]
    latency_s: float = 0.0
    switch_s: float = 0.0

    def __call__(self, m: int, rows: int = 1) -> float:
        t = _line(self.one_row, m)
        if rows > 1 and m > 1:
            t += max(0.0, _line(self.all_rows, m) - t) * (min(rows, m) - 1) / (m - 1)
        return t + self.latency_s

    @classmethod
    def of(cls, timed: dict, latency_s: float = 0.0) -> "Curve":
        return cls({int(m): s for m, s in timed["one_row"].items()},
                   {int(m): s for m, s in timed["all_rows"].items()}, latency_s)

    def scaled(self, factor: float) -> "Curve":
        return Curve({m: t * factor for m, t in self.one_row.items()},
                     {m: t * factor for m, t in self.all_rows.items()}, self.latency_s, self.switch_s)

    def flattened(self, slope: float, rows: int = 17) -> "Curve":
        """The curve with a verify of m <= `rows` costing T(1) x (1 + slope x (m - 1)) (a memory-bound GPU or laptop:
        slope near 0), a decode without those rows no more; as timed past them."""
        one = self.one_row[min(self.one_row)]
        flat = {m: one * (1 + slope * (m - 1)) for m in range(1, rows + 1)}
        return Curve({**{m: t for m, t in self.one_row.items() if m > rows},
                      **{m: min(_line(self.one_row, m), t) for m, t in flat.items()}}, flat, self.latency_s,
                     self.switch_s)


class Clock:
    """Virtual seconds: advanced by the decodes a replay charges, each times exp(N(0, noise)) / its mean (a seeded
    lognormal, so a noisy replay is as repeatable as a quiet one), and by `tick` at each reading: what takes no
    decode (prompt lookup, Python) still takes some time, as it does for real, where the policies treat a proposer
    that costs nothing measurable apart from one that was never timed.

    A decode that names itself (`key`: which model, what it holds, how many tokens and rows) draws its noise from
    the seed, that key and how many times the key came before, so the same decode costs the same in every mode and
    under every version of the policies (common random numbers): two versions replayed with noise differ by what
    they decode, not by where each stands in one shared stream of draws (which moved a mode whose code had not
    changed by 1-2%). `hiccups`: hold-ups per second of decoding (another process's turn, a page fault), each an
    exponential delay of mean hiccup_s: a real machine's timings have such a tail (SmolLM2 steps of 17-20 ms, one
    in ten 30-72 ms, bench/results/trace-rpc-1gbit-wayback.log), which a lognormal spread has not."""

    def __init__(self, noise: float = 0.0, seed: int = 0, tick: float = 1e-6, hiccups: float = 0.0,
                 hiccup_s: float = 0.0) -> None:
        self.t = 0.0
        self.noise, self.tick, self.seed = noise, tick, seed
        self.hiccups, self.hiccup_s = hiccups, hiccup_s  # hold-ups per second of decoding, and their mean
        self._rng = np.random.default_rng(seed)
        self._seen: dict[tuple, int] = {}

    def now(self) -> float:
        self.t += self.tick
        return self.t

    def spend(self, seconds: float, key: tuple | None = None) -> float:
        if key is not None and (self.noise > 0 or self.hiccups > 0):
            # the n-th decode of its kind draws anew (a timing repeated is not the same timing)
            key = (*key, self._seen.setdefault(key, -1) + 1)
            self._seen[key[:-1]] = key[-1]
        if self.noise > 0:
            z = self._rng.standard_normal() if key is None else _normal(self.seed, key)
            seconds *= math.exp(self.noise * z - self.noise ** 2 / 2)
        if self.hiccups > 0:  # a hold-up: another process's turn, a page fault (exponential, mean hiccup_s)
            u = self._rng.random() if key is None else _NORMAL.cdf(_normal(self.seed, ("hiccup", *key)))
            p = -math.expm1(-self.hiccups * seconds)  # (hold-ups come at a rate in time: a longer decode meets more)
            if u < p:
                seconds += -self.hiccup_s * math.log(max(u, 1e-300) / p)  # (given u < p, u / p is uniform)
        self.t += seconds
        return seconds


def _normal(seed: int, key: tuple) -> float:
    """A standard normal draw that depends on (seed, key) only."""
    digest = hashlib.blake2b(repr((seed, key)).encode(), digest_size=8).digest()
    return _NORMAL.inv_cdf((int.from_bytes(digest, "little") + 0.5) / 2 ** 64)


_NORMAL = statistics.NormalDist()


# what the models predict ----------------------------------------------------------------------------------
class Oracle:
    """A model's prediction after each prefix of the recorded texts: predictions[i][p] is its next token after
    texts[i][:p + 1], where recorded; elsewhere (a text nobody recorded, a position past the recording) a fixed
    ordinary token."""

    def __init__(self, texts: Sequence[list[int]], predictions: Sequence[dict[int, int]], default: int,
                 confidence: Sequence[dict[int, float]] | None = None) -> None:
        self.texts, self.predictions, self.default = list(texts), list(predictions), default
        self.confidence = list(confidence) if confidence is not None else None  # the model's top probability
        self._last = 0

    def text_of(self, held: list[int]) -> int | None:
        """The recorded text sharing the longest prefix with `held` (the one just used, where it holds all of it)."""
        if self.texts and common_prefix(self.texts[self._last], held) == len(held):
            return self._last
        best, best_n = None, 0
        for i, t in enumerate(self.texts):
            n = common_prefix(t, held)
            if n > best_n:
                best, best_n = i, n
        if best is not None:
            self._last = best
        return best

    def next(self, text: int | None, position: int) -> int:
        return self.default if text is None else self.predictions[text].get(position, self.default)

    def logit(self, text: int | None, position: int, n_vocab: int) -> float:
        """The logit that gives the prediction its recorded probability against zeros elsewhere (sure, where none
        was recorded)."""
        p = None if text is None or self.confidence is None else self.confidence[text].get(position)
        if p is None:
            return 50.0
        p = min(max(p, 1e-6), 1 - 1e-6)
        return math.log(p * (n_vocab - 1) / (1 - p))


class ReplayContext:
    """A Context (backend/contexts.py) that answers from an Oracle: it holds tokens as a cache would, every decode
    costs what its Curve says on the Clock, and each row asked for is a one-hot row on the recorded prediction."""

    branches = 1

    def __init__(self, model, oracle: Oracle, curve: Curve, clock: Clock, n_ctx: int = DEFAULT_CTX,
                 n_threads: int = 2, role: str = "target") -> None:
        self.model, self.oracle, self.curve, self.clock, self.role = model, oracle, curve, clock, role
        self.n_ctx, self.n_threads, self.tokens, self.llama_s = n_ctx, n_threads, [], 0.0
        self._shape: tuple[int, int] | None = None  # (tokens, rows) of the last decode

    @property
    def room(self) -> int:
        return self.n_ctx - len(self.tokens)

    def decode(self, tokens: Sequence[int], logit_rows: Sequence[int] = (), progress=None) -> np.ndarray:
        if len(tokens) > self.room:
            raise ContextOverflowError(f"{len(self.tokens) + len(tokens)} tokens do not fit in the "
                                       f"{self.n_ctx}-token context")
        base = len(self.tokens)
        self.tokens.extend(tokens)
        if tokens:  # (the key: this decode and no other, whatever ran before it)
            key = (self.role, base, len(tokens), len(logit_rows), hash(tuple(self.tokens)))
            shape, self._shape = self._shape, (len(tokens), len(logit_rows))
            switch = self.curve.switch_s if shape is not None and shape != self._shape else 0.0
            self.llama_s += self.clock.spend(self.curve(len(tokens), len(logit_rows)) + switch, key)
        out = np.zeros((len(logit_rows), self.model.n_vocab), dtype=np.float32)
        if len(logit_rows):
            text = self.oracle.text_of(self.tokens)
            for i, r in enumerate(logit_rows):
                out[i, self.oracle.next(text, base + r)] = self.oracle.logit(text, base + r, self.model.n_vocab)
        if progress is not None:
            progress(len(tokens))
        return out

    def truncate(self, n: int) -> None:
        del self.tokens[n:]

    def clear(self) -> None:
        self.tokens.clear()

    sync, read, common_prefix = Context.sync, Context.read, Context.common_prefix  # (they use only the above)

    def synchronize(self) -> None:
        pass  # (each decode is paid for when it is made)

    def decode_tree(self, *args, **kwargs):
        raise EdgespecError("a replay verifies chains only (its recording has no second choices)")

    fork = decode_rows = end_fork = keep_path = decode_tree

    def close(self) -> None:
        pass


class RecordedVocab:
    """What the engine asks of a model's vocabulary, from a recording; its path is the recording's file, so a
    profile made in a replay is keyed by the recording."""

    def __init__(self, path: str, n_vocab: int, eog: Sequence[int], bos: int, control: Sequence[int] = ()) -> None:
        self.path, self.n_vocab, self.bos = path, n_vocab, bos
        self.control_ids = frozenset(control)
        self.eog_ids = sorted(eog)
        self._eog = set(eog)
        self.n_gpu_layers, self.rpc, self.tensor_split, self.is_recurrent = 0, [], [], False
        self.output_here, self.kv_cache = False, ("f16", "f16")

    def is_eog(self, token: int) -> bool:
        return token in self._eog

    def check_tokens(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            if not isinstance(t, (int, np.integer)) or not 0 <= t < self.n_vocab:
                raise InvalidArgument(f"token id {t!r} is not in this model's vocabulary (0..{self.n_vocab - 1})")

    def piece(self, token: int) -> bytes:
        return b""  # a replay times tokens; their text is the recording's

    def close(self) -> None:
        pass


def _messages_key(messages: Sequence) -> tuple:
    return tuple((m["role"], m["content"]) if isinstance(m, dict) else (m[0], m[1]) for m in messages)


class ReplayEngine(Engine):
    """An Engine over ReplayContexts: prompts are tokenized as the recording has them."""

    def __init__(self, prompts: dict[tuple, list[int]], filler: int, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._prompts, self._filler = prompts, filler

    def tokenize_chat(self, messages: Sequence, template: str | None = None,
                      tools: Sequence[dict] | None = None) -> list[int]:
        key = _messages_key(messages)
        if key not in self._prompts:
            raise InvalidArgument("this prompt is not in the recording; record it first (bench/replay.py record)")
        return list(self._prompts[key])

    def tokenize(self, prompt: str, *, chat_format: bool = False, system: str | None = None) -> list[int]:
        if chat_format:
            return self.tokenize_chat(([("system", system)] if system else []) + [("user", prompt)])
        return [self._filler] * max(1, len(prompt) // 4)  # a warm-up's text: any ordinary tokens


# a recording ----------------------------------------------------------------------------------------------
@dataclass
class Recording:
    data: dict
    path: str

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Recording":
        import json

        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise InvalidArgument(f"cannot read the recording {path}: {e}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
            raise InvalidArgument(f"{path} is not an edgespec replay recording (version {VERSION})")
        return cls(data, os.path.realpath(path))

    @property
    def max_tokens(self) -> int:
        return self.data["max_tokens"]

    def tuned_on(self, other: "Recording") -> "Recording":
        """What `tune` runs on before a replay of this recording's prompts where it measured on none of them:
        other's texts (the built-in prompts `tune` measures on) under this recording's costs and name, so that the
        profile it writes is the one an engine of this recording reads. A user who ran `edgespec tune` once, then
        works on prompts of their own. The same pair only."""
        pair, theirs = (self.data["target"], self.data["draft"]), (other.data["target"], other.data["draft"])
        if pair != theirs:
            raise InvalidArgument(f"{other.path} is a recording of another pair ({' + '.join(theirs)}, not "
                                  f"{' + '.join(pair)})")
        if self.data["vocab"] != other.data["vocab"]:
            raise InvalidArgument(f"{other.path} is a recording of another pair: files of the same names, another "
                                  f"vocabulary")
        return Recording({**other.data, "costs": self.data["costs"]}, self.path)

    def items(self) -> list[Item]:
        return [Item(t["category"], messages=tuple(tuple(sorted({"role": r, "content": c}.items()))
                                                   for r, c in t["messages"])) for t in self.data["texts"]]

    def curves(self, latency_ms: float = 0.0, verify_slope: float | None = None, target_scale: float = 1.0,
               draft_slope: float | None = None, switch_ms: float = 0.0) -> tuple[Curve, Curve]:
        """The recorded costs: the target's times target_scale (a slower machine state against the same draft),
        with latency_ms on each of its decodes (and switch_ms on one whose shape is not the last one's), and its
        verify curve flattened to verify_slope (Curve.flattened); the draft's decodes of several tokens (reading
        what it skipped, a lookup's tokens) flattened to draft_slope (on a GPU both models are memory-bound: a flat
        verify beside a draft whose reading costs as on this CPU is neither machine)."""
        costs = self.data["costs"]
        target = Curve.of(costs["target"], latency_ms / 1000).scaled(target_scale)
        target.switch_s = switch_ms / 1000
        if verify_slope is not None:
            target = target.flattened(verify_slope)
        draft = Curve.of(costs["draft"])
        if draft_slope is not None:
            draft = draft.flattened(draft_slope)
        return target, draft

    def engine(self, clock: Clock, target: Curve, draft: Curve, lookup: bool = True,
               draft_max: int = DEFAULT_DRAFT_MAX, n_ctx: int = DEFAULT_CTX, draft_p_min: float = 0.0) -> ReplayEngine:
        """An engine with the recorded target and draft (and prompt lookup: the hybrid), as Engine.load builds one;
        draft_p_min needs the draft's recorded confidences."""
        if draft_p_min > 0 and not all("draft_p" in t for t in self.data["texts"]):
            raise InvalidArgument("this recording holds no draft confidences (bench/replay.py draft adds them)")
        texts = [t["tokens"] for t in self.data["texts"]]
        starts = [t["n_prompt"] for t in self.data["texts"]]
        vocab = self.data["vocab"]
        target_says = [{p: text[p + 1] for p in range(start - 1, len(text) - 1)} for text, start in zip(texts, starts)]
        draft_says = [{start - 1 + i: tok for i, tok in enumerate(t["draft"])} for t, start in
                      zip(self.data["texts"], starts)]
        recorded = self.data["texts"]
        sure = [{start - 1 + i: p for i, p in enumerate(t["draft_p"])} for t, start in zip(recorded, starts)] \
            if all("draft_p" in t for t in recorded) else None
        models = [RecordedVocab(self.path, vocab["n_vocab"], vocab["eog"], vocab["bos"], vocab.get("control", ()))
                  for _ in range(2)]
        filler = vocab["filler"]
        threads = self.data.get("threads", 2)
        if target.switch_s:  # a decode of another shape dearer: a target on an rpc-server, as the engine sees one
            models[0].rpc = ["127.0.0.1:50052 (replayed)"]
        tctx = ReplayContext(models[0], Oracle(texts, target_says, filler), target, clock, n_ctx, threads)
        dctx = ReplayContext(models[1], Oracle(texts, draft_says, filler, sure), draft, clock, n_ctx, threads, "draft")
        proposer = DraftModelProposer(dctx, vocab["n_vocab"], p_min=draft_p_min)
        if lookup:
            proposer = HybridProposer(proposer, PromptLookupProposer.for_model(models[0]))
        prompts = {_messages_key(t["messages"]): t["tokens"][:t["n_prompt"]] for t in self.data["texts"]}
        return ReplayEngine(prompts, filler, tctx, proposer, draft_max)


@contextlib.contextmanager
def virtual_time(clock: Clock) -> Iterator[None]:
    """While a replay runs: time.perf_counter reads the virtual clock (everything the engine and the benchmark time,
    they time on it), and profiles go to a directory of the replay's own, so nothing it learns reaches the user's.
    One replay at a time, in one thread."""
    real, saved = time.perf_counter, os.environ.get("EDGESPEC_PROFILES")
    with tempfile.TemporaryDirectory(prefix="edgespec-replay-") as profiles:
        os.environ["EDGESPEC_PROFILES"] = profiles
        time.perf_counter = clock.now
        try:
            yield
        finally:
            time.perf_counter = real
            if saved is None:
                os.environ.pop("EDGESPEC_PROFILES", None)
            else:
                os.environ["EDGESPEC_PROFILES"] = saved
