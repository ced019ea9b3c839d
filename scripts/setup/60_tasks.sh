#!/usr/bin/env bash
# The local task pack's Docker images (debootstrap base, Python/git/pytest layer, one image per task).
# Idempotent: every image carries a hash of its inputs and is reused while they are unchanged; the
# debootstrap tarball is cached under $QWEN_SWE_HOME/rootfs. DEBIAN_MIRROR overrides the apt mirror.
set -euo pipefail
.venv/bin/python -m qwen_swe.data.taskpack build
