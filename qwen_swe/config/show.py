"""What ``--print-config`` prints and the precedence line a run logs at start: the resolved settings, each with
where its value came from, as YAML that ``--config`` reads back."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from qwen_swe.config.fields import to_json_value
from qwen_swe.config.profile import EMBEDDED_PROFILE
from qwen_swe.config.settings import Settings, all_fields, field_groups

FIELDS = {f.name: f for f in all_fields()}


def precedence(sources: Mapping[str, str], profile: bool, resumed: Path | None = None) -> str:
    """One line: the layers in the order they win, naming the file and saying whether the profile applies."""
    files = sorted({s.split(" ", 1)[1] for s in sources.values() if s.startswith("file ")})
    layers = ["flags", "env vars", f"file {files[0]}" if files else "file (none: --config FILE)"]
    if resumed is not None:
        layers.append(f"the resumed run's {resumed}")
    layers.append("embedded profile" if profile else "embedded profile (off: VLLM_URL without PROFILE=embedded)")
    layers.append("defaults")
    return "settings: " + " > ".join(layers)


def source_of(name: str, sources: Mapping[str, str], profile: bool, resumed: Path | None) -> str:
    """Where a resolved value came from: given (flag, env, file), else the resumed run's, the profile's, or the
    default."""
    if name in sources:
        return sources[name]
    if resumed is not None and FIELDS[name].metadata["resume"] != "new":  # "new" ones are never carried over
        return f"resume {resumed}"
    return "profile" if profile and name in EMBEDDED_PROFILE else "default"


def render(settings: Settings, sources: Mapping[str, str], profile: bool, resumed: Path | None = None) -> str:
    """Every setting the user can give, as ``name: value  # source`` lines grouped by section."""
    flat = settings.flat()
    internal = {f.name for f in all_fields() if f.metadata["by_run"]}
    lines = [f"# {precedence(sources, profile, resumed)}"]
    for title, group in field_groups():
        lines.append(f"\n# --- {title} settings ---")
        for f in group:
            if f.name not in internal:  # filled in by the run: not a setting to give
                value = _yaml_scalar(to_json_value(flat[f.name]))
                lines.append(f"{f.name}: {value}  # {source_of(f.name, sources, profile, resumed)}")
    return "\n".join(lines) + "\n"


def _yaml_scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).removesuffix("\n...\n").strip()
