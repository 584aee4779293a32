"""A long prompt's reading, shown on the terminal: `reading the prompt: 1,536/3,840 tokens (40%), 212 tok/s` on
standard error while the model reads a prompt of several batches (a pasted file on a CPU takes a while before the
first token), erased when the reply begins. Nothing is written where standard error is not a terminal."""
from __future__ import annotations

import sys
import time


class PromptProgress:
    """Engine.stream's prompt_progress for `generate` and `chat`; clear() in a finally (Ctrl-C mid-prompt)."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.shown = False
        self.t0 = time.perf_counter()

    def __call__(self, processed: int, total: int, cached: int) -> None:
        if processed >= total:
            self.clear()
            return
        if not self.stream.isatty():
            return
        read, elapsed = processed - cached, time.perf_counter() - self.t0
        rate = f", {read / elapsed:,.0f} tok/s" if elapsed > 0 else ""
        self.stream.write(f"\r\033[Kreading the prompt: {processed:,}/{total:,} tokens "
                          f"({100 * processed // total}%){rate}")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False
