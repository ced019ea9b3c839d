#!/usr/bin/env bash
# The project's environment: .venv with the exact pins of requirements*.txt, installed by uv (pip_install.sh), which
# pip bootstraps at its pinned version.
set -euo pipefail
stamp=".venv/.stamp-$(cat requirements.txt requirements-nodeps.txt scripts/setup/pip_install.sh | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && { echo ".venv up to date"; exit 0; }
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -qq --disable-pip-version-check "$(grep -E '^uv==' requirements.txt | cut -d' ' -f1)"
bash scripts/setup/pip_install.sh .venv/bin/python -r requirements.txt
bash scripts/setup/pip_install.sh .venv/bin/python --no-deps -r requirements-nodeps.txt
rm -f .venv/.stamp-*; touch "$stamp"
