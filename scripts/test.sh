#!/usr/bin/env bash
# The test command: set up what the tests need (Docker engine included), then run every layer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
exec .venv/bin/python -m pytest "$@"
