"""Bytes of generated tokens -> text that is safe to show now.

A multi-byte character split across tokens is held until complete, and text that could be the start of a stop
string is held until it is known not to be one, so what was shown never has to be taken back. The same holds for
llama-server's n_indent (min_indent: a line after the first that starts less indented ends the text there, its
indentation kept): a new line's leading blanks are held until the line shows its first character.
"""
from __future__ import annotations

import codecs
from typing import Sequence


class TextStream:
    def __init__(self, stop: Sequence[str] = (), min_indent: int = 0) -> None:
        self._stop = [s for s in stop if s]
        self._min_indent = min_indent
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.text = ""  # everything decoded so far (cut at a stop string once one is found)
        self._shown = 0
        self.stopped = False
        self.stopped_by: str | None = None  # the stop string found, once one is (None: the indentation rule)

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
        """Add decoded text; True (and the text cut there) when it completes a stop string or a line too little
        indented."""
        start = max(0, len(self.text) - max((len(s) for s in self._stop), default=0))
        self.text += new
        hits = [(i, s) for i, s in ((self.text.find(s, start), s) for s in self._stop) if i >= 0]
        if hits:
            at, self.stopped_by = min(hits, key=lambda h: h[0])
            self.text = self.text[:at]
            self.stopped = True
        if self._min_indent and not self.stopped:
            at = self._dedent(len(self.text) - len(new))
            if at is not None:
                self.text, self.stopped = self.text[:at], True
        return self.stopped

    def _dedent(self, since: int) -> int | None:
        """Where the first line (after the first) indented less than min_indent shows its first character, from
        lines begun at or after `since` (an empty line counts, as in llama-server)."""
        nl = self.text.find("\n", max(0, self.text.rfind("\n", 0, since)))
        while nl >= 0:
            pos = nl + 1
            while pos < len(self.text) and self.text[pos] in " \t":
                pos += 1
            if pos < len(self.text) and pos - nl - 1 < self._min_indent:
                return pos
            nl = self.text.find("\n", nl + 1)
        return None

    def _held_back(self) -> int:
        # Longest tail of the text that is a proper prefix of some stop string; with min_indent, a new line's
        # leading blanks too (its first character decides whether the text ends there).
        best = 0
        if self._min_indent:
            line = self.text.rfind("\n")
            if line >= 0 and not self.text[line + 1:].strip(" \t"):
                best = len(self.text) - line - 1
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
