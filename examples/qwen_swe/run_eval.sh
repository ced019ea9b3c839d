#!/usr/bin/env bash
# Evaluate a model without training: the agent EVAL_SAMPLES times per instance, graded by the training grader.
#   bash examples/qwen_swe/run_eval.sh                                   # embedded server, local task pack
#   VLLM_URL=http://host:8000/v1 MODEL=Qwen/Qwen3-Coder-30B-A3B-Instruct DATASET=... bash examples/qwen_swe/run_eval.sh
#   MODEL=$OUTPUT_DIR/weights/v000002 bash examples/qwen_swe/run_eval.sh  # a checkpoint on the embedded server
# Writes OUTPUT_DIR/eval/{predictions.jsonl,results.jsonl,report.json} (or --out DIR); re-running resumes.
# Grade an existing predictions file instead: .venv/bin/python -m qwen_swe.evaluate --predictions FILE
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
exec "$PY" -m qwen_swe.evaluate --agent "$@"
