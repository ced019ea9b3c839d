#!/usr/bin/env bash
# Debian packages and a running Docker engine (no bridge: containers use host or no network).
# Storage: overlay2 shares an image's files among its containers; vfs copies the whole image into every new
# container (for a 271 MB task image, about 6 s of dockerd CPU per container on this kind of machine, against
# 0.05 s with overlay2: benchmarks/bench_storage.py). So overlay2 where the kernel has it, and vfs where it has not or
# overlay2 does not start; CI starts it the same way. DOCKER_STORAGE_DRIVER=vfs|overlay2 chooses.
set -euo pipefail

storage_driver() {  # storage_driver [FILESYSTEMS]: the storage driver a new dockerd gets
  local fs="${1:-/proc/filesystems}"
  case "${DOCKER_STORAGE_DRIVER:-}" in
    vfs|overlay2) echo "$DOCKER_STORAGE_DRIVER" ;;
    "") if grep -qw overlay "$fs" 2>/dev/null; then echo overlay2; else echo vfs; fi ;;
    *) echo "DOCKER_STORAGE_DRIVER=$DOCKER_STORAGE_DRIVER: use vfs or overlay2 (or leave it unset)" >&2; return 1 ;;
  esac
}

start_dockerd() {  # start_dockerd DRIVER LOG: 0 once `docker info` answers, 1 if the daemon died or never answered
  nohup dockerd --iptables=false --ip6tables=false --bridge=none --storage-driver="$1" >>"$2" 2>&1 &
  local pid=$!
  for _ in $(seq 60); do
    timeout 5 docker info >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 1
  done
  kill "$pid" 2>/dev/null || true
  return 1
}

main() {
  local need=()
  command -v dockerd >/dev/null || need+=(docker.io)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  command -v chromium >/dev/null || need+=(chromium)  # the run viewer's browser test (headless)
  if ((${#need[@]})); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  if ! timeout 10 docker info >/dev/null 2>&1; then
    local log="${QWEN_SWE_HOME:-$HOME/.cache/qwen_swe}/dockerd.log" driver
    mkdir -p "$(dirname "$log")"
    driver="$(storage_driver)"
    if ! start_dockerd "$driver" "$log"; then
      if [[ "$driver" != overlay2 || -n "${DOCKER_STORAGE_DRIVER:-}" ]]; then
        echo "dockerd did not start; see $log" >&2
        exit 1
      fi
      echo "dockerd with overlay2 did not start (see $log); falling back to vfs" >&2
      start_dockerd vfs "$log" || { echo "dockerd did not start; see $log" >&2; exit 1; }
    fi
  fi
  echo "docker $(docker version --format '{{.Server.Version}}'), storage $(docker info --format '{{.Driver}}')"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main
fi
