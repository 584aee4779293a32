#!/usr/bin/env bash
# The llama.cpp build flags for this machine, printed on one line (setup.sh and build-rpc-server.sh use the same).
#   EDGESPEC_BACKEND=cpu|cuda|metal   which backend (default: metal on macOS, else cpu)
# The RPC client backend is always on: it lets a target be split over other hosts' rpc-server (edgespec --rpc).
# A plain build uses -march=native, which on CPUs that advertise AMX where the kernel does not allow it dies with
# SIGILL at the first matmul; so on x86 we name the instruction sets from /proc/cpuinfo.
set -euo pipefail
backend="${EDGESPEC_BACKEND:-}"
if [[ -z "$backend" ]]; then [[ "$(uname -s)" == Darwin ]] && backend=metal || backend=cpu; fi
args="-DGGML_RPC=ON"
case "$backend" in
  cuda) args="$args -DGGML_CUDA=ON" ;;
  metal) args="$args -DGGML_METAL=ON" ;;
  cpu) ;;
  *) echo "setup: unknown EDGESPEC_BACKEND '$backend' (use cpu, cuda or metal)" >&2; exit 2 ;;
esac
if [[ "$(uname -s)" == Linux && "$(uname -m)" == x86_64 ]]; then
  flags="$(grep -m1 '^flags' /proc/cpuinfo || true)"
  args="$args -DGGML_NATIVE=OFF"
  for f in avx:AVX avx2:AVX2 fma:FMA f16c:F16C avx512f:AVX512; do
    if grep -qw "${f%%:*}" <<<"$flags"; then args="$args -DGGML_${f##*:}=ON"; else args="$args -DGGML_${f##*:}=OFF"; fi
  done
fi
echo "$args"
