"""BACKEND=slime: run slime's own ``train.py`` with this project's data source and rollout function.

``python -m qwen_swe.backends.slime.launcher [--dry-run] [settings flags]`` reads SLIME_DIR's release
(``checkout.py``): v0.2.0 to v0.2.2 train with FSDP (``--train-backend fsdp``), v0.3.x with Megatron, after slime's
own HF -> torch_dist conversion of MODEL (``megatron.py``). ``launch_plan.py`` builds the whole plan;
``train_args.py`` the command line; ``features.py`` which settings slime honours and which it refuses;
``environment.py`` the packages, GPUs and server it needs; ``carry.py`` how our settings reach slime's Ray actors;
``reporting.py`` REPORT_TO as slime's own trackers.
``--dry-run`` prints the plan and what a real launch would refuse. Nothing heavier than PyYAML is imported on the
way to ``--check-env``, which runs inside slime's interpreter. The names below are re-exported for the callers that
know the backend by its launcher (run.py, the rollout function's tests, the contract suite).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

from qwen_swe.backends.slime.batch import batch_problems, trim_trailing_pad, validate_rollout_batch
from qwen_swe.backends.slime.carry import SETTINGS_FILE, extra_args_files, settings_from_slime_args
from qwen_swe.backends.slime.checkout import (
    PACKAGE_DIR,
    SLIME_FSDP_COMMIT,
    SLIME_FSDP_TAG,
    Release,
    detect_release,
    ensure_link,
    link_problem,
    slime_version,
)
from qwen_swe.backends.slime.environment import IMAGE_HINT, PACKAGES, check_packages, check_packages_in, check_server
from qwen_swe.backends.slime.launch_plan import LaunchPlan, Step, build_plan
from qwen_swe.backends.slime.train_args import (
    DATA_SOURCE_PATH,
    EXTRA_ARGS_FILE,
    ROLLOUT_FUNCTION_PATH,
    megatron_train_args,
    train_args,
)
from qwen_swe.config.settings import Settings, given_settings, load_settings
from qwen_swe.errors import SETUP_EXIT_CODE, ConfigError, SlimeBackendError

__all__ = [
    "DATA_SOURCE_PATH",
    "EXTRA_ARGS_FILE",
    "IMAGE_HINT",
    "PACKAGES",
    "PACKAGE_DIR",
    "ROLLOUT_FUNCTION_PATH",
    "SETTINGS_FILE",
    "SLIME_FSDP_COMMIT",
    "SLIME_FSDP_TAG",
    "LaunchPlan",
    "Release",
    "Settings",
    "SlimeBackendError",
    "Step",
    "batch_problems",
    "build_plan",
    "check_packages",
    "check_packages_in",
    "check_server",
    "detect_release",
    "ensure_link",
    "extra_args_files",
    "launch",
    "link_problem",
    "load_settings",
    "main",
    "megatron_train_args",
    "settings_from_slime_args",
    "slime_version",
    "train_args",
    "trim_trailing_pad",
    "validate_rollout_batch",
]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m qwen_swe.backends.slime.launcher [--dry-run] [settings flags]``."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--check-env", nargs="?", const="fsdp", choices=sorted(PACKAGES))
    ours, rest = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if ours.check_env:
        print(json.dumps(check_packages(ours.check_env)))
        return 0
    try:
        settings = load_settings(rest, profile=False)
        given = frozenset(given_settings(rest))
    except ConfigError as exc:
        print(f"slime backend: {exc}", file=sys.stderr)
        return SETUP_EXIT_CODE
    return launch(settings, dry_run=ours.dry_run, given=given)


def launch(settings: Settings, *, dry_run: bool = False, given: Collection[str] = ()) -> int:
    """Check everything, run the steps, then replace this process with slime's train.py (or print the plan with
    ``dry_run``). ``given``: the settings the user set (some are refused only when asked for)."""
    try:
        if settings.backend != "slime":
            settings = settings.replace(backend="slime")
        plan = build_plan(settings, given=given)
    except (ConfigError, SlimeBackendError) as exc:
        print(f"slime backend: {exc}", file=sys.stderr)
        return SETUP_EXIT_CODE
    for note in plan.warnings:
        print(f"WARNING: {note}", file=sys.stderr)
    if dry_run:
        print(plan.render())
        for problem in plan.problems:
            print(f"# would refuse: {problem}")
        return 0
    if plan.problems:
        print(
            "slime backend: refusing to start:\n  - "
            + "\n  - ".join(plan.problems)
            + f"\nInstall missing packages into {plan.argv[0]} ({IMAGE_HINT[plan.backend]}).",
            file=sys.stderr,
        )
        return SETUP_EXIT_CODE
    ensure_link(plan.cwd)
    settings.write(settings.output_dir)
    for path, text in plan.files.items():
        Path(path).write_text(text)
    env = plan.child_env(os.environ)
    for step in plan.steps:
        if step.done_when.exists():
            continue
        try:
            done = subprocess.run(step.argv, cwd=plan.cwd, env=env, timeout=step.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"slime backend: {step.why} failed: {exc}", file=sys.stderr)
            return SETUP_EXIT_CODE
        if done.returncode != 0 or not step.done_when.exists():
            print(
                f"slime backend: {step.why} failed (exit {done.returncode}; {step.done_when} not written): "
                f"{' '.join(step.argv)}",
                file=sys.stderr,
            )
            return SETUP_EXIT_CODE
    os.chdir(plan.cwd)
    os.execve(plan.argv[0], plan.argv, env)
    return 0  # pragma: no cover - execve does not return


if __name__ == "__main__":
    sys.exit(main())
