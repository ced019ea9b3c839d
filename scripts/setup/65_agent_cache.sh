#!/usr/bin/env bash
# Node's compile cache of the agent (qwen_swe/agent/compile_cache.py): qwen-code's JavaScript compiled once, in a
# container of the task image where rollouts see the bundle, so every rollout's CLI reads it instead of compiling.
# Idempotent: the cache's `.complete` file is the stamp; a rebuilt bundle starts without one and gets it here.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/python -m qwen_swe.agent.compile_cache "$@"
