#!/usr/bin/env bash
# Build llama.cpp's rpc-server from the very llama.cpp source the venv's llama-cpp-python was built from (its sdist
# on the package index), so both ends of a split model speak the same RPC protocol. Idempotent; writes
# .venv/bin/rpc-server. Run it on each host that lends its CPU or GPU:  .venv/bin/rpc-server -H 0.0.0.0 -p 50052
# (the protocol is not secured: loopback or a trusted network only).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
version="$(sed -n 's/^LLAMA_CPP_VERSION="\(.*\)"$/\1/p' scripts/setup.sh)"
args="${CMAKE_ARGS:-$(scripts/cmake-args.sh)}"
stamp="$VENV/.rpc-server-build"
if [[ -x "$VENV/bin/rpc-server" && "$(cat "$stamp" 2>/dev/null || true)" == "$version $args" ]]; then
  exit 0
fi
say() { printf 'setup: %s\n' "$*" >&2; }
say "building rpc-server from llama-cpp-python $version's llama.cpp (a few minutes) with: $args"
cmake="$(command -v cmake || true)"
if [[ -z "$cmake" ]]; then
  "$VENV/bin/python" -m pip install -q cmake
  cmake="$VENV/bin/cmake"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$VENV/bin/python" -m pip download -q --no-binary :all: --no-deps --no-cache-dir "llama-cpp-python==$version" -d "$tmp"
tar xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
src="$(echo "$tmp"/llama_cpp_python-*/vendor/llama.cpp)"
# shellcheck disable=SC2086
"$cmake" -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON $args >/dev/null
"$cmake" --build "$tmp/build" --target ggml-rpc-server -j "$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)" >/dev/null
install -m 755 "$tmp/build/bin/ggml-rpc-server" "$VENV/bin/rpc-server"
echo "$version $args" > "$stamp"
say "ready: $VENV/bin/rpc-server"
