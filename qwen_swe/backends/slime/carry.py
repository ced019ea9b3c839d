"""How our settings reach slime's Ray actors: on slime's own ``args``, through ``--custom-config-path``.

slime ``setattr``s each key of that YAML file onto ``args``, and ``args`` travels with every Ray actor, so the data
source gets ``instance_list`` and the rollout function the whole settings wherever Ray runs them, whatever
environment those workers inherited.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from qwen_swe.backends.slime.train_args import EXTRA_ARGS_FILE
from qwen_swe.config.settings import Settings
from qwen_swe.errors import ConfigError

SETTINGS_FILE = "settings.json"


def extra_args_files(s: Settings) -> dict[str, str]:
    """The --custom-config-path file, path -> text (YAML: slime reads it with ``yaml.safe_load``)."""
    extra = {"instance_list": str(s.instance_list) if s.instance_list else None, "qwen_swe_settings": s.to_dict()}
    return {str(s.output_dir / EXTRA_ARGS_FILE): yaml.safe_dump(extra, sort_keys=True)}


def settings_from_slime_args(args: Any) -> Settings:
    """The run's settings inside slime's Ray actors: ``args.qwen_swe_settings`` (put there by the launcher through
    --custom-config-path; ``args`` travels with every actor, wherever Ray runs it), else ``{--save}/settings.json``;
    slime's own sizes win. Never the environment: Ray workers may not have inherited the launcher's."""
    stored = getattr(args, "qwen_swe_settings", None)
    if isinstance(stored, dict):
        settings = Settings.from_dict(stored)
    else:
        path = Path(str(getattr(args, "save", "") or "")) / SETTINGS_FILE
        if not path.is_file():
            raise ConfigError(
                f"slime's args carry no qwen_swe_settings and {path} does not exist: start slime "
                "through `BACKEND=slime bash examples/qwen_swe/run_grpo.sh`, which writes both"
            )
        settings = Settings.from_json(path)
    sizes = {
        "n_samples": getattr(args, "n_samples_per_prompt", None),
        "rollout_batch_size": getattr(args, "rollout_batch_size", None),
    }
    return settings.replace(**{k: int(v) for k, v in sizes.items() if v})
