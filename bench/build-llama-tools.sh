#!/usr/bin/env bash
# Build llama.cpp's own tools from the source vendored in the llama-cpp-python sdist (the same llama.cpp that
# edgespec runs on), with the CPU flags scripts/setup.sh uses: llama-lookup (bench/llama_lookup.py) and
# llama-server (bench/serve.py). Output: build/llama-tools/bin/. Extra arguments name the targets to build.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="0.3.36"
SRC="build/llama-cpp-python-$VERSION"
if [[ ! -d "$SRC" ]]; then
  mkdir -p build
  .venv/bin/python -m pip download -q --no-deps --no-binary :all: -d build "llama-cpp-python==$VERSION"
  tar -xzf "build/llama_cpp_python-$VERSION.tar.gz" -C build && mv "build/llama_cpp_python-$VERSION" "$SRC"
fi
flags="$(sed -n '/^cmake_args()/,/^}/p' scripts/setup.sh > /tmp/edgespec-cmake-args.sh; source /tmp/edgespec-cmake-args.sh; say() { :; }; cmake_args)"
cmake -S "$SRC/vendor/llama.cpp" -B build/llama-tools -DCMAKE_BUILD_TYPE=Release $flags \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON > /dev/null
targets=("${@:-llama-lookup}")
cmake --build build/llama-tools --target "${targets[@]}" -j "$(getconf _NPROCESSORS_ONLN)"
for t in "${targets[@]}"; do echo "build/llama-tools/bin/$t"; done
