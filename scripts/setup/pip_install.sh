#!/usr/bin/env bash
# `uv pip install ARGS` into the environment of PYTHON, from the sources pip is configured with:
#   bash scripts/setup/pip_install.sh PYTHON [uv pip install args]
# uv (pinned in requirements.txt, installed into .venv by 20_python.sh) unpacks wheels in parallel and links them from
# its cache (~/.cache/uv), where pip unpacks them one by one on every fresh checkout. It does not read pip's
# configuration, so this passes it on: pip's index-url, extra-index-url, find-links and constraint (its config files
# and PIP_* env vars, as `pip config list` reports them), TORCH_INDEX_URL, and pip's cert bundle. --index-strategy
# unsafe-best-match is pip's own rule, the best version over all sources: the CPU build torch==2.13.0+cpu lies in a
# find-links folder while PyPI has torch 2.13.0 too. --compile-bytecode, as pip does: with PYTHONDONTWRITEBYTECODE
# set, nothing would compile the modules later.
set -euo pipefail
python="${1:?usage: pip_install.sh PYTHON [uv pip install args]}"
shift
[ -x .venv/bin/uv ] || { echo "pip_install.sh: .venv/bin/uv is missing; run scripts/setup/20_python.sh" >&2; exit 1; }
# pip's settings as `pip config list` reports them (key='value', values split on blanks): one "key<TAB>value" line each
settings="$(.venv/bin/pip config list 2>/dev/null | .venv/bin/python -c '
import ast, sys
wanted = ("index-url", "extra-index-url", "find-links", "constraint", "cert")
for line in sys.stdin:
    key, _, value = line.strip().partition("=")
    if key.rsplit(".", 1)[-1] in wanted and value:
        for item in ast.literal_eval(value).split():
            print(key.rsplit(".", 1)[-1], item, sep="\t")
' | sort -u)"
sources=()
while IFS=$'\t' read -r key value; do
  case "$key" in
    cert) [ -n "${SSL_CERT_FILE:-}" ] || export SSL_CERT_FILE="$value" ;;  # uv's TLS trusts the bundle pip trusts
    ?*) sources+=("--$key" "$value") ;;
  esac
done <<<"$settings"
[ -n "${TORCH_INDEX_URL:-}" ] && sources+=(--extra-index-url "$TORCH_INDEX_URL")
exec .venv/bin/uv pip install --quiet --python "$python" --index-strategy unsafe-best-match --compile-bytecode \
  "${sources[@]}" "$@"
