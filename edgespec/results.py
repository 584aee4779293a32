"""What a generation hands back: its result, and each step of a stream (Engine.generate, Engine.stream)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .stats import GenerationStats


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    finish_reason: str  # "stop": end-of-generation token or stop string; "length": max_tokens or a full context;
    # "grammar": the constraint allows no next token (a grammar that cannot be completed)
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
