#!/usr/bin/env bash
# Set up (idempotent) and run the test suite: unit tests, the engine on tiny GGUF models written by the tests,
# and SmolLM2-135M real-model tests. Extra arguments go to pytest, e.g. `scripts/test.sh -m slow` for the
# Qwen2.5-Coder tests (models from ../shared/models/fetch-bench-models.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
EDGESPEC_RPC=1 scripts/setup.sh  # the tests also start rpc-servers (test_rpc.py)
# serve's chat page is driven in jsdom where Node.js is here (tests/test_webui.py; skipped without it)
if command -v npm > /dev/null && [ ! -d .venv/node/node_modules/jsdom ]; then
  timeout 300 npm install --prefix .venv/node --no-audit --no-fund --silent jsdom@24.1.3 > /dev/null 2>&1 \
    || echo "scripts/test.sh: note: could not install jsdom; the chat page's browser test is skipped" >&2
fi
export NODE_PATH=$PWD/.venv/node/node_modules${NODE_PATH:+:$NODE_PATH}
# --durations: the slowest tests are named at the end, so the suite can be kept within its budget (about 15 min)
exec .venv/bin/python -m pytest -ra --durations=15 "$@"
