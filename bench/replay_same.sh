#!/usr/bin/env bash
# Whether a change leaves the drafting policies' behaviour as it was: 16 replays (bench/replay.py run, a virtual clock,
# deterministic) with this working tree's engine and with REV's, their figures compared exactly. For refactors that
# claim "no behaviour change"; a policy change moves at least one (a one-constant change, HAND_OFF_ROWS 4 -> 5, does).
#   bench/replay_same.sh REV [OUT]     REV: the commit to compare against (e.g. HEAD, main~3); OUT: where the logs and
#                                      JSON go (default: a new folder under /tmp). Exit 0 when all 16 are identical;
#                                      for each that differs, what moved (per mode, overall and lowest category).
# The replays: the 12 a policy trial is judged on (the built-in, held-out and unseen sets with the recorded costs and
# memory-bound, a flat curve, + 2 ms, noise and their own costs, the Q4_K_M pair learning and --fresh), SmolLM2 over a
# link with switches and with hold-ups and a confidence floor, the built-in set --fresh with noise, and the held-out
# set over 10 ms with no profile. Trees, grammars and sampling are the tests' to check (tests/test_tree_engine.py,
# test_constraints.py, test_proposers_engine.py). About a minute on 2 cores; run it alone.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bench/replay_same.sh REV [OUT]}
out=${2:-$(mktemp -d /tmp/replay-same.XXXXXX)}
base=$(mktemp -d /tmp/replay-base.XXXXXX)
git worktree add -q --detach "$base" "$rev"
trap 'git worktree remove --force "$base"' EXIT
R=bench/results  # the recordings: this tree's (REV's engine replays the same files)
replays() {  # ROOT NAME: every replay with the engine under ROOT, into $out/NAME/
  local root=$1 dir=$out/$2
  mkdir -p "$dir"
  one() { local name=$1; shift; PYTHONPATH=$root .venv/bin/python "$root/bench/replay.py" run "$@" -n 64 \
            --json "$dir/$name.json" > "$dir/$name.log" 2>/dev/null; }
  local tune=(--tune --tune-on $R/replay-memory.json) mb=(--target-scale 1.35 --verify-slope 0.12)
  one main-recorded $R/replay-memory.json --tune --skip 1 & one main-mb $R/replay-memory.json --tune --skip 1 "${mb[@]}"; wait
  one held-recorded $R/replay-heldout-memory.json --costs-from $R/replay-memory.json &
  one held-mb $R/replay-heldout-memory.json --costs-from $R/replay-memory.json "${mb[@]}"; wait
  one unseen-recorded $R/replay-heldout2-memory.json --costs-from $R/replay-memory.json "${tune[@]}" &
  one unseen-mb $R/replay-heldout2-memory.json --costs-from $R/replay-memory.json "${tune[@]}" "${mb[@]}"; wait
  one main-rpc2ms $R/replay-memory.json --tune --skip 1 --latency-ms 2 &
  one unseen-noise $R/replay-heldout2-memory.json --costs-from $R/replay-memory.json "${tune[@]}" --noise 0.15; wait
  one compute $R/replay-compute.json --tune --skip 1 --modes plain,draft,lookup,hybrid &
  one compute-fresh $R/replay-compute.json --tune --skip 1 --modes plain,draft,lookup,hybrid --fresh; wait
  one main-flat $R/replay-memory.json --tune --skip 1 --verify-slope 0.03 &
  one unseen-own $R/replay-heldout2-memory.json "${tune[@]}"; wait
  one smollm-switch $R/replay-smollm.json --tune --skip 1 --latency-ms 0.5 --switch-ms 15 \
      --modes plain,draft:4,draft,lookup,hybrid &
  one smollm-hiccups $R/replay-smollm-confidence.json --tune --skip 1 --latency-ms 2 --hiccups 1 --hiccup-ms 100 \
      --draft-p-min 0.5; wait
  one main-fresh-noise $R/replay-memory.json --tune --skip 1 --fresh --noise 0.15 --seed 3 &
  one held-noprofile-10ms $R/replay-heldout-memory.json --costs-from $R/replay-memory.json --latency-ms 10; wait
}
replays "$base" before
replays "$PWD" after
.venv/bin/python - "$out" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
differ = 0
for before in sorted((out / "before").glob("*.json")):
    a, b = (json.loads(p.read_text()) for p in (before, out / "after" / before.name))
    same = a["rows"] == b["rows"] and a["divergences"] == b["divergences"]
    differ += not same
    print(f"{before.stem:22} {'identical' if same else 'DIFFERENT'}")
    if not same:  # what moved: per mode, overall per token and end to end (over plain's), the lowest category
        ra, rb = a["rows"], b["rows"]
        for mode in (m for m in ra if m != "plain"):
            cats = [c for c in ra[mode] if c != "overall"]
            fig = [(r[mode]["overall"]["speedup"], r[mode]["overall"]["end_to_end_tok_s"]
                    / r["plain"]["overall"]["end_to_end_tok_s"], min(r[mode][c]["speedup"] for c in cats))
                   for r in (ra, rb)]
            print(f"  {mode:8} per token {fig[0][0]:.3f} -> {fig[1][0]:.3f}, end to end {fig[0][1]:.3f} -> "
                  f"{fig[1][1]:.3f}, lowest category {fig[0][2]:.3f} -> {fig[1][2]:.3f}")
        if {"draft", "lookup", "hybrid"} <= set(ra):  # categories where the hybrid is within 2% of its better part
            near = [[sum(r["hybrid"][c][f] >= 0.98 * max(r["draft"][c][f], r["lookup"][c][f])
                         for c in r["hybrid"] if c != "overall") for r in (ra, rb)]
                    for f in ("speedup", "end_to_end_tok_s")]  # per token; end to end, the prompt's reading included
            print(f"  hybrid within 2% of its better part in {near[0][0]} -> {near[0][1]} of {len(cats)} categories "
                  f"per token, {near[1][0]} -> {near[1][1]} end to end")
print(f"{differ} of {len(list((out / 'before').glob('*.json')))} differ; logs in {out}")
sys.exit(1 if differ else 0)
EOF
