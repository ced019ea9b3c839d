#!/usr/bin/env bash
# The embedded default's policy: SmolLM2-135M warm-started on expert demonstrations of generated train tasks (the
# real agent, proxy and grader), then SFT through the project's trainer. Cached under
# $QWEN_SWE_HOME/warmstart/<key>, the key a digest of every input (base model, tasks, expert and stage versions, SFT
# settings), so a repeated set-up costs the key's computation. It prints a line per phase and progress every 30 s.
# --tests (setup.sh --tests): the tests' small warm start instead (tests/warm_start.py), cached the same way.
set -euo pipefail
if [[ "${1:-}" == --tests ]]; then
  HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python -c 'from tests.warm_start import small_warm_start; print(small_warm_start())'
else
  HF_HUB_OFFLINE=1 .venv/bin/python -m qwen_swe.warmstart build
fi
