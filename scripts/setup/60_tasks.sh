#!/usr/bin/env bash
# The task images: the local task pack's (debootstrap base, Python/git/pytest layer, one image per task; the tests
# use them) and the localized generated tasks of seed 0 (the embedded default trains on their train split).
# Idempotent: every image carries a hash of its inputs and is reused while they are unchanged; the
# debootstrap tarball is cached under $QWEN_SWE_HOME/rootfs. DEBIAN_MIRROR overrides the apt mirror. The mutations'
# verdicts come with the package (qwen_swe/data/generate/verdicts, used under their exact key), so on the Python they
# were judged on a fresh set-up judges none of them (docs/guides/task-generation.md, "The shipped verdicts").
set -euo pipefail
.venv/bin/python -m qwen_swe.data.taskpack build
.venv/bin/python -m qwen_swe.data.generate --seed 0 --localized --reuse
