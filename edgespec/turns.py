"""One generation at a time on an engine's caches: other threads wait their turn; in the same thread, a newer
generation ends an older stream left suspended (resuming that one raises instead of mixing two texts)."""
from __future__ import annotations

import threading

from .errors import EdgespecError


class Superseded(EdgespecError):
    """A stream was resumed after a later generation on the same engine had started."""


class Turn:
    """A generation's hold on the engine, from its first step until it finishes or is closed."""

    def __init__(self) -> None:
        self.superseded = False

    def check(self) -> None:
        if self.superseded:
            raise Superseded("this stream was ended by a later generation on the same engine; a stream must be "
                             "read to the end (or closed) before the next generation starts")


class Turns:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._owner: tuple[int, Turn] | None = None  # (thread id, turn)

    def begin(self) -> Turn:
        """Wait until no other thread holds the engine, then hold it. A turn this thread left suspended (a stream
        not read to the end) is superseded: the cache it relied on is about to change."""
        turn, me = Turn(), threading.get_ident()
        with self._cond:
            while self._owner is not None and self._owner[0] != me:
                self._cond.wait()
            if self._owner is not None:
                self._owner[1].superseded = True
            self._owner = (me, turn)
        return turn

    def end(self, turn: Turn) -> None:
        with self._cond:
            if self._owner is not None and self._owner[1] is turn:
                self._owner = None
                self._cond.notify_all()
