#!/usr/bin/env bash
# Debian packages and a running Docker engine (vfs storage, no bridge: containers use host or no network).
set -euo pipefail
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v chromium >/dev/null || need+=(chromium)  # the run viewer's browser test (headless)
if ((${#need[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! timeout 10 docker info >/dev/null 2>&1; then
  log="${QWEN_SWE_HOME:-$HOME/.cache/qwen_swe}/dockerd.log"
  mkdir -p "$(dirname "$log")"
  nohup dockerd --iptables=false --ip6tables=false --bridge=none --storage-driver=vfs >"$log" 2>&1 &
  for _ in $(seq 60); do timeout 5 docker info >/dev/null 2>&1 && break; sleep 1; done
  timeout 10 docker info >/dev/null 2>&1 || { echo "dockerd did not start; see $log" >&2; exit 1; }
fi
echo "docker $(docker version --format '{{.Server.Version}}')"
