"""Bytes of generated tokens -> text that is safe to show now.

A multi-byte character split across tokens is held until complete, and text that could be the start of a stop
string is held until it is known not to be one, so what was shown never has to be taken back.
"""
from __future__ import annotations

import codecs
from typing import Sequence


class TextStream:
    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._stop = [s for s in stop if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.text = ""  # everything decoded so far (cut at a stop string once one is found)
        self._shown = 0
        self.stopped = False
        self.stopped_by: str | None = None  # the stop string found, once one is

    def push(self, data: bytes) -> str:
        """Add a token's bytes; return the text that can be shown now (possibly empty)."""
        if self.stopped:
            return ""
        if self._append(self._decoder.decode(data)):
            return self._release(len(self.text))
        return self._release(len(self.text) - self._held_back())

    def flush(self) -> str:
        """The end of generation: show whatever was held back (a partial character becomes U+FFFD)."""
        if not self.stopped:
            self._append(self._decoder.decode(b"", final=True))
        return self._release(len(self.text))

    def _append(self, new: str) -> bool:
        """Add decoded text; True (and the text cut there) when it completes a stop string."""
        start = max(0, len(self.text) - max((len(s) for s in self._stop), default=0))
        self.text += new
        hits = [(i, s) for i, s in ((self.text.find(s, start), s) for s in self._stop) if i >= 0]
        if hits:
            at, self.stopped_by = min(hits, key=lambda h: h[0])
            self.text = self.text[:at]
            self.stopped = True
        return self.stopped

    def _held_back(self) -> int:
        # Longest tail of the text that is a proper prefix of some stop string.
        best = 0
        for s in self._stop:
            for k in range(min(len(s) - 1, len(self.text)), best, -1):
                if self.text.endswith(s[:k]):
                    best = k
                    break
        return best

    def _release(self, end: int) -> str:
        end = max(end, self._shown)
        out = self.text[self._shown : end]
        self._shown = end
        return out
