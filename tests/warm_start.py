"""A small warm start for the tests that run the embedded default.

The default's own policy (48 demonstrations, 12 SFT steps) takes about half an hour to build, so the test
command's set-up (``setup.sh --tests``) leaves it to the main job and builds this one instead (``70_warmstart.sh
--tests``), before any test: the same stage, 2 demonstrations and 1 SFT step, cached by its key like any other. The
tests train it in groups of 2 x 2, the sizes they were written for.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import cache
from pathlib import Path

from qwen_swe.paths import REPO_ROOT


@cache
def small_warm_start() -> Path:
    proc = subprocess.run(
        [sys.executable, "-m", "qwen_swe.warmstart", "build", "--demos", "2", "--steps", "1", "--batch", "2"],
        cwd=REPO_ROOT,
        text=True,
        capture_output=True,
        timeout=1800,
    )
    assert proc.returncode == 0, f"warm start failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return Path(proc.stdout.splitlines()[-1])


def small_run_env(out: Path, run_id: str, num_rollouts: int, **settings: str) -> dict[str, str]:
    """The environment of a test's ``run_grpo.sh`` on the embedded default: this process's, without a server, model
    or dataset of the caller's, with the small warm start (unless ``settings`` name a MODEL), groups of 2 x 2 and
    ``settings`` (env names)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_URL", "MODEL", "DATASET")}
    env.update(
        OUTPUT_DIR=str(out),
        NUM_ROLLOUTS=str(num_rollouts),
        RUN_ID=run_id,
        ROLLOUT_BATCH_SIZE="2",
        N_SAMPLES="2",
        **settings,
    )
    env.setdefault("MODEL", str(small_warm_start()))
    return env
