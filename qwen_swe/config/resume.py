"""A re-run into an OUTPUT_DIR that holds a checkpoint resumes the run with the settings it was started with.

The run's settings.json is the truth. A setting the environment (or a flag) does not give keeps its saved value,
never a default or the embedded profile's: forgetting VLLM_URL must not move a run onto the embedded server with
another learning rate and reward. A setting given differently is refused before anything starts, unless it may change
by nature (``resume="free"`` on its field: the run's length, what it writes out), belongs to this invocation
(``resume="new"``: where the run is, the override itself, what the run fills in), or is named in RESUME_OVERRIDE.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from qwen_swe.config.fields import env_name, from_json_value, to_json_value
from qwen_swe.config.profile import with_profile
from qwen_swe.config.settings import SECTIONS, Settings, all_fields
from qwen_swe.errors import ConfigError


def run_folder(given: Mapping[str, Any]) -> Path:
    """The OUTPUT_DIR the ``given`` settings point at: the folder a resume reads its settings from."""
    return Path(given.get("output_dir") or cast(Path, Settings.__dataclass_fields__["output_dir"].default))


def resumed_settings(saved_file: Path, given: Mapping[str, Any]) -> tuple[Settings, str]:
    """The resumed run's settings: ``saved_file``'s, with the ``given`` flat values (``given_settings``) that may
    differ from them. Also returns the line that tells the user, naming the saved values kept where a fresh run
    would have used others."""
    saved = _saved_values(saved_file)
    policy = {f.name: f.metadata["resume"] for f in all_fields()}
    changed = {
        name: (to_json_value(saved[name]), to_json_value(value))
        for name, value in given.items()
        if policy[name] == "keep" and to_json_value(value) != to_json_value(saved[name])
    }
    allowed = _override_names(given.get("resume_override"))
    refused = {name: pair for name, pair in changed.items() if name not in allowed}
    if refused:
        raise ConfigError(_refusal(saved_file, refused))
    fresh = {f.name: f.default for f in all_fields() if policy[f.name] == "new"}
    kept = {name: value for name, value in saved.items() if policy[name] != "new"}
    settings = Settings.build(**{**kept, **fresh, **given})
    would = {**{f.name: f.default for f in all_fields()}, **with_profile(given)}  # a fresh run's
    differ = [
        f"{env_name(name)}={_show(to_json_value(value))}"
        for name, value in kept.items()
        if name not in given and to_json_value(value) != to_json_value(would[name])
    ]
    return settings, (
        f"resuming {saved_file.parent} with the settings in {saved_file.name}"
        + ("; not given here, kept: " + ", ".join(differ) if differ else "")
    )


def _saved_values(path: Path) -> dict[str, Any]:
    """settings.json's values by flat name; a setting it does not hold (written by an older version) has its
    default."""
    try:
        data = json.loads(path.read_text())
        flat = {
            **{k: v for k, v in data.items() if k not in SECTIONS},
            **{k: v for name in SECTIONS for k, v in data.get(name, {}).items()},
        }
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"cannot read the run's settings {path} ({exc}); fix or delete it to resume with the "
            "settings of this environment"
        ) from None
    return {f.name: from_json_value(f, flat[f.name]) if f.name in flat else f.default for f in all_fields()}


def _override_names(raw: str | None) -> set[str]:
    names = {name.strip().upper() for name in (raw or "").split(",") if name.strip()}
    unknown = sorted(names - {env_name(f.name) for f in all_fields()})
    if unknown:
        raise ConfigError(
            f"RESUME_OVERRIDE names {', '.join(unknown)}: not a setting; name settings as their env "
            "variables, comma-separated (LR,VLLM_URL)"
        )
    return {name.lower() for name in names}


def _refusal(saved_file: Path, refused: Mapping[str, tuple[Any, Any]]) -> str:
    lines = [f"  {env_name(name)}: saved {_show(old)}, given {_show(new)}" for name, (old, new) in refused.items()]
    names = ",".join(env_name(name) for name in refused)
    return (
        f"{saved_file.parent} holds a checkpoint, so this run resumes with the settings in {saved_file}; these "
        "are given differently:\n" + "\n".join(lines) + f"\nunset them to resume as saved, set RESUME_OVERRIDE="
        f"{names} to change them on resume, or give a new OUTPUT_DIR for a new run"
    )


def _show(value: Any) -> str:
    return "unset" if value is None else repr(value) if value == "" else str(value)
