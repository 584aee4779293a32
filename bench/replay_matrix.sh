#!/usr/bin/env bash
# The replays the README and docs/performance.md quote, each its own `bench/replay.py run` (logs and JSON in
# bench/results/replay-runs/, each log with its command in the first line). Run after bench/replay.py record has
# written the recordings.
#   bench/replay_matrix.sh settings TAG        the cost settings of "Replayed, without the noise" (TAG names this
#                                              code: before, after); gpu-*: the draft's curve flattened as well
#   bench/replay_matrix.sh compute TAG         the Q4_K_M pair, learning from prompt to prompt and --fresh
#   bench/replay_matrix.sh seeds TAG           the noisy settings with seeds 1-5
#   bench/replay_matrix.sh fixedk TAG          the adaptive draft model against fixed K = 2, 3, 4, 6, 8
#   bench/replay_matrix.sh fresh TAG           the F16 pair, every prompt a new process's first (--fresh)
#   bench/replay_matrix.sh latency REC NAME    a recording with 0, 0.5, 2 and 10 ms on every target decode
#   bench/replay_matrix.sh noisy REC NAME      plain and the draft model with 0.5 and 2 ms on every target decode and
#                                              noise 0.15, seeds 1-8 (where a real run over a link lost: chance decides)
#   bench/replay_matrix.sh hiccups TAG         decodes held up now and then (--hiccups: 1 a second of 100 ms mean, 4 of 25
#                                              ms), seeds 1-4: the main, held-out, Q4_K_M and SmolLM2 (+ 0.5 ms) sets,
#                                              and the F16 pair and SmolLM2 over a link (+ 0.5 ms, 11 / 15 ms a switch)
#   bench/replay_matrix.sh unseen TAG [SET]    the second held-out set (bench/heldout2.jsonl, written 2026-12-04 after all
#                                              the tuning, 48 prompts in 12 categories), after `tune` on the built-in
#                                              prompts (--tune-on): the F16 pair with the main set's costs in the
#                                              settings above, --fresh, fixed K, and with its own costs; no profile;
#                                              the Q4_K_M pair learning, --fresh, and --fresh with no profile. SET:
#                                              another such set instead (heldout3: written 2026-12-06; logs SET-*)
#   bench/replay_matrix.sh switch TAG          a link whose decodes of another shape cost more (the graph sent again:
#                                              --switch-ms), SmolLM2 and the F16 pair, quiet and with noise seeds 1-4
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
cost_settings() {  # the cost settings of "Replayed, without the noise" for one set: its logs' prefix, its arguments
  local set=$1; shift
  run "$set-recorded-$tag" "$@"
  run "$set-memory-bound-$tag" "$@" --target-scale 1.35 --verify-slope 0.12
  run "$set-flat-$tag" "$@" --verify-slope 0.03
  run "$set-gpu-flat-$tag" "$@" --verify-slope 0.03 --draft-slope 0.03
  run "$set-gpu-memory-bound-$tag" "$@" --target-scale 1.35 --verify-slope 0.12 --draft-slope 0.12
  run "$set-noise-$tag" "$@" --noise 0.15
  run "$set-rpc2ms-$tag" "$@" --latency-ms 2
}
case "${1:-}" in
  settings)
    tag=${2:?a tag for this code, e.g. before or after}
    main=(bench/results/replay-memory.json --tune --skip 1)
    held=(bench/results/replay-heldout-memory.json --costs-from bench/results/replay-memory.json)
    cost_settings main "${main[@]}"
    cost_settings held "${held[@]}" ;;
  compute)
    tag=${2:?a tag for this code, e.g. before or after}
    run "compute-$tag" bench/results/replay-compute.json --tune --skip 1 --modes plain,draft,lookup,hybrid
    run "compute-fresh-$tag" bench/results/replay-compute.json --tune --skip 1 --modes plain,draft,lookup,hybrid --fresh ;;
  seeds)
    tag=${2:?a tag for this code}
    for seed in 1 2 3 4 5; do
      run "main-noise-seed$seed-$tag" bench/results/replay-memory.json --tune --skip 1 --noise 0.15 --seed "$seed"
      run "held-noise-seed$seed-$tag" bench/results/replay-heldout-memory.json --costs-from bench/results/replay-memory.json --noise 0.15 --seed "$seed"
    done ;;
  fixedk)
    tag=${2:?a tag for this code}
    ks=(--modes plain,draft:2,draft:3,draft:4,draft:6,draft:8,draft)
    run "fixedk-recorded-$tag" bench/results/replay-memory.json --tune --skip 1 "${ks[@]}"
    run "fixedk-memory-bound-$tag" bench/results/replay-memory.json --tune --skip 1 "${ks[@]}" --target-scale 1.35 --verify-slope 0.12
    run "fixedk-flat-$tag" bench/results/replay-memory.json --tune --skip 1 "${ks[@]}" --verify-slope 0.03
    run "fixedk-held-memory-bound-$tag" bench/results/replay-heldout-memory.json --costs-from bench/results/replay-memory.json "${ks[@]}" --target-scale 1.35 --verify-slope 0.12
    run "fixedk-held-recorded-$tag" bench/results/replay-heldout-memory.json --costs-from bench/results/replay-memory.json "${ks[@]}" ;;
  fresh)
    tag=${2:?a tag for this code}
    m=(--modes plain,draft,lookup,hybrid --fresh)
    run "fresh-recorded-$tag" bench/results/replay-memory.json --tune --skip 1 "${m[@]}"
    run "fresh-memory-bound-$tag" bench/results/replay-memory.json --tune --skip 1 "${m[@]}" --target-scale 1.35 --verify-slope 0.12 ;;
  latency)
    rec=${2:?a recording}; name=${3:?a name for the logs}
    for ms in 0 0.5 2 10; do run "$name-latency-$ms" "$rec" --tune --skip 1 --latency-ms "$ms"; done ;;
  noisy)
    rec=${2:?a recording}; name=${3:?a name for the logs}
    for ms in 0.5 2; do for seed in 1 2 3 4 5 6 7 8; do
      run "$name-latency-$ms-noise-seed$seed" "$rec" --tune --skip 1 --latency-ms "$ms" --noise 0.15 --seed "$seed" --modes plain,draft
    done; done ;;
  switch)
    tag=${2:?a tag for this code}
    for spec in "smollm 0.5 3" "smollm 0.5 15" "smollm 2 3" "smollm 2 15" "memory 0.5 11" "memory 2 11"; do
      read -r rec ms switch <<< "$spec"
      args=(bench/results/replay-$rec.json --tune --skip 1 --latency-ms "$ms" --switch-ms "$switch")
      run "$rec-latency-$ms-switch-$switch-$tag" "${args[@]}" --modes plain,draft:4,draft,lookup,hybrid
      for seed in 1 2 3 4; do
        run "$rec-latency-$ms-switch-$switch-noise-seed$seed-$tag" "${args[@]}" --noise 0.15 --seed "$seed" \
          --modes plain,draft,lookup,hybrid
      done
    done ;;
  unseen)
    tag=${2:?a tag for this code}
    held=${3:-heldout2}  # another held-out set (bench/SET.jsonl, recorded as bench/results/replay-SET-memory.json)
    name=$([ "$held" = heldout2 ] && echo unseen || echo "$held")
    rec=bench/results/replay-$held-memory.json
    # a user who ran `edgespec tune` once (on the built-in prompts: --tune-on), then works on prompts of their own
    new=("$rec" --costs-from bench/results/replay-memory.json --tune --tune-on bench/results/replay-memory.json)
    cost_settings "$name" "${new[@]}"
    run "$name-fresh-recorded-$tag" "${new[@]}" --modes plain,draft,lookup,hybrid --fresh
    run "$name-fixedk-recorded-$tag" "${new[@]}" --modes plain,draft:2,draft:3,draft:4,draft:6,draft:8,draft
    run "$name-fixedk-memory-bound-$tag" "${new[@]}" --modes plain,draft:2,draft:3,draft:4,draft:6,draft:8,draft \
      --target-scale 1.35 --verify-slope 0.12
    run "$name-own-costs-$tag" "$rec" --tune --tune-on bench/results/replay-memory.json
    # no profile, learning from prompt to prompt (as the first held-out set is replayed)
    run "$name-untuned-recorded-$tag" "$rec" --costs-from bench/results/replay-memory.json
    [ -f "bench/results/replay-$held-compute.json" ] || exit 0  # (the Q4_K_M pair, where the set was recorded with it)
    comp=("bench/results/replay-$held-compute.json" --costs-from bench/results/replay-compute.json
          --modes plain,draft,lookup,hybrid)
    run "$name-compute-$tag" "${comp[@]}" --tune --tune-on bench/results/replay-compute.json
    run "$name-compute-fresh-$tag" "${comp[@]}" --tune --tune-on bench/results/replay-compute.json --fresh
    run "$name-compute-untuned-fresh-$tag" "${comp[@]}" --fresh ;;
  hiccups)
    tag=${2:?a tag for this code}
    for spec in "main memory --tune --skip 1" "held heldout-memory --costs-from bench/results/replay-memory.json" \
                "compute compute --tune --skip 1" "smollm smollm-confidence --tune --skip 1 --latency-ms 0.5" \
                "memory-switch memory --tune --skip 1 --latency-ms 0.5 --switch-ms 11" \
                "smollm-switch smollm --tune --skip 1 --latency-ms 0.5 --switch-ms 15"; do
      read -r name rec rest <<< "$spec"
      for regime in "1 100" "4 25"; do
        read -r rate ms <<< "$regime"
        for seed in 1 2 3 4; do
          # shellcheck disable=SC2086
          run "$name-hiccups-$rate-$ms-seed$seed-$tag" "bench/results/replay-$rec.json" $rest --hiccups "$rate" \
            --hiccup-ms "$ms" --seed "$seed" --modes plain,draft,lookup,hybrid
        done
      done
    done ;;
  *) echo "usage: $0 settings TAG | compute TAG | seeds TAG | fixedk TAG | fresh TAG | latency RECORDING NAME | noisy RECORDING NAME | unseen TAG [SET] | switch TAG | hiccups TAG" >&2; exit 2 ;;
esac
