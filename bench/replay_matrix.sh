#!/usr/bin/env bash
# The replays the README quotes, each its own `bench/replay.py run` (logs and JSON in bench/results/replay-runs/, each
# log with its command in the first line). Run after bench/replay.py record has written the recordings.
#   bench/replay_matrix.sh settings TAG        the cost settings of "Replayed, without the noise" (TAG names this
#                                              code: before, after)
#   bench/replay_matrix.sh latency REC NAME    a recording with 0, 0.5, 2 and 10 ms on every target decode
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/results/replay-runs
mkdir -p "$out"
run() {  # log name, then the arguments of bench/replay.py run
  local name=$1; shift
  local cmd=(.venv/bin/python bench/replay.py run "$@" -n 64 --json "$out/$name.json")
  { echo "# ${cmd[*]}   ($(date -u '+%Y-%m-%d %H:%M UTC'), edgespec $(git rev-parse --short HEAD)$(git diff --quiet -- edgespec || echo '+changes'))"
    "${cmd[@]}" 2>/dev/null; } > "$out/$name.log"
  grep -E '^overall ' "$out/$name.log" | head -1 | sed "s/^/$name: /"
}
case "${1:-}" in
  settings)
    tag=${2:?a tag for this code, e.g. before or after}
    main=(bench/results/replay-memory.json --tune --skip 1)
    held=(bench/results/replay-heldout-memory.json --costs-from bench/results/replay-memory.json)
    for set in main held; do
      declare -n args=$set
      run "$set-recorded-$tag" "${args[@]}"
      run "$set-memory-bound-$tag" "${args[@]}" --target-scale 1.35 --verify-slope 0.12
      run "$set-flat-$tag" "${args[@]}" --verify-slope 0.03
      run "$set-noise-$tag" "${args[@]}" --noise 0.15
      run "$set-rpc2ms-$tag" "${args[@]}" --latency-ms 2
    done ;;
  latency)
    rec=${2:?a recording}; name=${3:?a name for the logs}
    for ms in 0 0.5 2 10; do run "$name-latency-$ms" "$rec" --tune --skip 1 --latency-ms "$ms"; done ;;
  *) echo "usage: $0 settings TAG | latency RECORDING NAME" >&2; exit 2 ;;
esac
