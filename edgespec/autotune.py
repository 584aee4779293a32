"""`edgespec tune`: a bounded measurement of a target (and its draft) on this machine, kept as the model's profile.

It times the verify curve T_v(m), runs plain decoding, the draft model at fixed lengths and prompt lookup on a
sample of the built-in prompts (one per category; or the user's, `--workload`), as many as end within the time
budget, and derives the break-even rule in numbers: a round of K drafts costs T(K) = T_v(K+1) + T_d(K) and yields
E[N_K] tokens, so it pays only while T(K) < E[N_K] x T_plain; the draft's budget per round is E[N_K] x T_plain -
T_v(K+1). The profile is written once, at the end: an interrupted run leaves nothing behind.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from . import benchmark, profile, workloads
from .costs import WayBack
from .engine import Engine
from .proposers import PromptLookupProposer
from .tuning import CostModel, DraftLength

FIXED_KS = (2, 4, 8)
STEADY = (0.7, 1.4)  # plain decoding's decode on the sample over the curve's one-row decode, which a run alone
# measures alike (its time a token, here 0.89-1.22 in seven runs; 2.45 in one begun a minute after a 3.5 GB file was
# written) ...
STEADY_FLOOR_S = 0.005  # ... and apart by more than this (a step under a millisecond has fixed costs beside the
# decode that the curve's figure leaves out: the tests' tiny model, 0.2 ms against 0.1)


def choose(seconds_per_token: dict[str, float]) -> str:
    """The configuration with the lowest measured time per token ("plain": no speculation); ties go to the earlier
    one, so plain wins a tie."""
    return min(seconds_per_token, key=lambda name: seconds_per_token[name])


def unsteady(verify_s: dict[int, float], plain_s: float | None) -> str:
    """A note where plain decoding's decode on the sample (plain_s: its rounds' verify phase, seconds; Python's
    share of a token left out, which a fast step would make count) and the verify curve's one-row decode, timed at
    different moments of the run, disagree by more than STEADY and STEADY_FLOOR_S allow: the machine's speed moved
    during the run (another program busy, a file being written back), and the figures do not fit together. "" where
    they agree."""
    one = verify_s.get(1)
    if not one or not plain_s or STEADY[0] <= plain_s / one <= STEADY[1] or abs(plain_s - one) < STEADY_FLOOR_S:
        return ""
    return (f"plain decoding's steps took {1000 * plain_s:.1f} ms on the sample, one verify row {1000 * one:.1f} ms "
            "in the curve: the machine's speed moved during the run (another program busy?), so these figures do "
            "not fit together; run tune again with the machine otherwise idle")


@dataclass
class BreakEven:
    k: int
    expected_tokens: float  # E[N_K]
    verify_s: float  # T_v(K+1)
    draft_s: float  # T_d(K)
    plain_s: float  # T_plain = T_v(1)

    @property
    def round_s(self) -> float:
        return self.verify_s + self.draft_s

    @property
    def limit_s(self) -> float:
        """What a round may cost and still pay: E[N_K] x T_plain."""
        return self.expected_tokens * self.plain_s

    @property
    def draft_budget_s(self) -> float:
        return self.limit_s - self.verify_s

    @property
    def pays(self) -> bool:
        return self.round_s < self.limit_s


def break_even(cost: CostModel, k_max: int) -> list[BreakEven]:
    plain = cost.t_verify(1)
    return [BreakEven(k, cost.expected_tokens(k), cost.t_verify(k + 1), cost.t_draft(k), plain)
            for k in range(1, k_max + 1) if cost.t_draft(k) is not None]


def _either(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def lookup_decision(cost: CostModel, entry: dict, k: int, lengths: Sequence[int] = (2, 3, 4)) -> str:
    """What prompt lookup will do from its measured acceptance by kind of proposal (the match's length, of `lengths`,
    and whether it is in the prompt or the answer so far): how many of a match's next tokens it verifies, at this
    verify curve (Splits.keep, as a chain's round asks it: a match declined is still compared with what the target
    then writes)."""
    policy = DraftLength(k, True, cost)
    policy.seed(entry)
    kinds = sorted((int(key.split(":")[1]), key.endswith(":own"), key) for key in entry.get("by_key", {})
                   if key.startswith("lookup:") and key.split(":")[1] != "0")
    if not kinds:
        return "prompt lookup: no match was tested on this sample; it learns from the text at hand"
    # (the prompt's matches first, the longest first; e: how many of the match's next tokens are verified)
    kept = sorted(((own, n, policy.keep(k, key, recheck_every=0)) for n, own, key in kinds),
                  key=lambda x: (x[0], -x[1]))
    where = {False: "in the prompt", True: "in the answer so far"}
    said = [f"{e} token{'s' if e != 1 else ''} after a match of {n} {where[own]}" for own, n, e in kept if e]
    declined = [f"{_either([str(n) for o, n, e in kept if o == own and not e])} {where[own]}"
                for own in (False, True) if any(o == own and not e for o, n, e in kept)]
    if not said:
        return (f"prompt lookup: no match seen on this sample is expected to pay at this verify curve (two rows "
                f"{cost.t_verify(2) / cost.t_verify(1):.2f}x one): plain steps, while what the matches offer is "
                "compared with what the target writes, to learn again")
    out = "prompt lookup: verifies up to " + ", ".join(said)
    if declined:
        out += f"; a plain step after matches of {' and of '.join(declined)} (what they offer is compared with what " \
               "the target writes, to learn again)"
    if len(kinds) < 2 * len(lengths):
        out += "; kinds of match unseen here, by what the text shows"
    return out


@dataclass
class Tuned:
    verify_s: dict[int, float]
    measured: dict[str, float]  # configuration -> seconds per token on the sample
    choice: str
    rows: dict
    draft_entry: dict | None = None  # the draft model's costs and acceptance, as the profile keeps them
    draft_name: str | None = None
    lookup_entry: dict | None = None
    decision: str = ""  # what the engine's adaptive policy will do from this profile
    lookup_decision: str = ""  # ... and prompt lookup's, where it was measured
    back_s: dict[int, float] = field(default_factory=dict)  # over a link: a plain step after m rows, its extra
    breakeven: list[BreakEven] = field(default_factory=list)
    path: Path | None = None
    offered: int = 0  # the sample's prompts that fit the context (one per category); rows has those measured in time
    unsteady: str = ""  # where the machine's speed moved during the run: a note saying so (unsteady())


def tune(engine: Engine, budget_s: float = 100.0, max_tokens: int = 48, lookup: bool = True,
         progress: Callable[[int, int, str], None] | None = None, save: bool = True,
         items: Sequence[workloads.Item] | None = None) -> Tuned:
    """budget_s: the whole measurement, warm-up and verify curves included, ends within about this (at least one
    prompt is measured however long it takes). items: the prompts, in order (default: the first built-in prompt of
    each category, categories interleaved)."""
    draft = benchmark.draft_of(engine)
    modes = ["plain"] + ([f"draft:{k}" for k in FIXED_KS if k <= engine.draft_max] if draft else []) + \
        (["lookup"] if lookup or draft is None else [])
    items = workloads.select(workloads.builtin(), limit=1) if items is None else list(items)
    # (warm_target: the target reads each prompt once, not once per mode: tune measures generation, not time to
    # the first token, and the time saved measures more prompts)
    rep = benchmark.run(engine, modes, items, max_tokens, progress=progress, budget_s=budget_s, calibrations=3,
                        use_profile=False, warm_target=True)
    if rep.interrupted:
        raise KeyboardInterrupt  # a profile from part of the run is not what tune promises: write nothing
    rows = rep.rows()
    measured = {m: r["overall"]["ms_per_token"] / 1000 for m, r in rows.items()}
    out = Tuned(rep.verify_curve, measured, choose(measured), rows, back_s=engine.back_curve,
                offered=len(items) - len(rep.skipped),
                unsteady=unsteady(rep.verify_curve, rows["plain"]["overall"]["phase_ms_per_round"]["verify"] / 1000))
    cost = CostModel(verify_s=dict(rep.verify_curve), back=WayBack(dict(out.back_s)))
    if draft is not None:
        longest = max((m for m in rows if m.startswith("draft:")), key=lambda m: int(m[6:]))
        r = rows[longest]["overall"]
        out.draft_entry = {"draft_round_s": {int(m[6:]): rows[m]["overall"]["phase_ms_per_round"]["draft"] / 1000
                                             for m in rows if m.startswith("draft:")},
                           # the policy's counts are conditional: position i tested, i.e. all before it passed
                           "reached": [float(x) for x in r["tested_by_position"]],
                           "accepted": [float(x) for x in r["accepted_by_position"]]}
        steps = [p.step_s for p in rep.policies.get(longest, []) if p.step_s is not None]
        if steps:  # one draft step, as the draft model timed it in the longest K's rounds
            out.draft_entry["step_s"] = steps[0]
        reads = [p.prompt_read_s for p in rep.policies.get(longest, []) if p.prompt_read_s]
        if reads:  # a prompt's reading per token, which the next process weighs each prompt by (Reading)
            out.draft_entry["read_s"] = reads[0]
        out.draft_name = profile.proposer_name(profile.key_of(draft.ctx.model, draft.ctx.n_threads))
        policy = DraftLength(engine.draft_max, True, cost)
        policy.seed(out.draft_entry)
        out.breakeven = break_even(cost, engine.draft_max)
        k, per_token = policy.cost.best_k(engine.draft_max)
        start = 0 if policy.standing_aside() else policy.decide(engine.draft_max).k
        out.decision = (f"draft model: K={start} per round to start with (then adjusted by what each text shows)"
                        if start else "draft model: no speculation (plain decoding, probing again now and then): "
                        f"the best K={k} expects {1000 * per_token:.1f} ms/token against "
                        f"{1000 * cost.t_verify(1):.1f} plain")
    if "lookup" in rep.policies:  # its acceptance by match length, for the next process's first rounds
        (lookup_policy,) = rep.policies["lookup"]
        out.lookup_entry = lookup_policy.learned()
        alone = CostModel(verify_s=dict(rep.verify_curve), back=WayBack(dict(out.back_s)))  # (seed() adds to it)
        matcher = PromptLookupProposer()
        out.lookup_decision = lookup_decision(alone, out.lookup_entry, engine.draft_max,
                                              range(matcher.n_min, matcher.n_max + 1))
    if save:
        key = profile.key_of(engine.model, engine.target.n_threads)
        old = profile.load(key)
        proposers = dict(old.proposers) if old is not None else {}
        if out.draft_entry is not None:  # (the answers' mean length is the user's texts', which tune's are not)
            kept = {"answer_tokens": proposers[out.draft_name]["answer_tokens"]} \
                if "answer_tokens" in proposers.get(out.draft_name, {}) else {}
            proposers[out.draft_name] = {**out.draft_entry, **kept}
        if out.lookup_entry is not None:
            lookup = PromptLookupProposer()
            proposers[profile.lookup_name(lookup.n_min, lookup.n_max)] = out.lookup_entry
        out.path = profile.save(key, rep.verify_curve, proposers, out.back_s)
    return out
