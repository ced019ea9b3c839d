#!/usr/bin/env bash
# The project's environment: .venv with the exact pins of requirements*.txt.
set -euo pipefail
stamp=".venv/.stamp-$(cat requirements.txt requirements-nodeps.txt | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && { echo ".venv up to date"; exit 0; }
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -qq --disable-pip-version-check -r requirements.txt
.venv/bin/pip install -qq --disable-pip-version-check --no-deps -r requirements-nodeps.txt
rm -f .venv/.stamp-*; touch "$stamp"
