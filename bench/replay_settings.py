"""The named replay settings the drafting policies are judged on: each a recording and `bench/replay.py run`'s
options for it (costs, curve, link, tuning). One table for the tools that replay them: bench/replay_ensemble.py
(each setting under several seeds with a little noise) and bench/replay_same.sh (each once, exactly, against
another revision's engine).

    .venv/bin/python bench/replay_settings.py main-mb      # its options, one per line (for a shell's mapfile)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

R = "bench/results"
MAIN = [f"{R}/replay-memory.json", "--tune", "--skip", "1"]  # the built-in set, tune on each category's first prompt
HELD = [f"{R}/replay-heldout-memory.json", "--costs-from", f"{R}/replay-memory.json"]  # held out, no profile
TUNE = ["--tune", "--tune-on", f"{R}/replay-memory.json"]  # a held-out set with tune's profile from the built-in set
UNSEEN = [f"{R}/replay-heldout2-memory.json", "--costs-from", f"{R}/replay-memory.json", *TUNE]
THIRD = [f"{R}/replay-heldout3-memory.json", "--costs-from", f"{R}/replay-memory.json", *TUNE]
MEMORY_BOUND = ["--target-scale", "1.35", "--verify-slope", "0.12"]  # a target read from memory, like a laptop's
FLAT = ["--verify-slope", "0.03"]  # verify rows almost free, as on a GPU
MODES = "plain,draft,lookup,hybrid"  # (replay.py run's default adds draft:4)
# the built-in categories in the workload's order (the recordings of MAIN are of that workload)
BUILT_IN = list(dict.fromkeys(o["category"] for o in json.loads(
    (Path(__file__).resolve().parent.parent / "edgespec" / "workloads.json").read_text())))
PROSE = ["translate", "writing", "chat"]  # where the draft model gains least (a session that begins with them)


def _blocks(categories: list[str]) -> list[str]:
    """A session: each category's prompts together, in this order (replay.py's --blocks)."""
    return ["--blocks", *(x for c in categories for x in ("--category", c))]


PROSE_FIRST = _blocks(PROSE + [c for c in BUILT_IN if c not in PROSE])
REVERSED = _blocks(BUILT_IN[::-1])

SETTINGS = {
    # the F16 pair on the built-in, held-out and unseen sets, at the recorded costs and memory-bound
    "main-recorded": MAIN,
    "main-mb": [*MAIN, *MEMORY_BOUND],
    "main-flat": [*MAIN, *FLAT],
    "held-recorded": HELD,
    "held-mb": [*HELD, *MEMORY_BOUND],
    "unseen-recorded": UNSEEN,
    "unseen-mb": [*UNSEEN, *MEMORY_BOUND],
    # the third held-out set, kept for judging a change, not for shaping one
    "third-recorded": THIRD,
    "third-mb": [*THIRD, *MEMORY_BOUND],
    "third-flat": [*THIRD, *FLAT],
    # sessions: the built-in set category by category, beginning with translation, open writing and chat (where
    # the draft model gains least) or in the workload's order reversed; what carries from text to text is one kind's
    "prose-first-recorded": [*MAIN, *PROSE_FIRST],
    "prose-first-mb": [*MAIN, *MEMORY_BOUND, *PROSE_FIRST],
    "prose-first-flat": [*MAIN, *FLAT, *PROSE_FIRST],
    "reversed-recorded": [*MAIN, *REVERSED],
    # over a link, fresh processes, the unseen set at its own costs, no profile; SmolLM2 over a link
    "main-rpc2ms": [*MAIN, "--latency-ms", "2"],
    "main-fresh": [*MAIN, "--fresh"],
    "unseen-own": [f"{R}/replay-heldout2-memory.json", *TUNE],
    "held-noprofile-10ms": [*HELD, "--latency-ms", "10"],
    "smollm-switch": [f"{R}/replay-smollm.json", "--tune", "--skip", "1", "--latency-ms", "0.5", "--switch-ms", "15"],
    # each with its own noise, modes or floor: replayed once (bench/replay_same.sh), not in an ensemble
    "unseen-noise": [*UNSEEN, "--noise", "0.15"],
    "main-fresh-noise": [*MAIN, "--fresh", "--noise", "0.15", "--seed", "3"],
    "compute": [f"{R}/replay-compute.json", "--tune", "--skip", "1", "--modes", MODES],
    "compute-fresh": [f"{R}/replay-compute.json", "--tune", "--skip", "1", "--modes", MODES, "--fresh"],
    "smollm-hiccups": [f"{R}/replay-smollm-confidence.json", "--tune", "--skip", "1", "--latency-ms", "2",
                       "--hiccups", "1", "--hiccup-ms", "100", "--draft-p-min", "0.5"],
}
ENSEMBLE = ["main-recorded", "main-mb", "main-flat", "held-recorded", "held-mb", "unseen-recorded", "unseen-mb"]
JUDGING = ["third-recorded", "third-mb", "third-flat"]
MORE = ["main-rpc2ms", "main-fresh", "unseen-own", "held-noprofile-10ms", "smollm-switch"]
SESSIONS = ["prose-first-recorded", "prose-first-mb", "prose-first-flat", "reversed-recorded"]
SET_BY_ENSEMBLE = {"--noise", "--seed", "--modes"}  # options an ensemble gives every replay itself
assert not any(SET_BY_ENSEMBLE & set(SETTINGS[s]) for s in ENSEMBLE + JUDGING + MORE + SESSIONS)

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in SETTINGS:
        sys.exit(f"replay_settings: name one of {', '.join(SETTINGS)}")
    print("\n".join(SETTINGS[sys.argv[1]]))
