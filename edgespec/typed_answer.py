"""The answers of APIs with typed output (OpenAI's Responses, Anthropic's Messages): a reply read as runs of text
and whole tool calls (Parts), handed to the API's own blocks as they come, and its stream's named events."""
from __future__ import annotations

import json

from .openai_api import Answer
from .reasoning import Thoughts
from .sequences import Event
from .tools import CallReader


class Parts:
    """A reply read as the APIs with typed output show it (OpenAI's Responses, Anthropic's Messages): runs of text
    and whole calls, in order. A run of text opens at its first non-blank character (blanks before a call are
    dropped, as a chat answer's content is stripped before its calls) and closes at a call or the end; a reply of
    blanks, or of nothing, is still one run. A thinking model's reasoning (`thinking`: whether the reply starts
    inside it; None: not a thinking model) comes first, as a part of its own."""

    def __init__(self, tools: bool, thinking: bool | None = None) -> None:
        self.reader = CallReader() if tools else None
        self.thoughts = Thoughts(thinking) if thinking is not None else None
        self.held, self.open, self.shown, self.thinking = "", False, False, False

    def feed(self, text: str, entries: list, end: bool = False) -> list[tuple]:
        """More of the reply (and the log-probabilities of its tokens) -> what it adds, in order: ("think_open",),
        ("thought", text), ("think_close",), ("open",), ("text", text, entries), ("close",), ("call", call)."""
        ops: list[tuple] = []
        if self.thoughts is not None:
            thought, text = self.thoughts.feed(text, end)
            if thought:
                if not self.thinking:
                    ops.append(("think_open",))
                self.thinking = self.shown = True
                ops.append(("thought", thought))
            if self.thinking and (self.thoughts.state == "done" or end):
                ops.append(("think_close",))
                self.thinking = False
            entries = entries if text else []  # (a reasoning token's: not the answer's)
        content, calls = (text, []) if self.reader is None else self.reader.feed(text)
        if end and self.reader is not None:
            content += self.reader.rest()
        if not self.open and ((self.held + content).strip() or entries or end and not self.shown and not calls):
            content, self.held, self.open, self.shown = self.held + content, "", True, True
            ops.append(("open",))
        if not self.open:
            self.held += content
        elif content or entries:
            ops.append(("text", content, entries))
        for call in calls:
            if self.open:
                ops.append(("close",))
            self.held, self.open, self.shown = "", False, True
            ops.append(("call", call))
        if end and self.open:
            ops.append(("close",))
            self.open = False
        return ops


class TypedAnswer(Answer):
    """One answer as it is generated: a subclass turns the reply's parts into its API's blocks (_open_thought,
    _thought, _close_thought, _open_text, _text, _close_text, _call), says what ends it (_end: `final`, the whole
    answer) and what its stream opens and closes with (_opening, _closing); the events its methods _emit are sent as
    they come, each a named server-sent event (numbered in order where the API numbers them: NUMBERED)."""

    NUMBERED = False

    def __init__(self, state, req, how: dict) -> None:
        super().__init__(state, req, how)
        self.parts = Parts(self.calls is not None, how.get("thinking"))
        self.final: dict | None = None
        self._events: list[dict] = []  # the stream's events not yet sent
        self._sent = 0

    def add(self, ev: Event) -> None:
        super().add(ev)
        entries = self.logprobs[-1:] if ev.logprob is not None and self.calls is None else []
        for op, *args in self.parts.feed(ev.text, entries, end=ev.finish_reason is not None):
            if op == "think_open":
                self._open_thought()
            elif op == "thought":
                self._thought(*args)
            elif op == "think_close":
                self._close_thought(ev)
            elif op == "open":
                self._open_text()
            elif op == "text":
                self._text(*args)
            elif op == "close":
                self._close_text(ev)
            else:
                self._call(*args)
        if ev.finish_reason is not None:
            self._end(ev)

    def body(self, last: Event) -> dict:
        return self.final

    def _emit(self, kind: str, **fields) -> None:
        if self.how["stream"]:
            self._events.append({"type": kind, **fields})

    def frames(self, ev: Event | None):
        if ev is None:
            events = self._opening()
        else:
            events, self._events = self._events, []
            if ev.finish_reason is not None:
                events += self._closing(ev)
        for event in events:
            if self.NUMBERED:
                event["sequence_number"] = self._sent
            self._sent += 1
            yield f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"
