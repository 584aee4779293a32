"""Round by round: what each mode drafted, what passed and what each round cost, on chosen built-in prompts, with the
draft model's cost estimates after each prompt. For finding where a mode loses time, not for speed-ups (bench).

    bench/trace.py -m TARGET -d DRAFT --category writing --category chat [--modes plain,draft] [--rpc HOST:PORT]
    bench/trace.py ... --rpc 127.0.0.1:50052 --delay-ms 2      (a local rpc-server behind bench/rpc.py's proxy)

Each round prints as "reason drafted/accepted ms" (reasons as in GenerationStats.rounds_by_reason). Run alone.
"""
from __future__ import annotations

import argparse
import collections

from edgespec import Engine
from edgespec.benchmark import Strategies
from edgespec.workloads import builtin
from edgespec.drafting import parts
from edgespec.proposers import DraftModelProposer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--target", required=True)
    ap.add_argument("-d", "--draft")
    ap.add_argument("--lookup", action="store_true", help="also load prompt lookup (for lookup and hybrid modes)")
    ap.add_argument("--category", action="append", required=True, help="a built-in category (repeatable, in order)")
    ap.add_argument("--skip", type=int, default=1, help="prompts of each category to leave out first")
    ap.add_argument("--limit", type=int, default=1, help="prompts of each category")
    ap.add_argument("--modes", default="plain,draft")
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rpc", default="", help="rpc-servers for the target, HOST:PORT[,HOST:PORT...]")
    ap.add_argument("--delay-ms", type=float, help="reach each --rpc server (on this machine) through bench/rpc.py's "
                                                   "proxy, every chunk held this long each way (0: the proxy alone)")
    ap.add_argument("--mbit", type=float, default=0.0, help="with --delay-ms: each direction of the link this fast "
                    "(Mbit/s; 0: as fast as loopback)")
    ap.add_argument("--calibrations", type=int, default=1, help="time the verify curve this many times first")
    a = ap.parse_args()
    if (a.delay_ms or 0.0) < 0 or a.mbit < 0:
        ap.error("--delay-ms and --mbit must be 0 or more")
    rpc = [x for x in a.rpc.split(",") if x]
    if a.delay_ms is not None:
        from rpc import DelayProxy
        rpc = [f"127.0.0.1:{DelayProxy(int(x.rsplit(':', 1)[1]), a.delay_ms / 1000, a.mbit * 1e6 / 8).port}"
               for x in rpc]
    engine = Engine.load(a.target, a.draft, n_threads=a.threads, n_ctx=4096, lookup=a.lookup, rpc=rpc)
    by = collections.defaultdict(list)
    for item in builtin():
        by[item.category].append(item)
    items = [x for c in a.category for x in by[c][a.skip:a.skip + a.limit]]
    modes = a.modes.split(",")
    strategies = Strategies(engine)
    warm = engine.tokenize("Hello")
    strategies.generate("plain", warm, 8)
    for _ in range(a.calibrations):
        curve = engine.calibrate(range(1, 17))
        print("verify curve (ms):", {m: round(t * 1000, 1) for m, t in curve.items()})
        if engine.back_curve:
            print("way back (ms):", {m: round(t * 1000, 1) for m, t in sorted(engine.back_curve.items())})
    for mode in modes:
        strategies.generate(mode, warm, 8)
    strategies.by_mode.clear()
    trace(engine, strategies, items, modes, a.max_tokens)


def trace(engine: Engine, strategies: Strategies, items, modes, max_tokens: int, fresh=None) -> None:
    """Each item in each mode, in order (the policies learning from item to item): the rounds, then the draft
    model's estimates. fresh: called before every item but the first, to start it anew (a new process's first)."""
    for i, item in enumerate(items):
        if fresh is not None and i:
            fresh()
        tokens = item.tokens(engine)
        for mode in modes:
            result = strategies.generate(mode, tokens, max_tokens)[0]
            print(f"{item.category} {mode}: {result.stats.ms_per_token:.1f} ms/token, {len(tokens)} prompt tokens")
            if mode == "plain":
                continue
            print("  ", " | ".join(f"{x.reason} {x.n_drafted}/{x.n_accepted} {1000 * x.seconds:.0f}"
                                   for x in result.stats.rounds))
            for fallback in result.stats.fallbacks:  # why a part stopped drafting (the decision's numbers)
                print(f"   round {fallback['round']}: {fallback['why']}")
            for part in parts(strategies.by_mode[mode]):
                if isinstance(part, DraftModelProposer):
                    policy = engine.policy(part)
                    c = policy.cost
                    print(f"   draft model: T_d {({n: round(1000 * t, 1) for n, t in sorted(c.draft_round_s.items())})}"
                          f" ms, acceptance {[round(x, 2) for x in c.acceptances(6)]}, best K {c.best_k(8)[0]}, "
                          f"outcomes x{policy.outcomes.optimism():.2f}, hopeless {policy.hopeless()}")
                    print(f"   T_v {({m: round(1000 * t, 1) for m, t in sorted(c.verify_s.items())})} ms, step "
                          f"{1000 * (policy.step_s or 0):.1f} ms, read {1000 * (part.read_s or 0):.1f} ms")
                    if c.back.seconds:
                        print(f"   way back {({m: round(1000 * t, 1) for m, t in sorted(c.back.seconds.items())})} "
                              f"ms, paid after {c.back.ends:.2f} of the rounds")


if __name__ == "__main__":
    main()
