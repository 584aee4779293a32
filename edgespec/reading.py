"""Whether a new text's prompt is worth a draft model's reading: what drafting is expected to save over the tokens
the text is expected still to get must exceed what reading the prompt costs. A mixin of tuning.DraftLength, whose
cost model, outcomes and fallback state it reads.

The draft model reads a prompt after the target's first token and before it can draft. On a CPU that is no small
cost: 0.5B Q4_K_M read a 1,372-token prompt in 12.9 s here (bench/read_cost.py, bench/results/read-cost.log),
against 70-250 ms a target token, so a 64-token answer could never repay it (the F16 pair's built-in bench: the
hybrid 1.33x per generated token but 1.08x end to end, the prompt's reading included; passages 0.85x of plain end
to end). Where reading does not pay, the text is decoded without this proposer (in a hybrid, prompt lookup goes on
alone) unless it runs on long enough to repay the reading after all (read_late); the next text is judged afresh,
and a draft model reads such a prompt all the same now and then (alone sooner than behind lookup), since only
drafting updates the figures the verdict rests on (read_again).
Where the costs are not known yet (no profile, no prompt read so far), it reads, and so measures them.

How many tokens a text will get is not known when its prompt is read; max_tokens is only the most (chat's default
is 1,024), and taken as the answer's length it read a 1,417-token prompt for an answer of 151
(bench/results/long-prompt-reading.log: 70.0 s against plain's 63.7). So the horizon is what the answers so far
have taken (a running mean), but never under ANSWER_FLOOR tokens (or max_tokens, where that is less), and a text
that runs past it is expected to run on as long again (answer lengths have a long tail): reading waits until the
text has shown it can repay it, as a ski renter buys once the rent paid would have bought the skis, which costs at
most about twice the best choice made knowing the length. The floor: short answers' lengths vary most (the built-in
workload's, replayed at max_tokens 64: factual answers 8-23 tokens, passages 2-24, translations 27-59, code and
math 64), and a draft model's worth varies more from text to text than its mean says (replayed, a horizon of the
answers' mean, some 53 tokens against max_tokens 64, had the draft model alone skip prompts it used to read, and
lose: 0.995x of plain end to end, from 1.005x; docs/performance.md)."""
from __future__ import annotations

ANSWER_FLOOR = 128  # tokens an answer is expected to get at least (before any has ended: this many)
ANSWER_WEIGHT = 0.1  # each answer's weight in the running mean of their lengths
READ_AGAIN_SHARE = 0.1  # a draft model reads a skipped kind of prompt now and then where its reading costs at
# most this share of what the text's expected tokens take plainly (Reading.read_again) ...
READ_AGAIN_MOST = 16  # ... after 1, 2, 4 .. at most this many skipped texts in a row
READ_AGAIN_CHAIN = 4  # ... in a chain (behind prompt lookup) after 4, 8, 16 (read_again)


class Reading:
    prompt_read_s: float | None = None  # seconds per token of a prompt read in one go (profile: "read_s")
    answer_tokens: float = ANSWER_FLOOR  # the running mean of the answers' lengths, in tokens (answered())
    _skip: str | None = None  # this text's prompt was not worth reading: why ("" once said); None: not skipped
    _saved = 0.0  # ... and the saving per token it was weighed against
    _skipped = 0  # texts in a row whose prompts were not read (and could have been read again: read_again)
    _skip_wait: int | None = None  # ... how many such texts go without before one is read all the same (None:
    # the first wait, read_again's)

    def expected_left(self, made: int, cap: int) -> int:
        """The tokens a text that has made `made` is expected still to get, at most cap (max_tokens, the context):
        the answers' mean (ANSWER_FLOOR at least) less what it made, or, past that, as many again."""
        return min(cap, max(round(max(self.answer_tokens, ANSWER_FLOOR)) - made, made))

    def answered(self, n: int) -> None:
        """A text ended after n tokens (at an end of generation, a stop, or max_tokens)."""
        if n > 0:
            self.answer_tokens += ANSWER_WEIGHT * (n - self.answer_tokens)

    def reading_pays(self, n: int, horizon: int, adaptive: bool | None = None, alone: bool = False) -> bool:
        """Whether reading n prompt tokens (at prompt_read_s each) is repaid by what drafting is expected to save,
        per token against plain (the best K's expected cost, as decide() prices it), over `horizon` tokens (what the
        text is expected to get: expected_left). If not, the text goes on without this proposer: it stands aside
        (standing_aside) and decides nothing but a fallback until new_text(), or until read_late() says the text
        has run on long enough to repay the reading. alone: this proposer is the only one, not a chain's part behind
        prompt lookup (read_again waits less)."""
        saving = self._saving(n, adaptive)
        if saving is None or n * self.prompt_read_s < horizon * saving:
            self._skipped, self._skip_wait = 0, None
            return True
        if self.read_again(n, horizon, 1 if alone else READ_AGAIN_CHAIN):
            return True
        self._saved = saving
        self._skip = (f"reading the prompt ({n} tokens, {n * self.prompt_read_s:.1f} s) would cost more than drafting "
                      f"is expected to save over the {horizon} tokens the text is expected to get "
                      f"({horizon * saving:.1f} s): without the draft model unless the text runs on")
        return False

    def read_again(self, n: int, horizon: int, first: int = 1) -> bool:
        """A proposer whose prompts were not worth reading: whether to read this one all the same. The verdict rests
        on acceptance and outcomes that only drafting updates, so once it says no to short answers' prompts it
        changes only where a prompt short enough to be read on the same figures comes along (read_late needs a long
        text), however well the texts since would suit the draft. So after `first`, then twice as many .. at most
        READ_AGAIN_MOST texts in a row without, one is read (as a fallback's wait ends in a probe), where its reading
        costs at most READ_AGAIN_SHARE of what the text's expected tokens take plainly; a dearer prompt is left
        unread and not counted. Replayed (F16 pair, recorded costs, 65 unseen prompts): a draft model alone went
        without in 32 texts, in runs of up to 8 on figures that did not move (math and code writing among them),
        1.049x of plain per token and 1.005x end to end; reading again after 1, 2, 4 .., 18 texts without, 1.103x
        and 1.018x.

        In a chain (first = READ_AGAIN_CHAIN: after 4, 8, 16) prompt lookup goes on while the draft model stands
        aside, and reading again cost end to end where the replays' prompts change kind from text to text (after 1
        text, the hybrid 1.123x to 1.113x; docs/performance.md, 2026-12-05, night). But a session that begins with
        texts the draft model fails on locked it out for good: the first translation's failed rounds
        left its outcomes at x1.33, and on that figure no later prompt, 16-token chats and code included, was worth
        reading (replayed, a flat verify curve, translation, writing and chat first, then the rest: the hybrid
        1.41x, lookup's own 1.41x, against the draft model's 1.49x; reading again after 4 texts, 1.72x;
        docs/performance.md, 2026-12-07)."""
        plain = self.cost.t_verify(1)
        if not plain or n * self.prompt_read_s > READ_AGAIN_SHARE * horizon * plain:
            return False
        self._skipped += 1
        wait = self._skip_wait or first
        if self._skipped <= wait:
            return False
        self._skipped, self._skip_wait = 0, min(2 * wait, READ_AGAIN_MOST)
        return True

    @property
    def unread(self) -> bool:
        """This text's prompt was not worth reading (so far)."""
        return self._skip is not None

    def read_late(self, n: int, made: int, cap: int) -> bool:
        """A text whose prompt was not worth reading (reading_pays) has made `made` tokens, with at most cap to
        come: once it has run past the answers' expected length, whether reading the n tokens now behind is repaid
        by what the rest is expected to save, at the saving per token the verdict weighed. If so, the proposer takes
        part again (the caller has it read them). What is new since the verdict is the text's length, not the costs:
        costs that wander only turned it where they happened to look good. Replayed with hold-ups, SmolLM2's draft
        model read late in short answers (0.86x of plain end to end, from 0.90x); on this machine a plain step timed
        at 275 ms late in a text, against 182 ms at its start, put the saving at 175 ms a token, and the draft model
        read 1,545 tokens (14 s) for the 23 the text had left (bench/long_prompt.py, 85.6 s against 70.2)."""
        if self._skip is None or made < max(self.answer_tokens, ANSWER_FLOOR) or \
                n * self.prompt_read_s >= self.expected_left(made, cap) * self._saved:
            return False
        self._skip = None
        return True

    def _saving(self, n: int, adaptive: bool | None = None) -> float | None:
        """What drafting is expected to save per token against plain, where reading n tokens is worth weighing;
        None where it reads whatever it costs: a fixed length (the user's), nothing to read, the reading rate or
        the costs unknown, or drafting not expected to pay at all (the fallback's probes decide: they read to
        learn; skipped, such a policy would never test a text again)."""
        if not (self.adaptive if adaptive is None else adaptive) or n <= 1 or not self.prompt_read_s:
            return None
        plain = self.cost.t_verify(1)
        k, per_token = self.cost.best_k(max(self.k_max, 1))
        per_token = self._floored_cost(k, per_token)
        if not plain or per_token is None:
            return None
        saving = plain - per_token * self.outcomes.optimism()
        return saving if saving > 0 else None

    def skipping(self) -> str | None:
        """While this text goes without this proposer: the reason, the first time asked ("" after); else None."""
        why = self._skip
        if why:
            self._skip = ""
        return why
