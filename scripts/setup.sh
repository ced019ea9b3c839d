#!/usr/bin/env bash
# Everything a fresh machine of this kind (Debian, Python 3.11, root, no GPU) needs for the run and the
# tests. Idempotent: each step keeps a stamp and is skipped when its inputs have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
for step in scripts/setup/[0-9]*.sh; do
  echo "== setup: ${step##*/}"
  bash "$step"
done
echo "== setup: done"
