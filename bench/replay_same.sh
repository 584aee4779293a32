#!/usr/bin/env bash
# Whether a change leaves the drafting policies' behaviour as it was: 16 replays (bench/replay.py run, a virtual clock,
# deterministic) with this working tree's engine and with REV's, their figures compared exactly. For refactors that
# claim "no behaviour change"; a policy change moves at least one (a one-constant change, HAND_OFF_ROWS 4 -> 5, does).
#   bench/replay_same.sh REV [OUT]     REV: the commit to compare against (e.g. HEAD, main~3); OUT: where the logs and
#                                      JSON go (default: a new folder under /tmp). Exit 0 when all 16 are identical;
#                                      for each that differs, what moved (per mode, overall and lowest category).
# The replays (their options: bench/replay_settings.py, which bench/replay_ensemble.py reads too): the 12 a policy
# trial is judged on (the built-in, held-out and unseen sets with the recorded costs and memory-bound, a flat curve,
# + 2 ms, noise and their own costs, the Q4_K_M pair learning and --fresh), SmolLM2 over a link with switches and with
# hold-ups and a confidence floor, the built-in set --fresh with noise, and the held-out set over 10 ms with no
# profile. Trees, grammars and sampling are the tests' to check (tests/test_tree_engine.py,
# test_constraints.py, test_proposers_engine.py). About a minute on 2 cores; run it alone.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bench/replay_same.sh REV [OUT]}
out=${2:-$(mktemp -d /tmp/replay-same.XXXXXX)}
base=$(mktemp -d /tmp/replay-base.XXXXXX)
git worktree add -q --detach "$base" "$rev"
trap 'git worktree remove --force "$base"' EXIT
# the recordings and the settings are this tree's (REV's engine replays the same files)
replays() {  # ROOT NAME: every replay with the engine under ROOT, into $out/NAME/, two at a time
  local root=$1 dir=$out/$2
  mkdir -p "$dir"
  one() {  # a setting of bench/replay_settings.py's table
    local name=$1 args
    mapfile -t args < <(.venv/bin/python bench/replay_settings.py "$name")
    PYTHONPATH=$root .venv/bin/python "$root/bench/replay.py" run "${args[@]}" -n 64 --json "$dir/$name.json" \
      > "$dir/$name.log" 2>/dev/null
  }
  local pairs=(main-recorded main-mb held-recorded held-mb unseen-recorded unseen-mb main-rpc2ms unseen-noise
               compute compute-fresh main-flat unseen-own smollm-switch smollm-hiccups main-fresh-noise
               held-noprofile-10ms)
  for ((i = 0; i < ${#pairs[@]}; i += 2)); do one "${pairs[i]}" & one "${pairs[i + 1]}"; wait; done
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
