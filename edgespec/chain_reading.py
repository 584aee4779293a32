"""When a chain's parts read the text (a mixin of chain.Chain): a draft model reads a new text's prompt where
drafting is expected to repay it (Reading), later in the text where the text runs on long enough to repay it after
all, and a probe due now waits for the next text where its reading first would cost more than it can win back."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from .proposers import DraftModelProposer, Proposer
from .stats import GenerationStats

if TYPE_CHECKING:
    from .chain import Link

CATCH_UP_LIMIT = 32  # a probe whose proposer has more than this to read first waits for the next text
PROBE_READ_SHARE = 0.05  # ... or more to read than this share of what the tokens left would take plainly


def _behind(part: Proposer, seq: Sequence[int]) -> int:
    """Tokens a proposer must read before it can propose from seq (a draft model after standing aside); 0 for
    those that read nothing."""
    return part.behind(seq) if isinstance(part, DraftModelProposer) else 0


class ChainReading:
    _start = 0  # the text's length at begin(): its prompt and first token

    def begin(self, seq: Sequence[int], start: Callable[[], None] | None = None, cap: int = 0) -> None:
        """A new text: each policy hears so, start() runs (the engine's costs, which a profile may seed the
        policies with), then each part that will draft reads the prompt where that can pay over the tokens the
        text is expected to get, at most cap (Reading; one standing aside catches up if and when it drafts)."""
        self._start = len(seq)
        for link in self.links:
            link.policy.new_text()
        if start is not None:
            start()
        for link in self.links:
            p = link.policy
            if not p.standing_aside(self.adaptive) and \
                    p.reading_pays(_behind(link.part, seq), p.expected_left(0, cap), self.adaptive,
                                   alone=len(self.links) == 1):
                self._read(link, seq)

    def _read(self, link: Link, seq: Sequence[int]) -> None:
        link.part.begin(seq)
        link.policy.prompt_read_s = getattr(link.part, "prompt_read_s", None) or link.policy.prompt_read_s

    def end(self, n: int) -> None:
        """The text ended after n tokens: each policy hears its length (Reading.answered)."""
        for link in self.links:
            link.policy.answered(n)

    def _read_late(self, seq: Sequence[int], cap: int, stats: GenerationStats) -> None:
        """A part that did not read this text's prompt reads all it missed now, where the text has run on long
        enough that what it is expected still to get (at most cap) repays the reading (Reading.read_late); the
        fallbacks, which said it would go without, say so."""
        for link in (x for x in self.links if x.policy.unread):  # (the rest: nothing to weigh, each round)
            behind, made = _behind(link.part, seq), len(seq) - self._start
            if link.policy.read_late(behind, made, cap):
                self._read(link, seq)
                stats.fallbacks.append({"round": stats.n_rounds, "why": f"the text ran on ({made} tokens): the "
                                        f"draft model read the {behind} it had skipped, and drafts again"})

    def _probe_too_dear(self, link: Link, seq: list[int], cap: int) -> bool:
        """Whether a probe due now would first have its draft model read more than a probe can repay: over
        CATCH_UP_LIMIT tokens, or a reading that costs more than PROBE_READ_SHARE of what the `cap` tokens left
        (max_tokens, the context) would take plainly. Put off, it comes at the next text, where the prompt is read
        anyway (DraftLength.defer_probe). Late in a short answer a probe read 25-40 skipped tokens (180-300 ms
        against 70 ms steps) to test the draft on the 20-odd tokens left. Replayed (F16 pair), the hybrid's lowest
        category rose in six of the seven settings where it was below plain (held-out 0.92x to 0.96x), overall
        within -1.2% to +1.3% (docs/performance.md, 2026-12-03 evening). With many tokens left it probes as before."""
        behind = _behind(link.part, seq)
        if behind > CATCH_UP_LIMIT:
            return True
        # (a plain step as the curve has it: over a link t_verify(1) right after a verify adds the way back, which
        # the tokens left pay once, not each)
        read_s, plain = getattr(link.part, "read_s", None) or 0.0, link.policy.cost.verify_s.get(1)
        return bool(plain) and behind * read_s > PROBE_READ_SHARE * cap * plain
