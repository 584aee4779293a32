"""Prompt lookup: draft by copying what followed the most recent earlier occurrence of the last n tokens.

No model: it wins where the answer quotes its input (code edits, summaries, answers over a passage). The index
maps every n-gram (n_min..n_max) to the last place it ended with at least one token after it; it is updated only
with the tokens added since the last round, so a lookup costs the same at token 100 and at token 10,000.

A chat template's control tokens mark where the text is, not what it says. At the start of an answer the text ends
in the template's header (`<|im_start|>assistant\n`), and its n-grams match each earlier turn's header, so lookup
would copy the start of the last answer into this one (measured on the recorded conversations: no such proposal
passed). Given the vocabulary's control tokens (`control`), a match is not taken where the whole stretch since the
text's newest control token, that token included (a header and perhaps a token or two after it, HEADER tokens at
most), ends there too: the same place in another turn, whatever the role name tokenizes to. And a copy ends where the
turn it copies does (_copy): past that turn's end comes the next header, which no answer goes on into (over the
built-in workload's factual answers, 21 of lookup's 27 eight-token offers ran into it: bench/lookup_copies.py). The
turn's closing, its last token before that end, is copied only once such closings have passed (Closings): an answer
that quotes a question goes its own way where the question ends.

A match into the text the generation was given (the prompt: a passage, code to edit, earlier turns) is a better
guess than one into what the model has written since, which repeats itself by chance more often (recorded, F16
Qwen pair, four-token matches: 92% of first tokens passed against 71%, 4.0 tokens a match against 2.2). Their
kinds of proposal differ (`lookup:4` and `lookup:4:own`), so the engine learns and weighs each apart.
"""
from __future__ import annotations

from typing import Collection, Sequence

import numpy as np

from ..sampling import SamplingConfig
from ..tree import Tree
from . import Proposal, WithoutModel

EARLIER = 3  # earlier occurrences remembered per n-gram, besides the latest: the other branches of a tree
HEADER = 8  # the longest stretch from a control token to the text's end still taken for a template's header


class PromptLookupProposer(WithoutModel):
    def __init__(self, n_max: int = 4, n_min: int = 2, control: Collection[int] = (),
                 ends: Collection[int] = ()) -> None:
        # n_min = 2: a one-token match is a weak guess, and on a compute-bound target each rejected guess widens
        # the verify batch for nothing (measured: 1.03x vs 1.13x of plain overall, bench/strategies.py lookup1/2).
        if not 1 <= n_min <= n_max:
            raise ValueError(f"need 1 <= n_min <= n_max, got {n_min}, {n_max}")
        self.n_max, self.n_min = n_max, n_min
        self.control = frozenset(control)
        self.ends = frozenset(ends)  # end-of-generation tokens: a copy may end with one (_copy)
        self._seq: list[int] = []
        self._last_control = -1  # where the text's newest control token is (-1: none)
        self._given = 0  # how much of the text begin() was given: matches ending before it are into the prompt
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> end position of its latest earlier occurrence
        self._earlier: dict[tuple[int, ...], list[int]] = {}  # ... and of a few before it, oldest first
        self.closings = Closings()  # (kept from one generation to the next, as the engine's estimates are)
        self._ending: dict[tuple[int, ...], str] = {}  # copies made since the text last grew that end with their
        # turn, and how (turn_end)

    @classmethod
    def for_model(cls, model, **kwargs) -> "PromptLookupProposer":
        """Lookup over this model's vocabulary: its control tokens mark a chat template's headers."""
        return cls(control=model.control_ids, ends=model.eog_ids, **kwargs)

    def begin(self, seq: Sequence[int]) -> None:
        self._seq, self._index, self._earlier, self._last_control = [], {}, {}, -1
        self.closings.forget_text()
        self._ending.clear()
        self._extend(seq)
        self._given = len(seq)

    def _extend(self, seq: Sequence[int]) -> None:
        # A generation only appends to seq; index the n-grams that now have a token after them.
        start = len(self._seq)
        self._seq.extend(seq[start:])
        s = self._seq
        if len(s) > start:
            self.closings.resolve(s)
            self._ending.clear()
        if self.control:
            self._last_control = next((i for i in range(len(s) - 1, start - 1, -1) if s[i] in self.control),
                                      self._last_control)
        for end in range(max(start, 1), len(s)):  # n-grams ending at `end` (exclusive) are followed by s[end]
            for n in range(self.n_min, min(self.n_max, end) + 1):
                gram = tuple(s[end - n:end])
                before = self._index.get(gram)
                if before is not None:  # an earlier occurrence: another continuation for a verification tree
                    older = self._earlier.setdefault(gram, [])
                    older.append(before)
                    del older[:-EARLIER]
                self._index[gram] = end

    def _in_header(self, end: int, extra: Sequence[int] = ()) -> bool:
        """Whether an earlier occurrence ending at `end` is where the text (and after it `extra`) is now in another
        turn: the stretch since the newest control token ends there too."""
        s = self._seq
        c = next((len(s) + i for i in range(len(extra) - 1, -1, -1) if extra[i] in self.control), self._last_control)
        n = len(s) + len(extra) - c
        if c < 0 or n > HEADER or end < n:
            return False
        return s[end - n:end] == (s[c:] + list(extra) if c < len(s) else list(extra[c - len(s):]))

    def _copy(self, end: int, k: int, extra: Sequence[int] = ()) -> list[int]:
        """Up to k tokens of the text from `end`, cut at its first control token: past the end of a copied turn comes
        the template's next header, which no answer goes on into. An end-of-generation token stays (an answer may
        end where the copied turn did), others go; and the turn's closing token (its last before that end) stays with
        it only where such closings have passed (Closings). extra: tokens proposed this round before the copy (not
        yet verified)."""
        tokens = self._seq[end:end + k]
        if self.control:
            for i, t in enumerate(tokens):
                if t in self.control:
                    if not i:  # (the closing is the text's already: only an end of generation may follow)
                        copy = tokens[:t in self.ends]
                        self._ending[tuple(copy)] = "closed"
                        return copy
                    closing = tokens[i - 1]
                    self.closings.expect(len(self._seq), [*extra, *tokens[:i - 1]], closing)
                    offered = self.closings.offered(closing)
                    copy = tokens[:i + (t in self.ends)] if offered else tokens[:i - 1]
                    self._ending[tuple(copy)] = "closed" if offered else "cut"
                    return copy
        return tokens

    def turn_end(self, copy: Sequence[int]) -> str | None:
        """How this copy (made since the text last grew) ends where the turn it copies does: "closed" (with its
        closing, or after it where the text has it already, and its end-of-generation token where that ends a
        generation), "cut" (before a closing that does not pass: Closings); None: it does not."""
        return self._ending.get(tuple(copy))

    def match(self, k: int) -> tuple[list[int], int]:
        """Up to k tokens continuing the longest n-gram suffix seen before, and that n (0: no match)."""
        tokens, n, _ = self._match(k)
        return tokens, n

    def _match(self, k: int) -> tuple[list[int], int, int]:
        s = self._seq
        for n in range(min(self.n_max, len(s)), self.n_min - 1, -1):
            end = self._index.get(tuple(s[-n:]))
            if end is not None and not self._in_header(end) and (tokens := self._copy(end, k)):
                return tokens, n, end
        return [], 0, 0

    def match_after(self, seq: Sequence[int], extra: Sequence[int], k: int) -> tuple[list[int], str]:
        """Up to k tokens continuing seq as it would be with `extra` after it (tokens proposed this round,
        not yet verified: they are matched, never indexed, so a discarded draft leaves nothing here), where the
        longest n-gram suffix matched ends inside `extra`; and the kind of proposal (as propose()'s). A draft
        model's tokens that begin a quotation let lookup copy the rest of it in the same round."""
        self._extend(seq)
        s, extra = self._seq, list(extra)
        if not extra or k <= 0:
            return [], self._key(0, 0)
        tail = s[-self.n_max:] + extra
        for n in range(min(self.n_max, len(tail)), self.n_min - 1, -1):
            end = self._index.get(tuple(tail[-n:]))
            if end is not None and not self._in_header(end, extra) and (tokens := self._copy(end, k, extra)):
                return tokens, self._key(n, end)
        return [], self._key(0, 0)

    def _key(self, n: int, end: int) -> str:
        """The kind of proposal: the match length, and whether it copies the given text or the model's own."""
        return f"lookup:{n}" if n == 0 or end < self._given else f"lookup:{n}:own"

    def match_tree(self, k: int, width: int) -> tuple[Tree, int]:
        """The continuations (up to k tokens each) of the longest n-gram suffix seen before, most recent first,
        then those of shorter suffixes, as a tree of up to `width` branches (shared beginnings shared), and the
        longest n (0: no match). Its first branch is match()'s proposal."""
        tree, longest, _ = self._match_tree(k, width)
        return tree, longest

    def _match_tree(self, k: int, width: int) -> tuple[Tree, int, int]:
        s, tree, longest, first = self._seq, Tree(), 0, 0
        for n in range(min(self.n_max, len(s)), self.n_min - 1, -1):
            gram = tuple(s[-n:])
            end = self._index.get(gram)
            if end is None:
                continue
            copies = [(e, c) for e in [end, *reversed(self._earlier.get(gram, ()))] if not self._in_header(e) and
                      (c := self._copy(e, k))]
            if copies and not longest:
                longest, first = n, copies[0][0]
            for _, c in copies:
                wider = tree.copy()
                wider.add_path(-1, c, "lookup")
                if len(wider.leaves()) <= width:
                    tree = wider
        return tree, longest, first

    def heard(self, text: Sequence[int], more: Sequence[int] = ()) -> None:
        """The text as a round's verification left it, `text` and then `more` (the generation's last round included,
        after which nothing more is proposed): what it tells of the copies' closings (Closings)."""
        if self.closings.waiting:
            self.closings.resolve([*text, *more])

    def propose(self, seq: Sequence[int], k: int, sampling: SamplingConfig, rng: np.random.Generator,
                guide=None) -> Proposal:
        self._extend(seq)
        tokens, n, end = self._match(k) if k > 0 else ([], 0, 0)
        # A longer match is a better guess: the engine keeps acceptance per match length (and where it copies from).
        return Proposal(tokens, None, ["lookup"] * len(tokens), key=self._key(n, end))

    def propose_tree(self, seq: Sequence[int], k: int, width: int) -> Proposal:
        """Up to `width` distinct continuations of the longest match, k tokens deep, as one proposal whose
        `parents` give its shape (a chain where there is one continuation)."""
        self._extend(seq)
        tree, n, end = self._match_tree(k, width) if k > 0 else (Tree(), 0, 0)
        return Proposal(tree.tokens, None, tree.sources, key=self._key(n, end),
                        parents=None if tree.is_chain else tree.parents)



class Closings:
    """How often a copied turn's closing token (its last before the turn's end: a question's "?", a sentence's ".",
    a code block's closing fence) is the answer's next token too, where the answer followed the copy up to it, per
    closing token. An answer that quotes a question goes its own way where the question ends (" was" where the
    question had "?"), while a summary may end as its article did: over the built-in recording no question mark
    that an answer reached passed (0 of 65), a summary's final "." 28 of 28, an extraction's 6 of 6, a piece of open
    writing's 0 of 7 (bench/lookup_copies.py; bench/results/lookup-copies.log). Learned from the text as it grows,
    from every copy lookup made, offered or not, so a closing once cut is offered again where the text shows it
    passing. A closing is offered while it has passed at least half the times it was tested, starting below even
    odds (`prior`: half a pass in two tests), so that it is first offered once the text has shown it passing.
    Replayed with the Q4_0 draft (17 settings, 8 seeds), the built-in factual answers, where furthest behind the
    draft model alone, rose from 0.908-0.970 of it per token to 0.959-0.994, and the hybrid's mean ratio to its
    better part from 1.0185 to 1.0198 (starting at even odds: 1.0190; docs/performance.md, "A copied question's
    closing", 2026-12-07, session seven)."""

    def __init__(self, prior: tuple[float, float] = (0.5, 2.0)) -> None:
        self.prior = prior  # (passed, tested)
        self.counts: dict[int, list[float]] = {}  # closing token -> [passed, tested]
        self._pending: dict[tuple[int, tuple[int, ...], int], None] = {}  # (where the copy starts, its tokens
        # before the closing, the closing): where the text is to tell

    def offered(self, closing: int) -> bool:
        passed, tested = self.counts.get(closing, (0.0, 0.0))
        return (passed + self.prior[0]) / (tested + self.prior[1]) >= 0.5

    def expect(self, at: int, before: Sequence[int], closing: int) -> None:
        """A copy from text position `at` would put `before`, then `closing`, there."""
        self._pending[(at, tuple(before), closing)] = None

    @property
    def waiting(self) -> bool:
        """Whether a closing some copy expected is still for the text to tell."""
        return bool(self._pending)

    def forget_text(self) -> None:
        """A new generation: what the last one's text was still to tell it never will."""
        self._pending.clear()

    def resolve(self, text: Sequence[int]) -> None:
        """The closings the text now tells: each whose copy the text followed up to it is tested; it passed where
        it is the text's next token. Those the text left before them are dropped."""
        told = set()  # (each place once, however many copies expected a closing there)
        for key in list(self._pending):
            at, before, closing = key
            p = at + len(before)
            if tuple(text[at:min(p, len(text))]) != before[:max(0, len(text) - at)]:
                del self._pending[key]  # the text went another way before the closing
            elif p < len(text):
                del self._pending[key]
                if (p, closing) not in told:
                    told.add((p, closing))
                    c = self.counts.setdefault(closing, [0.0, 0.0])
                    c[0] += text[p] == closing
                    c[1] += 1
