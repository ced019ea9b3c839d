"""REPORT_TO under slime: its own trackers, pointed where the built-in trainer's go.

- ``tensorboard``: ``--use-tensorboard``; slime's writer takes its folder from ``TENSORBOARD_DIR``, set to
  ``OUTPUT_DIR/tb`` in the plan's environment (the actors of the Ray cluster train.py starts inherit it). A worker
  of a cluster started elsewhere may not: the project and experiment names keep slime from raising there (it then
  writes ``tensorboard_log/qwen-swe/<run>`` in that worker's folder).
- ``wandb``: ``--use-wandb`` with its files under ``OUTPUT_DIR/wandb`` and the run named after the run folder, as
  the built-in sink names it. ``WANDB_PROJECT``, ``WANDB_ENTITY`` and ``WANDB_MODE`` become flags, since slime's
  actors read them from ``args``, not from an environment they may not have inherited. A group is always given:
  slime concatenates it into the run name. A resumed run starts a new wandb run in the same group (slime sets
  ``args.wandb_run_id`` from the run it starts, so it cannot continue one).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from qwen_swe.config.settings import Settings
from qwen_swe.train.reporting import DEFAULT_PROJECT, parse_report_to

WANDB_MODES = ("online", "offline", "disabled")  # slime's --wandb-mode choices


def reporting_args(s: Settings, environ: Mapping[str, str]) -> tuple[list[str], dict[str, str], list[str]]:
    """(train.py flags, environment, problems) for REPORT_TO; ``environ``: where WANDB_* are read."""
    out, name = Path(s.output_dir), Path(s.output_dir).resolve().name
    argv: list[str] = []
    env: dict[str, str] = {}
    problems: list[str] = []
    names = parse_report_to(s.train.report_to)
    if "tensorboard" in names:
        argv += ["--use-tensorboard", "--tb-project-name", DEFAULT_PROJECT, "--tb-experiment-name", name]
        env["TENSORBOARD_DIR"] = str(out / "tb")
    if "wandb" in names:
        project = environ.get("WANDB_PROJECT") or DEFAULT_PROJECT
        argv += ["--use-wandb", "--wandb-dir", str(out / "wandb"), "--wandb-project", project]
        argv += ["--wandb-group", name, "--disable-wandb-random-suffix"]
        if entity := environ.get("WANDB_ENTITY"):
            argv += ["--wandb-team", entity]
        if mode := environ.get("WANDB_MODE"):
            if mode in WANDB_MODES:
                argv += ["--wandb-mode", mode]
            else:
                problems.append(
                    f"WANDB_MODE={mode}: slime's --wandb-mode takes {', '.join(WANDB_MODES)}; set one of them, "
                    "or drop wandb from REPORT_TO"
                )
    return argv, env, problems
