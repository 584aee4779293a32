#!/usr/bin/env bash
# The target on an rpc-server on this machine (direct loopback, no proxy), `edgespec bench` against it, under
# environment settings given for the server and for the client, the settings interleaved over rounds. For what
# shares the cores when both ends run on one machine (libgomp's idle threads spin after each parallel region).
#   bench/rpc_env.sh [--rounds N] [--out DIR] 'SERVER_ENV|CLIENT_ENV' ... -- BENCH OPTIONS
#   e.g. bench/rpc_env.sh 'X=1|X=1' 'GOMP_SPINCOUNT=10000|GOMP_SPINCOUNT=10000' -- -m T.gguf -d D.gguf --modes plain,draft:4
# Each setting is VAR=VALUE words for `env` (X=1: nothing changed). Writes DIR/SETTING-ROUND.{log,json}. Run alone.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=2 out=bench/results/rpc-env
while [[ $# -gt 0 && $1 == --* && $1 != -- ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--out DIR] 'SERVER_ENV|CLIENT_ENV' ... -- BENCH OPTIONS" >&2; exit 2 ;;
  esac
done
settings=()
while [[ $# -gt 0 && $1 != -- ]]; do settings+=("$1"); shift; done
[[ $# -gt 0 && ${#settings[@]} -gt 0 ]] || { echo "usage: $0 [--rounds N] [--out DIR] 'SERVER_ENV|CLIENT_ENV' ... -- BENCH OPTIONS" >&2; exit 2; }
shift
[[ -x .venv/bin/rpc-server ]] || { echo "no .venv/bin/rpc-server: run scripts/build-rpc-server.sh" >&2; exit 1; }
mkdir -p "$out"
port_free() { .venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for ((round = 1; round <= rounds; round++)); do
  for setting in "${settings[@]}"; do
    server_env=${setting%%|*} client_env=${setting#*|}
    name=$(echo "$setting" | tr -c 'A-Za-z0-9=\n' _)
    port=$(port_free)
    # shellcheck disable=SC2086  # (the settings are words for env)
    env $server_env .venv/bin/rpc-server -H 127.0.0.1 -p "$port" -t 2 > /dev/null 2>&1 &
    server=$!
    sleep 1.5
    profiles=$(mktemp -d)
    { echo "# bench/rpc_env.sh '$setting' -- $*   (round $round, server env: $server_env, client env: $client_env, edgespec $(git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC'), empty profile folder)"
      # shellcheck disable=SC2086
      EDGESPEC_PROFILES=$profiles env $client_env .venv/bin/python -m edgespec bench "$@" --rpc "127.0.0.1:$port" \
        --json "$out/$name-$round.json" 2>&1; } > "$out/$name-$round.log" && ok=1 || ok=0
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    rm -rf "$profiles"
    if [[ $ok == 0 ]]; then  # (a setting that breaks the server or the client: say so, go on with the others)
      echo "round $round [$setting]: the bench failed, see $out/$name-$round.log"
      continue
    fi
    .venv/bin/python - "$out/$name-$round.json" "$setting" "$round" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
others = " ".join(f"{m} {r['overall']['speedup']:.2f}x" for m, r in rows.items() if m != "plain")
print(f"round {sys.argv[3]} [{sys.argv[2]}]: plain {rows['plain']['overall']['ms_per_token']:.1f} ms/token; {others}")
PY
  done
done
