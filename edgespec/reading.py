"""Whether a new text's prompt is worth a draft model's reading: what drafting is expected to save over the tokens
the text may still get must exceed what reading the prompt costs. A mixin of tuning.DraftLength, whose cost model,
outcomes and fallback state it reads.

The draft model reads a prompt after the target's first token and before it can draft. On a CPU that is no small
cost: 0.5B Q4_K_M read a 1,372-token prompt in 12.9 s here (bench/read_cost.py, bench/results/read-cost.log),
against 70-250 ms a target token, so a 64-token answer could never repay it (the F16 pair's built-in bench: the
hybrid 1.33x per generated token but 1.08x end to end, the prompt's reading included; passages 0.85x of plain end
to end). Where reading does not pay, the text is decoded
without this proposer (in a hybrid, prompt lookup goes on alone); the next text is judged afresh. Where the costs
are not known yet (no profile, no prompt read so far), it reads, and so measures them."""
from __future__ import annotations


class Reading:
    prompt_read_s: float | None = None  # seconds per token of a prompt read in one go (profile: "read_s")
    _skip: str | None = None  # this text's prompt was not worth reading: why ("" once said); None: not skipped

    def reading_pays(self, n: int, horizon: int, adaptive: bool | None = None) -> bool:
        """Whether reading n prompt tokens (at prompt_read_s each) is repaid by what drafting is expected to save,
        per token against plain (the best K's expected cost, as decide() prices it), over `horizon` tokens (the
        most the text may get: max_tokens, the context). If not, the rest of the text is decoded without this
        proposer: it stands aside (standing_aside) and decides nothing but a fallback, until new_text()."""
        if not (self.adaptive if adaptive is None else adaptive) or n <= 1 or not self.prompt_read_s:
            return True
        plain = self.cost.t_verify(1)
        k, per_token = self.cost.best_k(max(self.k_max, 1))
        per_token = self._floored_cost(k, per_token)
        if not plain or per_token is None or horizon <= 0:
            return True
        saving, reading = plain - per_token * self.outcomes.optimism(), n * self.prompt_read_s
        if saving <= 0 or reading < horizon * saving:
            return True  # (where drafting is not expected to pay, the fallback's probes decide: they read to learn)
        self._skip = (f"reading the prompt ({n} tokens, {reading:.1f} s) would cost more than drafting is expected "
                      f"to save over the {horizon} tokens left ({horizon * saving:.1f} s): plain decoding "
                      f"for this text")
        return False

    def skipping(self) -> str | None:
        """While this text goes without this proposer: the reason, the first time asked ("" after); else None."""
        why = self._skip
        if why:
            self._skip = ""
        return why
