#!/usr/bin/env bash
# Two versions of edgespec, each `edgespec bench` in a process of its own, interleaved over rounds (drift falls on
# both alike), every run from an empty profile folder. A version is a git revision (checked out in a temporary
# worktree) or "." (this working tree, changes included). Run it alone on the machine.
#   bench/ab.sh [--rounds N] [--out DIR] REV_A REV_B -- BENCH OPTIONS (-m, -d, --modes, --category, -n ...)
# Writes DIR/NAME-ROUND.log and .json (each log's first line: the command, the revision, the time) and prints each
# run's overall ms/token and speed-ups.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=2 out=bench/results/ab
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--out DIR] REV_A REV_B -- BENCH OPTIONS" >&2; exit 2 ;;
  esac
done
[[ $# -ge 3 && $3 == -- ]] || { echo "usage: $0 [--rounds N] [--out DIR] REV_A REV_B -- BENCH OPTIONS" >&2; exit 2; }
revs=("$1" "$2"); shift 3
root=$PWD py=$PWD/.venv/bin/python tmp=$(mktemp -d)
trap 'for r in "${revs[@]}"; do [[ $r == . ]] || git -C "$root" worktree remove --force "$tmp/$r" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
declare -A dir label
for r in "${revs[@]}"; do
  if [[ $r == . ]]; then
    dir[$r]=$root label[$r]="$(git rev-parse --short HEAD)$(git diff --quiet -- edgespec || echo '+changes')"
  else
    git worktree add -q --detach "$tmp/$r" "$r"
    dir[$r]=$tmp/$r label[$r]=$(git rev-parse --short "$r")
  fi
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
for ((round = 1; round <= rounds; round++)); do
  for r in "${revs[@]}"; do
    name=$( [[ $r == . ]] && echo work || echo "$r" | tr -c 'A-Za-z0-9._\n-' _ )
    log=$out/$name-$round.log json=$out/$name-$round.json
    profiles=$(mktemp -d)
    { echo "# bench/ab.sh ${revs[*]} -- $*   (round $round, edgespec ${label[$r]}, $(date -u '+%Y-%m-%d %H:%M UTC'), empty profile folder)"
      (cd "${dir[$r]}" && EDGESPEC_PROFILES=$profiles "$py" -m edgespec bench "$@" --json "$json" 2>&1); } > "$log"
    rm -rf "$profiles"
    "$py" - "$json" "${label[$r]}" "$round" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
plain = rows["plain"]["overall"]["ms_per_token"]
others = " ".join(f"{m} {r['overall']['ms_per_token']:.1f} ({r['overall']['speedup']:.2f}x)" for m, r in rows.items() if m != "plain")
print(f"{sys.argv[2]:<16} round {sys.argv[3]}: plain {plain:.1f} ms/token; {others}")
PY
  done
done
