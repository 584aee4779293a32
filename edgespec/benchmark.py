"""Plain decoding against drafting strategies on a workload, measured in one process (`edgespec bench`).

Modes run interleaved prompt by prompt (the order rotating), each from cold caches (so time to first token and
end-to-end speed include the prompt), for a number of repeats. Per mode and category: ms/token as sum(time) /
sum(tokens), speedup over plain measured in the same run (the median over repeats of each repeat's ratio) and its
95% interval over prompts (a paired bootstrap: how far it could move on other prompts of the kind), acceptance
by draft position, mean accepted length, time per phase, Python's share, time to first token, end-to-end tokens per
second; greedy outputs are compared with plain's. Numbers, not verdicts; report.py renders them.
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .drafting import parts
from .engine import Engine
from .errors import EdgespecError, InvalidArgument
from .intervals import speedup_interval
from .proposers import DraftModelProposer, HybridProposer, PromptLookupProposer, Proposer
from .stats import PHASES
from .workloads import Item

MODE_NAMES = ("plain", "draft", "lookup", "hybrid")
MAX_TREE_WIDTH = 4  # MODE@W: verification trees of up to W branches (the context is made for them where asked)


def parse_modes(text: str, have_draft: bool) -> list[str]:
    """"plain,draft:4,lookup,hybrid" -> the modes, plain first; draft and hybrid need a draft model. NAME:K
    drafts exactly K per round, NAME alone chooses by measured cost."""
    modes = []
    for m in (x.strip() for x in text.split(",") if x.strip()):
        spec, _, w = m.partition("@")
        name, _, k = spec.partition(":")
        if name not in MODE_NAMES or (k and (not k.isdigit() or int(k) < 1 or name == "plain")) or \
                (w and (not w.isdigit() or not 2 <= int(w) <= MAX_TREE_WIDTH or name == "plain")):
            raise InvalidArgument(f"unknown mode {m!r}: use plain, draft, lookup, hybrid, or draft:K / lookup:K / "
                                  f"hybrid:K for a fixed K >= 1; a suffix @W for verification trees of up to W = "
                                  f"2..{MAX_TREE_WIDTH} branches (draft:K@W: a fixed shape, K deep with W - 1 second "
                                  f"choices)")
        if name in ("draft", "hybrid") and not have_draft:
            raise InvalidArgument(f"mode {m} needs a draft model (--draft)")
        if m not in modes:
            modes.append(m)
    return ["plain"] + [m for m in modes if m != "plain"]


def default_modes(have_draft: bool) -> str:
    return "plain,draft:2,draft:4,draft:8,draft,lookup,hybrid" if have_draft else "plain,lookup:4,lookup"


@dataclass
class Tally:
    """Sums for one (mode, category) in one repeat."""

    s: float = 0.0  # generation seconds (rounds)
    n: int = 0  # tokens
    rounds: int = 0
    tree_rounds: int = 0  # rounds that verified a tree (more than one branch)
    branch_rounds: int = 0  # of them, rounds with a branch the draft model drafted after a second choice
    drafted: int = 0
    accepted: int = 0
    llama_s: float = 0.0
    wall_s: float = 0.0  # from the call to the last token, prompt included
    prompts: int = 0
    same: int = 0
    phase_s: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    drafted_at: list = field(default_factory=list)
    accepted_at: list = field(default_factory=list)
    tested_at: list = field(default_factory=list)
    ttft_s: list = field(default_factory=list)
    items: list = field(default_factory=list)  # (generation seconds, tokens) of each prompt, in the order measured

    def add(self, result, wall_s: float, ttft_s: float, same: bool) -> None:
        st = result.stats
        self.s += st.generation_s
        self.n += st.n_tokens
        self.items.append((st.generation_s, st.n_tokens))
        self.rounds += st.n_rounds
        self.tree_rounds += sum(n for why, n in st.rounds_by_reason.items() if "tree" in why.split("+"))
        self.branch_rounds += sum(n for why, n in st.rounds_by_reason.items() if "branch" in why.split("+"))
        self.drafted += st.n_drafted
        self.accepted += st.n_accepted
        self.llama_s += sum(r.llama_seconds for r in st.rounds)
        self.wall_s += wall_s
        self.prompts += 1
        self.same += same
        self.ttft_s.append(ttft_s)
        self._add_phases_and_positions(st)

    def _add_phases_and_positions(self, other) -> None:
        """Time per phase and drafts tested / accepted by position, from a GenerationStats or another Tally."""
        for p in PHASES:
            self.phase_s[p] += other.phase_s[p]
        for i, (d, a, t) in enumerate(zip(other.drafted_at, other.accepted_at, other.tested_at)):
            if i == len(self.drafted_at):
                self.drafted_at.append(0)
                self.accepted_at.append(0)
                self.tested_at.append(0)
            self.drafted_at[i] += d
            self.accepted_at[i] += a
            self.tested_at[i] += t


@dataclass
class Report:
    modes: list[str]
    categories: list[str]
    tallies: dict = field(default_factory=dict)  # (repeat, mode, category) -> Tally; category "overall" too
    verify_curve: dict = field(default_factory=dict)  # m rows -> seconds
    peak_rss_mb: float = 0.0
    divergences: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # why an item was left out (a prompt longer than the context)
    interrupted: bool = False  # Ctrl-C after some items: the figures cover those
    policies: dict = field(default_factory=dict)  # mode -> the draft-length policy of each part, as they ended

    def rows(self) -> dict:
        """mode -> category -> the figures (medians over repeats where a figure is per repeat)."""
        repeats = sorted({r for r, _, _ in self.tallies})
        out: dict = {}
        for mode in self.modes:
            for cat in [*self.categories, "overall"]:
                ts = [self.tallies[(r, mode, cat)] for r in repeats if (r, mode, cat) in self.tallies]
                plains = [self.tallies[(r, "plain", cat)] for r in repeats if (r, mode, cat) in self.tallies]
                if not ts or not all(t.n for t in ts):
                    continue
                out.setdefault(mode, {})[cat] = _figures(ts, plains)
        return out


def _figures(ts: list[Tally], plains: list[Tally]) -> dict:
    all_ = Tally()
    for t in ts:  # pooled over repeats, for the sums that are not ratios to plain
        for name in ("s", "n", "rounds", "tree_rounds", "branch_rounds", "drafted", "accepted", "llama_s", "wall_s",
                     "prompts", "same"):
            setattr(all_, name, getattr(all_, name) + getattr(t, name))
        all_.ttft_s += t.ttft_s
        all_._add_phases_and_positions(t)
    speedups = [(p.s / p.n) / (t.s / t.n) for t, p in zip(ts, plains) if p.n and t.n]
    return {
        "prompts": all_.prompts, "same_as_plain": all_.same, "ms_per_token": 1000 * all_.s / all_.n,
        "speedup": statistics.median(speedups), "speedup_by_repeat": speedups,
        "speedup_interval": speedup_interval([p.items for p in plains], [t.items for t in ts]),
        "items": [t.items for t in ts],  # per repeat: (seconds, tokens) of each prompt (intervals over runs)
        "acceptance": all_.accepted / all_.drafted if all_.drafted else None,
        "acceptance_by_position": [a / d for a, d in zip(all_.accepted_at, all_.drafted_at) if d],
        "drafted_by_position": all_.drafted_at, "accepted_by_position": all_.accepted_at,
        "tested_by_position": all_.tested_at,  # drafted, with every earlier position accepted
        "mean_accepted_length": all_.accepted / all_.rounds, "tokens_per_round": all_.n / all_.rounds,
        "rounds": all_.rounds, "tree_rounds": all_.tree_rounds, "branch_rounds": all_.branch_rounds,
        "phase_ms_per_round": {p: 1000 * all_.phase_s[p] / all_.rounds for p in PHASES},
        "python_share": 1 - all_.llama_s / all_.s if all_.s else 0.0,
        "ttft_ms": 1000 * statistics.median(all_.ttft_s), "end_to_end_tok_s": all_.n / all_.wall_s,
    }


def draft_of(engine: Engine) -> DraftModelProposer | None:
    """The engine's draft model (alone or in its chain), or None."""
    return next((p for p in parts(engine.proposer) if isinstance(p, DraftModelProposer)), None) \
        if engine.proposer is not None else None


class Strategies:
    """A proposer of its own for each mode, so each mode's policy learns on its own (as a process running only that
    mode would), all drafting with the engine's one draft model."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._draft = draft_of(engine)
        self.by_mode: dict[str, Proposer] = {}

    def proposer(self, mode: str) -> Proposer:
        if mode not in self.by_mode:
            name, d, model = mode.partition("@")[0].partition(":")[0], self._draft, self.engine.model
            lookup = PromptLookupProposer.for_model(model)
            self.by_mode[mode] = (lookup if name == "lookup" else
                                  DraftModelProposer(d.ctx, model.n_vocab, d.p_min) if name == "draft" else
                                  HybridProposer(DraftModelProposer(d.ctx, model.n_vocab, d.p_min), lookup))
        return self.by_mode[mode]

    def generate(self, mode: str, tokens: list[int], max_tokens: int, cold: bool = True, warm_target: bool = False):
        """Run one mode; returns (result, seconds from the call to the last token, seconds to the first token).
        cold: each run reads its prompt from scratch, as a new request would; warm_target: but the target keeps
        what it holds (the prompt, where the last run was on the same one), the draft model reading it anew."""
        if cold:
            if not warm_target:
                self.engine.target.clear()
            if self._draft is not None:
                self._draft.ctx.clear()
        spec, _, w = mode.partition("@")
        name, _, k = spec.partition(":")
        kwargs = {"speculative": False} if name == "plain" else \
            {"proposer": self.proposer(mode), "tree_width": int(w or 1)}
        if k:
            kwargs.update(draft_max=int(k), adaptive=False)
        t0 = time.perf_counter()
        first = None
        for r in self.engine.stream(tokens, max_tokens=max_tokens, **kwargs):
            if first is None and (r.token is not None or r.result is not None):
                first = time.perf_counter() - t0
            if r.result is not None:
                return r.result, time.perf_counter() - t0, first
        raise AssertionError("stream() ended without a result")  # pragma: no cover


class Session:
    """One engine's measurement, an item at a time: what run() does in a loop, for callers that interleave several
    engines item by item (bench/rpc.py --one-process: each link's engine in one process, so the machine's drift
    falls on every setting alike). Construction warms up, times the verify curve and loads the profile; measure()
    runs every mode on one item; finish() returns the report."""

    def __init__(self, engine: Engine, modes: Sequence[str], categories: Sequence[str], max_tokens: int = 64,
                 calibrations: int = 1, use_profile: bool = True, fresh: bool = False,
                 diverged: Callable | None = None, warm_target: bool = False) -> None:
        self.engine, self.modes, self.max_tokens = engine, list(modes), max_tokens
        self.use_profile, self.fresh, self.diverged, self.warm_target = use_profile, fresh, diverged, warm_target
        self.strategies = strategies = Strategies(engine)
        self.report = Report(list(modes), list(categories))
        self.done = 0
        warm = engine.tokenize("Hello")
        strategies.generate("plain", warm, 8)
        # Timed before any adaptive mode runs, so no mode times it (or saves it) on its own.
        curves = [engine.calibrate(range(1, 17)) for _ in range(calibrations)]
        self.report.verify_curve = {m: statistics.median(c[m] for c in curves) for m in curves[0]}
        for mode in modes:  # the first call of each batch shape allocates: keep it out of the numbers
            strategies.generate(mode, warm, 8)
        strategies.by_mode.clear()  # ... and what the warm-up taught the policies out of the figures
        self.adaptive = [m for m in modes if ":" not in m and m != "plain"]
        if use_profile:
            engine.use_profile([strategies.proposer(m) for m in self.adaptive], curve=False)

    def measure(self, it: Item, rep: int = 0, turn: int = 0) -> dict | None:
        """Every mode on one item (the modes' order rotated by `turn`); returns mode -> (result, wall seconds, seconds
        to the first token), or None where the item does not fit the context (noted in the report)."""
        engine, strategies, report, modes = self.engine, self.strategies, self.report, self.modes
        tokens = it.tokens(engine)
        if len(tokens) + self.max_tokens > engine.target.n_ctx:
            report.skipped.append(f"a {it.category} prompt of {len(tokens)} tokens (+ {self.max_tokens} to write) "
                                  f"does not fit the context of {engine.target.n_ctx}")
            self.done += 1
            return None
        if self.fresh and self.done:  # nothing learned on another text carries over
            strategies.by_mode.clear()
            if self.use_profile:
                engine.use_profile([strategies.proposer(m) for m in self.adaptive], curve=False)
        turn %= len(modes)
        results = {}
        for mode in [*modes[turn:], *modes[:turn]]:
            results[mode] = strategies.generate(mode, tokens, self.max_tokens, warm_target=self.warm_target)
        ref = results["plain"][0].tokens
        if self.diverged is not None:  # (measures with the model: before the tallies, so a Ctrl-C here adds none)
            report.divergences += [self.diverged(it, tokens, ref, r.tokens, m) for m, (r, _, _) in results.items()
                                   if r.tokens != ref]
        for mode, (res, wall, first) in results.items():
            for cat in (it.category, "overall"):
                report.tallies.setdefault((rep, mode, cat), Tally()).add(res, wall, first, res.tokens == ref)
        self.done += 1
        return results

    def finish(self) -> Report:
        if not self.report.tallies:
            raise EdgespecError(f"no prompt of the workload fits the context of {self.engine.target.n_ctx} tokens "
                                f"with {self.max_tokens} to write; raise --ctx-size")
        self.report.peak_rss_mb = peak_rss_mb()
        self.report.policies = {mode: [self.engine.policy(part) for part in parts(p)]
                                for mode, p in self.strategies.by_mode.items()}
        return self.report


def progress_line(it: Item, results: dict) -> str:
    """An item's line: its category, plain's ms/token and each mode's speed-up over it."""
    plain_ms = results["plain"][0].stats.ms_per_token or 0.0
    line = ", ".join(f"{m} x{plain_ms / r.stats.ms_per_token:.2f}" for m, (r, _, _) in results.items()
                     if m != "plain" and r.stats.ms_per_token)
    return f"{it.category}: plain {plain_ms:.0f} ms/token; {line}"


class _Pace:
    """How long the next item is expected to take, from the items measured: the modes' reading of a prompt (to the
    first token) per prompt token, and the longest of their decoding after it (answers run to max_tokens alike)."""

    def __init__(self) -> None:
        self.read_s = self.decode_s = 0.0
        self.prompt_tokens = 0

    def add(self, n_prompt: int, results: dict) -> None:
        firsts = [wall if first is None else first for _, wall, first in results.values()]
        self.read_s += sum(firsts)
        self.prompt_tokens += n_prompt
        self.decode_s = max(self.decode_s, sum(wall for _, wall, _ in results.values()) - sum(firsts))

    def expect(self, n_prompt: int) -> float:
        return self.decode_s + self.read_s * n_prompt / max(self.prompt_tokens, 1)


def run(engine: Engine, modes: Sequence[str], items: Sequence[Item], max_tokens: int = 64, repeats: int = 1,
        progress: Callable[[int, int, str], None] | None = None, diverged: Callable | None = None,
        budget_s: float | None = None, calibrations: int = 1, use_profile: bool = True, fresh: bool = False,
        warm_target: bool = False) -> Report:
    """Measure every mode on every item, `repeats` times; progress(done, total, line) after each item.
    diverged(item, tokens, plain, other, mode): called where a mode's greedy output differs from plain's (a note).
    budget_s: the run, warm-up and verify curve included, ends within about this: an item starts only where it is
    expected to end in time (_Pace), the first always. Ctrl-C after an item has finished returns the report so far,
    with `interrupted` set (before that, it propagates). The verify curve is timed here (the median of
    `calibrations`); use_profile: the adaptive modes start from what `edgespec tune` measured for their draft, as a
    new process would. fresh: every item starts from new proposers and policies (the profile's figures only): each
    is a first prompt. warm_target: an item's modes after the first find its prompt in the target's cache (the
    draft model still reads it anew): the generation's figures are the same, and the target's reading of the prompt
    (the time to the first token, end to end) is measured once, not per mode.
    """
    t0 = time.perf_counter()
    session = Session(engine, modes, list(dict.fromkeys(it.category for it in items)), max_tokens, calibrations,
                      use_profile, fresh, diverged, warm_target)
    total, pace = len(items) * repeats, _Pace()
    try:
        for rep in range(repeats):
            for i, it in enumerate(items):
                n_prompt = len(it.tokens(engine)) if budget_s is not None else 0
                if budget_s is not None and session.done and \
                        time.perf_counter() + pace.expect(n_prompt) - t0 > budget_s:
                    break
                results = session.measure(it, rep, i + rep)
                if results is not None:
                    pace.add(n_prompt, results)
                if progress is not None and results is not None:
                    progress(session.done, total, progress_line(it, results))
    except KeyboardInterrupt:
        if not session.report.tallies:
            raise
        session.report.interrupted = True  # what was measured so far is kept: the caller shows it, then stops
    return session.finish()


def peak_rss_mb() -> float:
    """This process's peak resident memory (ru_maxrss is KiB on Linux, bytes on macOS)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024
