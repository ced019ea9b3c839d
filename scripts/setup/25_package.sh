#!/usr/bin/env bash
# The project itself, installed into .venv in editable mode: `.venv/bin/qwen-swe` (the console command). --no-deps:
# its dependencies are the exact pins 20_python.sh installed; pyproject.toml only declares their ranges. Editable, so
# the checkout is what runs (as with PYTHONPATH): editing a file needs no reinstall, a new pyproject.toml does.
set -euo pipefail
stamp=".venv/.stamp-package-$(cat pyproject.toml | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && [ -x .venv/bin/qwen-swe ] && { echo "qwen-swe up to date (.venv/bin/qwen-swe)"; exit 0; }
bash scripts/setup/pip_install.sh .venv/bin/python --no-deps -e .
rm -f .venv/.stamp-package-*; touch "$stamp"
echo "installed .venv/bin/qwen-swe ($(.venv/bin/qwen-swe --version))"
