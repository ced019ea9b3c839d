#!/usr/bin/env bash
# The test command: set up what the tests need (Docker engine included), then run every layer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
# Most of the suite waits (containers, servers, the agent): 3 workers on 2 cores overlap the waits (tests/conftest.py
# hands out whole files, slow ones first). TEST_WORKERS=0 runs it in one process.
exec .venv/bin/python -m pytest -n "${TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder "$@"
