"""What the server answers one request with: its answer, or for OpenAI's `n` the answers of n sequences generated at
once (each with a seed of its own), merged: choices 0..n-1, stream chunks tagged with their choice's index, one usage
that counts the prompt once and every choice's tokens, one [DONE] after the last choice ends. With n = 1 it hands
each call to the request's own answer unchanged, whatever its API."""
from __future__ import annotations

import dataclasses

from .sequences import Event, Request

MOST = 16  # the most choices one request may ask for (each is a sequence of the batch)


def copies(req: Request, n: int) -> list[Request]:
    """n requests for one: the first as it came, each other with its own seed (the request's seed + i where it gave
    one, so that a seeded request's choices come out the same each time; else random)."""
    seed = req.sampling.seed
    return [req] + [dataclasses.replace(req, sampling=dataclasses.replace(
        req.sampling, seed=None if seed is None else (seed + i) % 2 ** 64)) for i in range(1, n)]


class Group:
    """The answers of one request's sequences (answers[i] renders choice i), with their handles."""

    def __init__(self, answers: list, handles: list) -> None:
        self.answers, self.handles = answers, handles
        self.last: list[Event | None] = [None] * len(answers)  # each choice's final event, once it came
        self._latest: Event | None = None
        if len(answers) > 1:
            for i, a in enumerate(answers):
                a.index, a.grouped = i, True

    @property
    def done(self) -> bool:
        return None not in self.last

    @property
    def final(self) -> Event:
        """The event that ended the request: a choice's that failed, else the one that ended last."""
        return next((ev for ev in self.last if ev is not None and ev.error), None) or self._latest

    def add(self, i: int, ev: Event) -> None:
        if ev.progress is not None:
            return  # (the prompt's reading: shown by frames(), nothing of the answer)
        self.answers[i].add(ev)
        if ev.finish_reason is not None:
            self.last[i], self._latest = ev, ev

    def opening(self):
        for a in self.answers:
            yield from a.frames(None)

    def frames(self, i: int, ev: Event):
        """The stream's frames for choice i's event (after add), and its tail once every choice has ended."""
        yield from self.answers[i].frames(ev)
        if len(self.answers) > 1 and self.done:
            yield from self.answers[0].tail(self.final.stats, self.usage())

    def body(self) -> dict:
        first = self.answers[0].body(self.last[0])
        if len(self.answers) > 1:
            first["choices"] = [a.body(ev)["choices"][0] for a, ev in zip(self.answers, self.last)]
            first["usage"] = self.usage()
        return first

    def usage(self) -> dict:
        """OpenAI's usage of the whole request: the prompt once, the completion tokens of every choice."""
        from .openai_api import usage

        parts = [usage(a.req, a.n_out, ev.stats if ev else None) for a, ev in zip(self.answers, self.last)]
        out = dict(parts[0])
        out["completion_tokens"] = sum(p["completion_tokens"] for p in parts)
        out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
        return out

    def n_out(self) -> int:
        return sum(a.n_out for a in self.answers)

    def note(self) -> str:
        """For the request's line, after the last choice's figures: how many choices, how many tokens in all."""
        return f"; {len(self.answers)} choices, {self.n_out()} tokens in all" if len(self.answers) > 1 else ""

    def cancel(self) -> None:
        for h in self.handles:
            h.cancel()
