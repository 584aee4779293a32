#!/usr/bin/env bash
# Set up (idempotent) and run the test suite: unit tests, the engine on tiny GGUF models written by the tests,
# and SmolLM2-135M real-model tests. Extra arguments go to pytest, e.g. `scripts/test.sh -m slow` for the
# Qwen2.5-Coder tests (models from ../shared/models/fetch-bench-models.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
EDGESPEC_RPC=1 scripts/setup.sh  # the tests also start rpc-servers (test_rpc.py)
exec .venv/bin/python -m pytest -ra "$@"
