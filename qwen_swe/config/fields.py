"""The machinery every settings section shares: a field is ``FOO_BAR`` in the environment, ``--foo-bar`` on the
command line, and carries its help, bounds and choices, so a bad value fails at start naming the variable."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import field, fields
from pathlib import Path
from typing import Any

from qwen_swe.errors import ConfigError

# What a re-run into a folder with a checkpoint does with a setting (config/resume.py): "keep" its saved value (a
# different one is refused unless RESUME_OVERRIDE names it); "free": a given value wins, as the setting changes
# neither what is learned nor what the results mean (the run's length, what it writes out); "new": this invocation's
# value, never the saved one (where the run is, the override itself).
RESUME = ("keep", "free", "new")


def opt(
    default: Any,
    help: str,
    choices: Sequence[str] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    resume: str = "keep",
    by_run: bool = False,
) -> Any:
    """A setting; ``by_run`` marks one the run fills in itself (never the user's, never carried over on resume)."""
    assert resume in RESUME, resume
    return field(
        default=default,
        metadata={
            "help": help,
            "choices": choices,
            "min": minimum,
            "max": maximum,
            "resume": "new" if by_run else resume,
            "by_run": by_run,
        },
    )


def env_name(name: str) -> str:
    return name.upper()


def describe(f: dataclasses.Field, profile: Any = None) -> str:
    """A setting's ``--help`` line: its meaning, env var, default, the embedded profile's value and its choices."""
    parts = [f"env {env_name(f.name)}", f"default: {_shown(f.default)}"]
    if profile is not None:
        parts.append(f"embedded default: {_shown(profile)}")
    if f.metadata.get("choices"):
        parts.append(f"one of: {', '.join(f.metadata['choices'])}")
    # argparse formats help with %, so a literal percent sign in a help string must be doubled
    return f"{f.metadata['help']} ({'; '.join(parts)})".replace("%", "%%")


def _shown(value: Any) -> str:
    return "unset" if value is None else repr(value) if value == "" else str(value)


def validate(section: Any) -> None:
    """Check every field of a settings dataclass against its metadata; the error names the env var."""
    for f in fields(section):
        if "help" not in f.metadata:
            continue
        value = getattr(section, f.name)
        lo, hi, choices = f.metadata.get("min"), f.metadata.get("max"), f.metadata.get("choices")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{env_name(f.name)}={value} is not a finite number: {f.metadata['help']}")
        if lo is not None and value is not None and value < lo:
            raise ConfigError(f"{env_name(f.name)}={value} is too small: {f.metadata['help']}; use a value >= {lo}")
        if hi is not None and value is not None and value > hi:
            raise ConfigError(f"{env_name(f.name)}={value} is too large: {f.metadata['help']}; use a value <= {hi}")
        if choices and value not in choices:
            raise ConfigError(f"{env_name(f.name)}={value!r} is not one of {', '.join(choices)}")


def convert(f: dataclasses.Field, raw: str) -> Any:
    """Turn one raw string (env var or flag) into the field's type, with an error naming the variable."""
    kind = str(f.type)
    if raw == "" and "None" in kind:
        return None
    try:
        if kind.startswith("bool"):
            low = raw.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("float"):
            return float(raw)
        if kind.startswith("Path"):
            return Path(raw).expanduser()
        return raw
    except ValueError:
        want = kind.split(" ")[0].split("|")[0]
        raise ConfigError(f"{env_name(f.name)}={raw!r} is not a valid {want}: {f.metadata['help']}") from None


def from_json_value(f: dataclasses.Field, value: Any) -> Any:
    """A value read back from settings.json: JSON has no Path, so paths come back from strings."""
    if value is not None and str(f.type).startswith("Path"):
        return Path(value)
    return value


def to_json_value(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value
