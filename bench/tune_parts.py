"""Where `edgespec tune`'s time goes: loading, the warm-up and verify curves, each prompt (each mode's time to its
first token and its whole run), and what the pace (benchmark._Pace) expected of each prompt before it started.
Nothing is written to the profile folder. Run it alone: another busy process changes every number.

    .venv/bin/python bench/tune_parts.py TARGET.gguf [--draft DRAFT.gguf] [--seconds 110] [--threads 2]

At a revision before 9e21afd (copy this file into its worktree's bench/), --seconds is that tune's budget for
prompts alone (it was 90).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgespec import autotune, benchmark  # noqa: E402
from edgespec.engine import Engine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--draft")
    ap.add_argument("--seconds", type=float, default=110.0, help="as tune's: the whole run, loading included")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    t0 = time.perf_counter()

    def say(line: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f} s] {line}", flush=True)

    engine = Engine.load(args.model, args.draft, n_threads=args.threads)
    say("loaded")
    pace = getattr(benchmark, "_Pace", None)  # (a revision before 9e21afd has none: its budget was for prompts)
    expect, init, measure = pace and pace.expect, benchmark.Session.__init__, benchmark.Session.measure

    def expecting(pace, n_prompt):
        s = expect(pace, n_prompt)
        say(f"  the next prompt ({n_prompt} tokens) expected to take {s:.1f} s")
        return s

    def initialising(session, *a, **k):
        s = time.perf_counter()
        init(session, *a, **k)
        say(f"warm-up and verify curves: {time.perf_counter() - s:.1f} s")

    def measuring(session, it, *a, **k):
        s = time.perf_counter()
        results = measure(session, it, *a, **k)
        if results is not None:
            runs = ", ".join(f"{m} {first or 0:.1f}/{wall:.1f}" for m, (_, wall, first) in results.items())
            say(f"{it.category}: {time.perf_counter() - s:.1f} s (per mode, s to the first token / in all: {runs})")
        return results

    benchmark.Session.__init__, benchmark.Session.measure = initialising, measuring
    if pace is not None:
        pace.expect = expecting
    try:
        tuned = autotune.tune(engine, args.seconds - (time.perf_counter() - t0) if pace else args.seconds, save=False)
    finally:
        engine.close(remember=False)
    say(f"done: {tuned.rows['plain']['overall']['prompts']} prompts")


if __name__ == "__main__":
    main()
