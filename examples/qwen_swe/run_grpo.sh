#!/usr/bin/env bash
# GRPO training of qwen-code on SWE-bench.
#   bash examples/qwen_swe/run_grpo.sh                      # embedded default: local tasks, CPU vLLM, CPU FSDP2
#   VLLM_URL=http://host:8000/v1 MODEL=Qwen/Qwen3-Coder-30B-A3B-Instruct bash examples/qwen_swe/run_grpo.sh
# Overrides (env or --flags): VLLM_URL MODEL NUM_ROLLOUTS ROLLOUT_BATCH_SIZE N_SAMPLES OUTPUT_DIR, and every
# setting listed by `--help`. BACKEND=slime SLIME_DIR=<slime v0.2.2 checkout> launches slime's train.py instead.
# Re-running with the same OUTPUT_DIR resumes from the latest complete checkpoint.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
exec "$PY" -m qwen_swe.run "$@"
