"""Over an rpc-server, the way back from a verify to plain steps: what the plain step after a round of several rows
costs more (the graph sent again), timed and priced from where the target stands. Pure, like the cost model that
adds it to a round's price (costs.CostModel.t_verify)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class WayBack:
    """Over an rpc-server a decode of another shape (rows) than the last sends the server its graph again; the
    verify curve, each size timed after a smaller decode, holds the way from plain steps into a verify, but not the
    way back: at 1 Gbit/s a one-row decode right after a five-row one took 13-22 ms more than after another one-row
    one (bench/results/rpc-rows-smollm.log), more than a SmolLM2 step. Drafting pays that once, whenever it stops.
    So after a round of several rows a plain step costs the way back in full and a verify nothing more; after a
    plain step a round of m rows costs its share of it: the way back from m rows times how often a round of
    several rows has been followed by a plain step (a run of drafted rounds shares one).

    Shared by the policies of one target (the target's state is one); Drafting.decoded tells it each decode of a
    round."""
    seconds: dict[int, float] = field(default_factory=dict)  # m rows -> a one-row decode after one of m rows, over
    # one after a one-row decode (running averages; negative too: noise)
    ends: float = 1.0  # how often the decode after a round of several rows was a one-row one (running average)
    last: int = 0  # rows of the target's last decode in a round (0: something else came after it: a prompt, a timing)
    alpha: float = 0.2

    def observe(self, m: int, seconds: float) -> None:
        """A one-row decode right after one of m rows took `seconds` more than one after a one-row decode."""
        if m > 1:
            old = self.seconds.get(m)
            self.seconds[m] = seconds if old is None else old + self.alpha * (seconds - old)

    def decoded(self, rows: int, extra: float | None) -> None:
        """The target decoded `rows` rows in a round; extra: a one-row decode's time over T_v(1) (None: unknown)."""
        before, self.last = self.last, rows
        if before > 1:
            if rows == 1 and extra is not None:
                self.observe(before, extra)
            self.ends += self.alpha * ((rows == 1) - self.ends)

    def after(self, m: int) -> float:
        """The way back from m rows as timed (interpolated between the sizes timed; 0 where none was)."""
        return _between(self.seconds, m) if self.seconds else 0.0

    def price(self, m: int) -> float:
        """What a decode of m rows costs now beside its own timing."""
        if not self.seconds:
            return 0.0
        if self.last > 1:
            return self.after(self.last) if m == 1 else 0.0
        return self.ends * self.after(m) if m > 1 else 0.0


def _between(table: dict[int, float], x: int) -> float:
    """table[x] if measured, else linear between the nearest measured neighbours, and the nearest end's value past
    the ends (a line through two noisy timings of a small difference can run anywhere)."""
    known = sorted(table)
    if x <= known[0] or x >= known[-1]:
        return table[known[0] if x <= known[0] else known[-1]]
    lo = max(k for k in known if k <= x)
    hi = min(k for k in known if k >= x)
    return table[lo] if hi == lo else table[lo] + (table[hi] - table[lo]) * (x - lo) / (hi - lo)
