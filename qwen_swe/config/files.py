"""Settings from a YAML or TOML file (``--config run.yaml``): the layer under the environment and the flags.

A file names settings as the env vars do, in any case, with ``-`` or ``_`` (``rollout_batch_size``,
``ROLLOUT_BATCH_SIZE``, ``rollout-batch-size``), either flat or inside a table of the section that owns them
(``train: {lr: 2e-5}``, the layout of settings.json). A key that is not a setting is an error naming the nearest
one: a misspelt key would otherwise be ignored and the run would use the default. Values go through the same
conversion and checks as the env vars' (``fields.convert``), so the messages are the same, prefixed with the file.

A layer on the project's own fields rather than pydantic-settings: that would mean re-declaring every section as a
model, with its own error messages in place of the ones that name the env var and the fix, and it has no notion of
the embedded profile (a layer applied only when no VLLM_URL is given anywhere), of where each value came from, or of
the resume rules keyed on each field's metadata. Reading a file is the small part; those are what the project needs.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import yaml

from qwen_swe.config.environment import nearest
from qwen_swe.config.fields import convert, env_name
from qwen_swe.errors import ConfigError

SUFFIXES = {".yaml": "YAML", ".yml": "YAML", ".toml": "TOML"}
CUTOFF = 0.6  # every key of a file is meant to be a setting: a looser match than the environment's 0.85


def read_file(
    path: Path,
    fields_by_name: Mapping[str, dataclasses.Field],
    sections: Mapping[str, Collection[str]],
    internal: Collection[str] = (),
) -> dict[str, Any]:
    """The settings ``path`` gives, by flat field name, converted to the fields' types. ``sections`` maps each
    section's name to its field names; ``internal`` fields (filled in by the run) cannot be given."""
    data = _load(path)
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = _name(key)
        if name in sections and isinstance(value, dict):
            for sub, inner in value.items():
                values[_known(path, _name(sub), fields_by_name, internal, within=sections[name])] = inner
        else:
            values[_known(path, name, fields_by_name, internal)] = value
    return {name: _value(path, fields_by_name[name], value) for name, value in values.items()}


def _load(path: Path) -> dict[str, Any]:
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ConfigError(f"--config {path}: give a .yaml, .yml or .toml file")
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"--config {path} cannot be read ({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(text) if kind == "TOML" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"--config {path} is not valid {kind}: {exc}") from None
    if data is None:  # an empty YAML file gives nothing
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: the top level must be a mapping of settings, not a {type(data).__name__}")
    return data


def _name(key: Any) -> str:
    return str(key).strip().lower().replace("-", "_")


def _known(
    path: Path,
    name: str,
    fields_by_name: Mapping[str, dataclasses.Field],
    internal: Collection[str],
    within: Collection[str] | None = None,
) -> str:
    allowed = [n for n in (within if within is not None else fields_by_name) if n not in internal]
    if name in allowed:
        return name
    if name in internal:
        raise ConfigError(f"{path}: {env_name(name)} is filled in by the run, not a setting to give; remove it")
    near = nearest(name, allowed, cutoff=CUTOFF)
    if within is not None and name in fields_by_name:
        hint = f"{name} belongs to another section; move it to the top level"
    else:
        hint = f"did you mean {near}?" if near else "`--help` lists every setting"
    raise ConfigError(f"{path}: {name!r} is not a setting; {hint}")


def _value(path: Path, f: dataclasses.Field, value: Any) -> Any:
    """A file's typed value as the env var's string would be: YAML's ``true``, ``4`` or ``2e-5`` and a string
    pass the same checks, so ``n_samples: 2.5`` fails as ``N_SAMPLES=2.5`` does."""
    if isinstance(value, list):  # a list where the env var takes commas (RESUME_OVERRIDE, INFERENCE_GPUS)
        value = ",".join(str(v) for v in value)
    if value is None:
        value = ""  # null unsets an optional setting, as an empty env var does
    elif isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, (dict, tuple)):
        raise ConfigError(f"{path}: {f.name} takes one value, not a {type(value).__name__}")
    try:
        return convert(f, str(value))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
