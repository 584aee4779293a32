"""Who drafts how much in a round of one generation: the proposer chain, each part's draft-length policy, and what
each part hears back after verification. The engine only asks a Chain for a proposal and tells it what passed.

A proposer may be a chain of parts (`proposer.parts`, e.g. the hybrid: prompt lookup, then the draft model). Each
part has its own policy (tuning.DraftLength), fed its own costs and acceptance; in a round each part in turn
proposes from where the earlier ones stopped, up to the round length its own policy wants. Policies belong to the
engine (Drafting) and outlive a generation: what they learned carries across texts and per-call limits, and
across processes through the machine's profile (profile.py: read at the start, added to at the close).

Behind a free part (prompt lookup), a part that costs time (the draft model) plans the round by expected gain: how
many of the free part's tokens to keep and how many of its own to add (DraftLength.plan).

Drafting also owns the costs the policies share: the target's verify curve, from the profile or timed at the first
drafted round (start_costs, calibrate).
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from . import profile
from .backend import Context, common_prefix
from .proposers import EMPTY, DraftModelProposer, GrammarProposer, PromptLookupProposer, Proposal, Proposer
from .sampling import SamplingConfig
from .stats import GenerationStats
from .tree import Tree
from .tuning import CostModel, Decision, DraftLength


CALIBRATION_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)  # verify rows timed for the curve


def parts(proposer: Proposer) -> Sequence[Proposer]:
    """The chain a proposer stands for: its parts, or itself alone."""
    return getattr(proposer, "parts", None) or (proposer,)


class Drafting:
    """An engine's draft-length policies, one per proposer (or part of a chain), sharing the target's verify costs
    (the same whoever drafts); acceptance and draft costs are each proposer's own."""

    def __init__(self, draft_max: int, adaptive: bool, cost: CostModel, tree_width: int = 1) -> None:
        self.draft_max, self.adaptive, self.cost = draft_max, adaptive, cost
        self.tree_width = tree_width  # > 1: rounds may be verification trees of up to that many branches
        self._policies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.grammar = GrammarProposer()  # one for the engine, so its policy (and acceptance) carries over

    def policy(self, proposer: Proposer) -> DraftLength:
        if proposer not in self._policies:
            shared = self.cost if not self._policies else CostModel(verify_s=self.cost.verify_s)
            self._policies[proposer] = DraftLength(self.draft_max, self.adaptive, shared)
        return self._policies[proposer]

    def start_from(self, key: dict | None, proposers: Sequence[Proposer], curve: bool, notes: list[str]) -> bool:
        """Start from the profile under `key`: its verify curve (unless curve=False) and, for each draft model or
        prompt lookup among `proposers` (or their parts), its costs and acceptance. False where there is none for
        exactly this key."""
        known = profile.load(key, notes) if key is not None else None
        if known is None:
            return False
        if curve:
            for m, t in known.verify_s.items():
                self.cost.observe_verify(m, t)
        for part in (x for p in proposers for x in parts(p)):
            name = _entry_name(part)
            if name in known.proposers:
                self.policy(part).seed(known.proposers[name])
        return True

    def needs_costs(self, chain: "Chain") -> bool:
        """The chain decides by measured cost and the target's verify curve is not known yet (plain rounds time
        only m = 1)."""
        return chain.measures and len(self.cost.verify_s) < 2

    def start_costs(self, target: Context, chain: "Chain", key: dict | None, notes: list[str]) -> str:
        """The target's verify curve before the first drafted round: this machine's profile of the model (with
        what it holds for the chain's proposers), else timed now and saved for the next process. Returns where
        it came from: "profile" or "measured"."""
        if self.start_from(key, [link.part for link in chain.links], True, notes):
            return "profile"
        curve = self.calibrate(target)
        if key is not None:
            profile.save(key, curve)
        return "measured"

    def calibrate(self, target: Context, sizes: Sequence[int] = CALIBRATION_SIZES) -> dict[int, float]:
        """Time a target decode of m rows (m in sizes) at the end of what the cache holds, and feed the cost
        model. Costs about one decode per size, once per engine; the cache is left as it was."""
        held = len(target.tokens)
        sizes = [m for m in sizes if m <= target.room]
        filler = target.tokens[-1:] or [target.model.bos]
        target.decode(filler, [0])  # the first call of a shape allocates; keep that out of the numbers
        target.truncate(held)
        curve = {}
        for m in sizes:
            t0 = time.perf_counter()
            target.decode(filler * m, range(m))
            curve[m] = time.perf_counter() - t0
            target.truncate(held)
        for m, t in curve.items():
            self.cost.observe_verify(m, t)
        return curve

    def remember(self, key: dict | None) -> None:
        """Add what the proposers' policies learned to the profile under `key`, where there is one (its verify
        curve stays as it was measured), so the next process starts from it."""
        learned = self.learned()
        known = profile.load(key) if key is not None and learned else None
        if known is None:
            return
        entries = dict(known.proposers)
        for name, entry in learned.items():
            entries[name] = profile.merge(entries.get(name), entry)
        profile.save(key, known.verify_s, entries)

    def learned(self, min_rounds: int = 8) -> dict[str, dict]:
        """What the policies of draft models and prompt lookup learned here (those with min_rounds of evidence), by
        profile name; of several policies for one proposer, the one with the most evidence."""
        out, evidence = {}, {}
        for part, policy in list(self._policies.items()):
            name, n = _entry_name(part), policy.cost.n_observed
            if name is not None and n >= min_rounds and policy.cost.draft_round_s and n > evidence.get(name, 0):
                out[name], evidence[name] = policy.learned(), n
        return out

    def chain(self, proposer: Proposer | None, k_max: int | None, adaptive: bool | None,
              grammar: bool = False, tree_width: int | None = None) -> "Chain | None":
        """This generation's chain (None: nothing proposes); k_max, adaptive and tree_width: this call's limits
        (None: the policies' own). grammar: the output is constrained, so the tokens the grammar forces come
        first, free."""
        chain = ([self.grammar] if grammar else []) + list(parts(proposer) if proposer is not None else ())
        width = self.tree_width if tree_width is None else tree_width
        return Chain([_Link(p, self.policy(p)) for p in chain], k_max, adaptive, width) if chain else None


def _entry_name(part: Proposer) -> str | None:
    """A proposer's entry in the target's profile: a draft model's (by its file and settings), prompt lookup's; None
    for others (or a draft file gone since)."""
    if isinstance(part, PromptLookupProposer):
        return profile.lookup_name(part.n_min, part.n_max)
    if not isinstance(part, DraftModelProposer):
        return None
    try:
        return profile.proposer_name(profile.key_of(part.ctx.model, part.ctx.n_threads))
    except OSError:
        return None


CATCH_UP_LIMIT = 32  # a probe whose proposer has more than this to read first waits for the next text


def _behind(part: Proposer, seq: Sequence[int]) -> int:
    """Tokens a proposer must read before it can propose from seq (a draft model after standing aside); 0 for
    those that read nothing."""
    return part.behind(seq) if isinstance(part, DraftModelProposer) else 0


@dataclass
class _Link:
    part: Proposer
    policy: DraftLength
    start: int = 0  # where this part's tokens begin in the round's proposal
    n: int = 0  # how many it proposed this round
    key: object = None
    seconds: float = 0.0
    offered: list[int] | None = None  # all it proposed, where the round kept fewer (the planner stood it aside)
    tree: Tree | None = None  # what it proposed, where that was a tree
    alternatives: list | None = None  # a draft model's second choice at each of its n positions (and its q)
    branch: tuple | None = None  # a draft model's branch after one of them (Proposal.branch)


class Chain:
    def __init__(self, links: list[_Link], k_max: int | None, adaptive: bool | None, tree_width: int = 1) -> None:
        self.links = links
        self.k_max, self.adaptive = k_max, adaptive
        self.tree_width = tree_width
        self._used: list[_Link] = []
        self._aside: _Link | None = None  # a part whose offer the round cut: it learns from the verified tokens
        self._leaves: tuple[_Link, int, set[int]] | None = None  # second choices verified as leaves: whose, the
        # chain's length, and the positions they stand at

    @property
    def measures(self) -> bool:
        """Whether any part decides by measured cost this call (then the target's verify curve is needed)."""
        return any(link.policy.adaptive if self.adaptive is None else self.adaptive for link in self.links)

    @property
    def reads_prompt(self) -> bool:
        """Whether a part has prompt work to do before it can propose (a draft model's cache)."""
        return any(isinstance(link.part, DraftModelProposer) for link in self.links)

    def begin(self, seq: Sequence[int], start: Callable[[], None] | None = None) -> None:
        """A new text: each policy hears so, start() runs (the engine's costs, which a profile may seed the
        policies with), then each part that will draft reads the prompt (one standing aside catches up if and
        when it drafts)."""
        for link in self.links:
            link.policy.new_text()
        if start is not None:
            start()
        for link in self.links:
            if not link.policy.standing_aside(self.adaptive):
                link.part.begin(seq)

    def propose(self, seq: list[int], cap: int, sampling: SamplingConfig, rng: np.random.Generator,
                stats: GenerationStats, guide=None, rows: int | None = None) -> tuple[Proposal, str]:
        """Each part proposes in turn from where the earlier ones stopped, up to the round length its own policy
        wants; returns the joint proposal and the decisions' reasons (for the round's record). With a guide, the
        parts draft under it (deterministic proposals are cut where the grammar forbids), and it is left as it
        was. cap: the most tokens deep (max_tokens, the context); rows: the most tokens in all, a tree's included
        (the context's room; default cap)."""
        rows = cap if rows is None else rows
        self._used, self._aside, self._leaves = [], None, None
        for link in self.links:
            link.tree = link.alternatives = link.branch = None
        if cap <= 0:
            return EMPTY, "fixed"
        first = None  # a lone free proposer that can offer a tree does, where the output is not constrained
        if self.tree_width > 1 and len(self.links) == 1 and guide is None and hasattr(self.links[0].part,
                                                                                      "propose_tree"):
            first = self.links[0].policy.decide(cap, self.k_max, self.adaptive)
            if first.reason == "free":
                prop = self._tree(self.links[0], seq, first.k, rows)
                return prop, "free" if prop.parents is None else "tree"
        tokens: list[int] = []
        qs: list[np.ndarray | None] = []
        sources: list[str] = []
        sampled = False
        reasons = []
        pushed = 0
        try:
            for link in self.links:
                policy = link.policy
                behind_free = len(self._used) == 1 and self._used[0].policy.free
                decision = first if first is not None else \
                    policy.decide(cap, self.k_max, self.adaptive, planned=behind_free) \
                    if len(tokens) < cap or behind_free else Decision(0, "full")
                if decision.reason == "probe" and _behind(link.part, seq) > CATCH_UP_LIMIT:
                    policy.defer_probe()
                    decision = Decision(0, "fallback")
                reasons.append(decision.reason)
                if decision.reason == "fallback" and decision.why:
                    stats.fallbacks.append({"round": stats.n_rounds, "why": decision.why})
                k = decision.k - len(tokens)
                if behind_free and decision.k > 0 and decision.reason not in ("fixed", "free"):
                    # Keep j of the free lead's tokens and draft f after them, whichever split (or this part
                    # alone, or the lead alone) is expected to cost least per token; learning rounds (warm-up,
                    # probe) draft >= 1. An explore round drafts one more than the plan where the plan drafts at
                    # all: forced drafting there would pay for what the lead does better (and for catching up
                    # on its tokens), which on copied text cost more than the hybrid gained.
                    lead = self._used[0]
                    learning = decision.reason not in ("cost", "explore")
                    limit = decision.k if learning else min(cap, policy.k_max if self.k_max is None else self.k_max)
                    read_s = getattr(link.part, "read_s", None) or 0.0  # a model must first read what it missed
                    behind = _behind(link.part, seq) if read_s else 0
                    j, k = policy.plan(limit, lead.policy.keyed(lead.key), lead.n, least=int(learning),
                                       behind=behind, read_s=read_s)
                    if decision.reason == "explore" and k > 0 and j + k < limit:
                        k += 1
                    if j < lead.n:
                        lead.offered, self._aside = tokens[lead.start:lead.start + lead.n], lead
                        del tokens[j:], sources[j:], qs[j:]
                        lead.n = j
                        if pushed > j:
                            guide.pop(pushed - j)
                            pushed = j
                        if j == 0:
                            self._used, sampled = [], False
                            reasons[0] = "dropped"
                if k <= 0 or (guide is not None and tokens and guide.is_eog(tokens[-1])):
                    continue
                t0 = time.perf_counter()
                context = seq + tokens if tokens else seq
                seconds = self.tree_width > 1 and guide is None and isinstance(link.part, DraftModelProposer)
                prop = link.part.propose(context, k, sampling, rng, guide=guide) if guide is not None else \
                    link.part.propose(context, k, sampling, rng, alternatives=True,
                                      branch=self._branching(link, len(tokens), k)) if seconds else \
                    link.part.propose(context, k, sampling, rng)
                # what drafting this many costs, without catching up on text decoded while the part stood aside
                # or drafting a branch
                link.seconds = time.perf_counter() - t0 - getattr(link.part, "catch_up_s", 0.0) - \
                    (getattr(link.part, "branch_s", 0.0) if seconds else 0.0)
                n = len(prop.tokens)
                if guide is not None and prop.q is None:
                    n = guide.allowed_prefix(prop.tokens)  # past that the target would reject them for certain
                link.start, link.key = len(tokens), prop.key
                link.n = policy.keep(n, prop.key) if decision.reason == "free" else n
                self._used.append(link)
                if prop.alternatives is not None:
                    link.alternatives = prop.alternatives[:link.n]
                    link.branch = prop.branch if prop.branch and prop.branch[0] < link.n else None
                tokens += prop.tokens[:link.n]
                sources += prop.sources[:link.n]
                qs += list(prop.q[:link.n]) if prop.q is not None else [None] * link.n
                sampled = sampled or prop.q is not None
                if guide is not None:
                    for t in prop.tokens[:link.n]:
                        if guide.is_eog(t):
                            break
                        guide.push(t)
                        pushed += 1
        finally:
            if pushed:
                guide.pop(pushed)
        extra = self._second_choices(tokens, rows)
        if extra:
            leaves, parents = extra
            return Proposal(tokens + [t for t, _ in leaves], qs + [q for _, q in leaves] if sampled else None,
                            sources + ["draft"] * len(leaves), parents=list(range(-1, len(tokens) - 1)) + parents
                            ), "+".join(reasons + ["tree"] + (["branch"] if self._leaves[3] else []))
        return Proposal(tokens, qs if sampled else None, sources), "+".join(reasons) or "fixed"

    def _branching(self, link: _Link, offset: int, k: int) -> Callable[[int], int]:
        """For a draft model drafting k tokens after `offset` of earlier parts': how many to draft after its second
        choice at its position i (DraftLength.branch_length), from the round's measured acceptance only."""
        def length(i: int) -> int:
            accept = self._accept()[:offset] + link.policy.keyed(None).acceptances(k)
            return link.policy.branch_length(accept, offset + i, k - 1 - i, link.policy.cost.t_draft(k) or 0.0,
                                             link.part.extra_row_s, self.adaptive)
        return length

    def _accept(self) -> list[float]:
        """The chance each position of the round's chain passes, its earlier ones passed: each part's own estimate."""
        return [a for x in self._used for a in x.policy.keyed(x.key).acceptances(x.n)]

    def _second_choices(self, tokens: list[int], rows: int) -> tuple[list, list[int]] | None:
        """Beside the chain, (token, q) and parent of each node: the draft's second choices worth a row as leaves
        (DraftLength.second_choices), then its branch if it drafted one; `rows` nodes in all; None: none."""
        link = next((x for x in self._used if x.alternatives), None)
        if link is None:
            return None
        n_chain, room, fork = len(tokens), rows - len(tokens), None
        if link.branch is not None and room > 0 and self.tree_width > 1:
            at, grown, bq = link.branch
            fork = (link.start + at, [link.alternatives[at]] + [(t, bq[j] if bq else None)
                                                               for j, t in enumerate(grown[:room - 1])])
        most = min(self.tree_width - 1 - (fork is not None), room - (len(fork[1]) if fork else 0))
        leaves, parents = [], []
        for p in link.policy.second_choices(self._accept(), link.start, most + (fork is not None), self.adaptive):
            token, q = link.alternatives[p]
            p += link.start
            if token >= 0 and token != tokens[p] and (fork is None or p != fork[0]) and len(leaves) < most:
                leaves.append((token, q))
                parents.append(p - 1)
        at = {parents[i] + 1 for i in range(len(leaves))}
        if fork is not None:
            head = n_chain + len(leaves)
            leaves += fork[1]
            parents += [fork[0] - 1] + list(range(head, head + len(fork[1]) - 1))
            at.add(fork[0])
            fork = (fork[0], head, len(fork[1]))
        if not leaves:
            return None
        self._leaves = (link, n_chain, at, fork)
        return leaves, parents

    def _tree(self, link: _Link, seq: list[int], k: int, rows: int) -> Proposal:
        """A free proposer's continuations as a tree, cut to the nodes worth verifying (DraftLength.keep_tree), at
        most `rows` of them."""
        t0 = time.perf_counter()
        prop = link.part.propose_tree(seq, k, self.tree_width)
        n = len(prop.tokens)
        offered = Tree(prop.tokens, prop.parents or list(range(-1, n - 1)), [None] * n, prop.sources)
        tree = link.policy.keep_tree(offered, prop.key, rows)
        link.seconds, link.key, link.start, link.n, link.tree = time.perf_counter() - t0, prop.key, 0, len(tree), tree
        self._used.append(link)
        return Proposal(tree.tokens, None, tree.sources, prop.key, None if tree.is_chain else tree.parents)

    def accepted(self, n: int, verified: Sequence[int] | None = None, path: Sequence[int] | None = None) -> None:
        """n tokens of the round's proposal passed: each part that proposed hears its own share. verified: the
        round's tokens as verification chose them (the n accepted, then the target's own); a part whose offer the
        round cut learns from them how much of all it offered would have passed, so a proposer set aside for a
        while still has its acceptance measured (exactly for greedy decoding; for sampling, a close estimate).
        path: the accepted nodes where the round was a tree."""
        if self._leaves is not None:  # the chain passed up to n; a second choice there may have passed instead
            link, n_chain, at, fork = self._leaves
            n = sum(1 for node in path if node < n_chain)
            leaf = len(path) > n
            if n in at:
                link.policy.alternatives.observe_tries(1, leaf)
            if fork is not None:  # the draft's cache keeps the branch's tokens on the path
                link.part.keep_branch(len(path) - n if leaf and path[n] == fork[1] else 0)
        for link in self._used:
            if link.tree is not None:  # path: the tree's accepted nodes (a chain's first n)
                link.part.accepted(n)
                link.policy.observe_tree(link.tree, range(n) if path is None else path, link.seconds, link.key)
                continue
            tested = n >= link.start  # every token before this part's passed
            passed = min(link.n, n - link.start) if tested else 0
            link.part.accepted(passed)
            if link is not self._aside or verified is None:
                link.policy.observe(link.n, passed if tested else None, link.seconds, link.key)
        aside = self._aside
        if aside is not None and verified is not None:
            offered, known = aside.offered, verified[aside.start:]
            m = common_prefix(offered, known)
            d = min(len(offered), len(known))
            # a mismatch at m: positions 0..m tested, m failed; else all that could be compared passed
            aside.policy.observe(len(offered) if m < d else d, m, aside.seconds, aside.key)

    def llama_seconds(self) -> float:
        return sum(link.part.llama_seconds() for link in self.links)
