"""The ensembles' settings replayed with the 0.5B draft as fetched (Q4_K_M, before) and with its Q4_0 copy (after),
both under one timing of the target, so that only the draft model differs: its predictions and its decode costs.

before: each setting's options from bench/replay_settings.py, the built-in texts' recording replaced by
replay-memory-retimed-1207.json (its costs timed again on 2026-12-07, 09:48 UTC) and every setting's costs taken from
it. after: every recording replaced by its Q4_0 twin (the same texts, the Q4_0 copy's predictions: `bench/replay.py
draft REC --draft qwen0.5b-q4_0.gguf -o TWIN`), the target's costs from the retimed recording and the draft's from
replay-memory-q4_0-draft.json (`bench/replay.py run --draft-costs-from`). 8 seeds, 2% noise, as replay_ensemble.py.

    .venv/bin/python bench/replay_draft_swap.py --out DIR [--settings main-recorded,held-mb,...]
    .venv/bin/python bench/replay_ensemble.py --from DIR      # the report: the hybrid before and after, paired

With --against REV both sides run with the Q4_0 copy, before/ with REV's engine (a git worktree) and after/ with this
tree's: a change to the policies judged with the cheaper draft, as replay_ensemble.py --against judges it with the
draft as fetched (bench/results/replay-runs/ensemble-lead-check.log).

Results: bench/results/replay-runs/draft-format-ensembles.log. Run it alone (two replays at a time, about 8 minutes
for the 17 settings); the figures are virtual seconds and do not depend on the machine's load.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from replay_ensemble import engine_at
from replay_settings import ENSEMBLE, JUDGING, MODES, MORE, SESSIONS, SETTINGS

ROOT = Path(__file__).resolve().parent.parent
R = "bench/results"
BUILT_IN, RETIMED, Q4_0 = f"{R}/replay-memory.json", f"{R}/replay-memory-retimed-1207.json", \
    f"{R}/replay-memory-q4_0-draft.json"
TWINS = {f"{R}/replay-{n}-memory.json": f"{R}/replay-{n}-memory-q4_0-draft.json" for n in ("heldout", "heldout2",
                                                                                            "heldout3")}
# not SmolLM2's (another pair), nor unseen-own: its own costs give way to the one timing, making it unseen-recorded
DEFAULT = ENSEMBLE + JUDGING + [s for s in MORE if s not in ("smollm-switch", "unseen-own")] + SESSIONS


def before(options: list[str]) -> list[str]:
    out = [RETIMED if o == BUILT_IN else o for o in options]
    return out if "--costs-from" in options else out + ["--costs-from", RETIMED]


def after(options: list[str]) -> list[str]:
    out = [RETIMED if o == BUILT_IN and prev == "--costs-from" else Q4_0 if o == BUILT_IN else TWINS.get(o, o)
           for prev, o in zip([None, *options], options)]
    return (out if "--costs-from" in options else out + ["--costs-from", RETIMED]) + ["--draft-costs-from", Q4_0]


def replay(which: str, setting: str, seed: int, out: Path, engine: Path = ROOT, draft: str | None = None) -> None:
    """One replay into out/WHICH/SETTING-SEED.json: the draft as `draft` says ("before": as fetched, "after": the Q4_0
    copy; default: as `which`), with the engine under `engine`."""
    options = (before if (draft or which) == "before" else after)(SETTINGS[setting])
    name = out / which / f"{setting}-{seed}"
    cmd = [str(ROOT / ".venv/bin/python"), str(engine / "bench/replay.py"), "run", *options, "-n", "64", "--modes",
           MODES, "--noise", "0.02", "--seed", str(seed), "--json", f"{name}.json"]
    with open(f"{name}.log", "w") as log:
        print(" ".join(cmd), file=log, flush=True)
        if subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(engine)}, stdout=log,
                          stderr=subprocess.STDOUT).returncode:
            raise SystemExit(f"replay_draft_swap: the replay {which} {setting} seed {seed} failed; see {name}.log")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--settings", default=",".join(DEFAULT))
    ap.add_argument("--against", metavar="REV", help="both sides with the Q4_0 copy: before/ REV's engine, after/ "
                    "this tree's")
    args = ap.parse_args()
    settings = args.settings.split(",")
    if unknown := [s for s in settings if s not in DEFAULT]:
        sys.exit(f"replay_draft_swap: not a setting of the F16 pair's ensembles: {', '.join(unknown)}")
    for which in ("before", "after"):
        (args.out / which).mkdir(parents=True, exist_ok=True)
    with engine_at(args.against, "replay_draft_swap") if args.against else contextlib.nullcontext() as base:
        with ThreadPoolExecutor(2) as pool:
            for f in [pool.submit(replay, w, s, seed, args.out, *((base, "after") if base and w == "before" else ()))
                      for s in settings for seed in range(8) for w in ("before", "after")]:
                f.result()
    print(f"replays in {args.out}; the report: .venv/bin/python bench/replay_ensemble.py --from {args.out}")


if __name__ == "__main__":
    main()
