"""What a generation cost and how well the draft did, measured honestly.

ms per token is sum(round time) / sum(tokens emitted), never a mean of per-round ratios. Prompt processing
(prefill) is counted apart from generation, as llama.cpp reports it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("draft", "prepare", "verify", "accept")


@dataclass
class RoundRecord:
    n_drafted: int
    n_accepted: int  # draft tokens the target agreed with
    n_emitted: int  # tokens given to the caller (accepted + the target's own, less any cut by a stop)
    seconds: float
    llama_seconds: float  # time inside llama.cpp calls (decode, logits, cache removal)
    reason: str = "fixed"  # why this draft length: fixed, warm-up, cost, fallback, probe
    sources: tuple[str, ...] = ()  # proposer of each drafted token
    # a verification tree's round: the positions it drafted (its depth; n_drafted counts its nodes) and the
    # proposers of the accepted ones (a chain's are its first n_accepted)
    depth: int | None = None
    accepted_sources: tuple[str, ...] | None = None


@dataclass
class GenerationStats:
    n_prompt: int = 0
    n_prompt_evaluated: int = 0  # prompt tokens actually decoded (the rest were already in the cache)
    prompt_s: float = 0.0
    rounds: list[RoundRecord] = field(default_factory=list)
    phase_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    drafted_at: list[int] = field(default_factory=list)  # rounds that drafted a token at position i
    accepted_at: list[int] = field(default_factory=list)  # ... and had it accepted
    tested_at: list[int] = field(default_factory=list)  # rounds that drafted position i and accepted all before it
    drafted_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    rounds_by_reason: dict[str, int] = field(default_factory=dict)
    fallbacks: list[dict] = field(default_factory=list)  # when and why speculation was switched off (and on again)
    constraint_s: float = 0.0  # of the rounds' time, what the grammar cost: its matcher, masks, forced tokens

    def add_round(self, rec: RoundRecord) -> None:
        self.rounds.append(rec)
        positions = rec.n_drafted if rec.depth is None else rec.depth
        while len(self.drafted_at) < positions:
            self.drafted_at.append(0)
            self.accepted_at.append(0)
            self.tested_at.append(0)
        for i in range(positions):
            self.drafted_at[i] += 1
            self.accepted_at[i] += i < rec.n_accepted
            self.tested_at[i] += i <= rec.n_accepted
        for src in rec.sources:
            self.drafted_by_source[src] = self.drafted_by_source.get(src, 0) + 1
            self.accepted_by_source.setdefault(src, 0)
        for src in rec.sources[:rec.n_accepted] if rec.accepted_sources is None else rec.accepted_sources:
            self.accepted_by_source[src] += 1
        self.rounds_by_reason[rec.reason] = self.rounds_by_reason.get(rec.reason, 0) + 1

    def summary(self) -> str:
        """One line for people: speed, acceptance by proposer, plain rounds, prompt."""
        s = self
        parts = [f"{s.n_tokens} tokens", f"{s.tokens_per_s or 0:.1f} tok/s", f"{s.ms_per_token or 0:.1f} ms/token"]
        if s.n_drafted:
            by = ", ".join(f"{k} {s.accepted_by_source.get(k, 0)}/{v}" for k, v in s.drafted_by_source.items())
            parts.append(f"acceptance {100 * s.acceptance_rate:.0f}% ({by}), {s.mean_accepted_length:.2f} accepted/round")
        if s.fallbacks:
            parts.append(f"plain decoding in {s.fallback_rounds} rounds (drafting not expected to pay)")
        parts.append(f"prompt {s.n_prompt} tokens in {s.prompt_s:.2f} s")
        return ", ".join(parts)

    @property
    def fallback_rounds(self) -> int:
        """Rounds decoded plainly because drafting was not expected to pay, or to repay reading the prompt (in a
        chain: the part that was off, e.g. "free+fallback" for the hybrid's draft model)."""
        return sum(n for why, n in self.rounds_by_reason.items() if "fallback" in why.split("+"))

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

    @property
    def n_tokens(self) -> int:
        return sum(r.n_emitted for r in self.rounds)

    @property
    def n_drafted(self) -> int:
        return sum(r.n_drafted for r in self.rounds)

    @property
    def n_accepted(self) -> int:
        return sum(r.n_accepted for r in self.rounds)

    @property
    def generation_s(self) -> float:
        return sum(r.seconds for r in self.rounds)

    @property
    def acceptance_rate(self) -> float | None:
        return self.n_accepted / self.n_drafted if self.n_drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Draft tokens accepted per round (the target's own token each round not counted)."""
        return self.n_accepted / self.n_rounds if self.n_rounds else None

    @property
    def tokens_per_round(self) -> float | None:
        return self.n_tokens / self.n_rounds if self.n_rounds else None

    @property
    def accept_by_position(self) -> list[float]:
        """P(draft token i accepted | the round drafted it), i = 0..K-1."""
        return [a / d for a, d in zip(self.accepted_at, self.drafted_at)]

    @property
    def ms_per_token(self) -> float | None:
        return 1000.0 * self.generation_s / self.n_tokens if self.n_tokens else None

    @property
    def tokens_per_s(self) -> float | None:
        return self.n_tokens / self.generation_s if self.n_tokens and self.generation_s > 0 else None

    @property
    def python_overhead(self) -> float | None:
        """Share of generation time spent outside llama.cpp (sampling, bookkeeping, the Python loop)."""
        total = self.generation_s
        return 1.0 - sum(r.llama_seconds for r in self.rounds) / total if total > 0 else None

    def to_dict(self) -> dict:
        return {
            "n_prompt": self.n_prompt,
            "n_prompt_evaluated": self.n_prompt_evaluated,
            "prompt_s": self.prompt_s,
            "n_tokens": self.n_tokens,
            "n_rounds": self.n_rounds,
            "n_drafted": self.n_drafted,
            "n_accepted": self.n_accepted,
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length,
            "tokens_per_round": self.tokens_per_round,
            "accept_by_position": self.accept_by_position,
            "generation_s": self.generation_s,
            "tokens_per_s": self.tokens_per_s,
            "ms_per_token": self.ms_per_token,
            "python_overhead": self.python_overhead,
            "phase_s": dict(self.phase_s),
            "drafted_by_source": dict(self.drafted_by_source),
            "accepted_by_source": dict(self.accepted_by_source),
            "rounds_by_reason": dict(self.rounds_by_reason),
            "fallbacks": list(self.fallbacks),
            "constraint_s": self.constraint_s,
        }
