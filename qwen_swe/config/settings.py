"""One frozen run settings object, composed of the sections each component owns.

Every field ``foo_bar`` of the run or of a section is read from the environment variable ``FOO_BAR`` and the flag
``--foo-bar`` (flags win). The settings are parsed once per process, in its entry point; other processes of the
run (trainer ranks, slime's actors) read the ``settings.json`` the entry point wrote, never the environment.
Bad values fail at start with a message naming the variable and the fix, never deep inside a run.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from qwen_swe.agent.settings import AgentSettings
from qwen_swe.config.environment import check_environment
from qwen_swe.config.fields import convert, describe, env_name, from_json_value, opt, to_json_value, validate
from qwen_swe.config.files import read_file
from qwen_swe.config.hardware import PROFILE_SHOWN
from qwen_swe.config.profile import EMBEDDED_PROFILE, PROFILES, with_profile
from qwen_swe.errors import ConfigError
from qwen_swe.inference.settings import DEFAULT_MODEL, InferenceSettings
from qwen_swe.paths import embedded_model_dir, embedded_tasks
from qwen_swe.plan.settings import PlacementSettings
from qwen_swe.reward.settings import RewardSettings
from qwen_swe.rollout.settings import RolloutSettings
from qwen_swe.sandbox.settings import SandboxSettings
from qwen_swe.train.settings import TrainSettings

DEFAULT_DATASET = "princeton-nlp/SWE-bench_Verified"
SECTIONS: dict[str, type] = {
    "inference": InferenceSettings,
    "sandbox": SandboxSettings,
    "agent": AgentSettings,
    "reward": RewardSettings,
    "rollout": RolloutSettings,
    "train": TrainSettings,
    "placement": PlacementSettings,
}
CONFIG_DEST = "config_file"  # the parser's --config: not a setting itself, so never in settings.json
PRECEDENCE = (
    "a flag wins over its env var, which wins over the --config file, which wins over the embedded "
    "profile (applied when no VLLM_URL is given anywhere, or with PROFILE=embedded), which wins over the default"
)


@dataclass(frozen=True)
class Settings:
    # --- the seed's settings (the rest of them live in the sections) ---------------------------
    num_rollouts: int = opt(
        10, "number of GRPO steps (rollout + train); raise it on resume to extend a run", minimum=1, resume="free"
    )
    rollout_batch_size: int = opt(4, "groups (instances) per rollout", minimum=1)
    n_samples: int = opt(2, "samples per group (GRPO needs at least 2)", minimum=2)
    output_dir: Path = opt(
        Path(tempfile.gettempdir()) / "qwen_swe_grpo",
        "run folder: checkpoints, metrics, dumps; "
        "re-running into one that holds a checkpoint resumes with its settings.json",
        resume="new",
    )
    dataset: str | None = opt(
        None,
        "HF dataset name or local .json/.jsonl/.parquet; default the localized generated train tasks of seed 0 in "
        f"the embedded default, else {DEFAULT_DATASET}",
    )
    instance_list: Path | None = opt(None, "file of instance ids, one a line")
    seed: int = opt(1234, "data shuffle and sampling seed")

    # --- run ---------------------------------------------------------------------------------
    backend: str = opt("fsdp", "trainer: built-in FSDP2 or slime's train.py", choices=("fsdp", "slime"))
    profile: str = opt(
        "auto",
        "embedded: the embedded default's values, tasks, policy and agent prompt also against VLLM_URL's server "
        "(one kept warm: `qwen-swe serve --model embedded:FOLDER`); auto: only when no VLLM_URL is given",
        choices=PROFILES,
    )
    slime_dir: Path | None = opt(None, "slime checkout (BACKEND=slime)")
    slime_python: str | None = opt(
        None, "interpreter that runs slime's train.py (BACKEND=slime); default: the current one"
    )
    slime_gpus: int | None = opt(None, "GPUs for slime's FSDP actor (BACKEND=slime); default: all visible", minimum=1)
    slime_tp: int = opt(1, "BACKEND=slime on slime 0.3.x: Megatron's tensor-parallel size", minimum=1)
    slime_ep: int = opt(1, "BACKEND=slime on slime 0.3.x: Megatron's expert-parallel size (MoE models)", minimum=1)
    allow_frozen_server: bool = opt(
        False, "BACKEND=slime: start even when the server cannot take new weights (trains against a frozen policy)"
    )
    run_id: str | None = opt(None, "label for containers and logs; default derived from OUTPUT_DIR")
    eval_samples: int = opt(1, "evaluation: attempts per instance (pass@k up to this k)", minimum=1)
    eval_interval: int = opt(
        0, "training: evaluate every N steps on EVAL_DATASET (0 = never)", minimum=0, resume="free"
    )
    eval_dataset: str | None = opt(None, "training: the evaluation rows (HF name or local file); default DATASET")
    eval_instance_list: Path | None = opt(None, "training: file of evaluation instance ids, one a line")
    stop_timeout: float = opt(
        30.0,
        "on SIGTERM/SIGINT, seconds the trainer and the server get to stop before "
        "SIGKILL (a second signal kills at once)",
        minimum=1.0,
        resume="free",
    )
    resume_override: str | None = opt(
        None,
        "resuming (OUTPUT_DIR holds a checkpoint): settings, comma-separated env "
        "names (LR,VLLM_URL), that may differ from the run's settings.json; any "
        "other given differently is refused",
        resume="new",
    )

    # --- the components' sections ------------------------------------------------------------
    inference: InferenceSettings = field(default_factory=InferenceSettings)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    reward: RewardSettings = field(default_factory=RewardSettings)
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    train: TrainSettings = field(default_factory=TrainSettings)
    placement: PlacementSettings = field(default_factory=PlacementSettings)

    def __post_init__(self) -> None:
        validate(self)
        for name, listed in (("INSTANCE_LIST", self.instance_list), ("EVAL_INSTANCE_LIST", self.eval_instance_list)):
            if listed is not None and not (Path(listed).is_file() and os.access(listed, os.R_OK)):
                raise ConfigError(f"{name}={listed} cannot be read: give a file of instance ids, one a line")
        if self.dataset and _looks_local(self.dataset) and not Path(self.dataset).expanduser().exists():
            raise ConfigError(
                f"DATASET={self.dataset} does not exist: give a .json, .jsonl or .parquet file, "
                "a Hugging Face dataset folder, or a Hugging Face dataset name"
            )
        if self.backend == "slime" and self.slime_dir is None:
            raise ConfigError("BACKEND=slime needs SLIME_DIR: point it at a slime v0.2.2 checkout")
        if self.train.partial_rollouts and self.rollout.rollout_backend == "ray":
            raise ConfigError(
                "PARTIAL_ROLLOUTS=1 with ROLLOUT_BACKEND=ray: the Ray workers' proxies are not told of a sync in "
                "flight, so a model call spanning one could not record the new version; use ROLLOUT_BACKEND=local "
                "or unset PARTIAL_ROLLOUTS"
            )
        if self.rollout.dynamic_sampling and (self.backend != "fsdp" or self.train.max_staleness):
            raise ConfigError(
                "DYNAMIC_SAMPLING=1 works with BACKEND=fsdp and MAX_STALENESS=0 only (slime has "
                "its own --dynamic-sampling-filter-path); unset one of them"
            )

    # --- building ------------------------------------------------------------------------------
    @classmethod
    def build(cls, **values: Any) -> Settings:
        """Settings from flat field names (``max_turns=8``, ``vllm_url=...``): each goes to its section."""
        run, sections = _split(values)
        return cls(**run, **{name: SECTIONS[name](**kw) for name, kw in sections.items()})

    def replace(self, **changes: Any) -> Settings:
        """A copy with flat field names changed, each in its own section."""
        run, sections = _split(changes)
        return dataclasses.replace(
            self, **run, **{name: dataclasses.replace(getattr(self, name), **kw) for name, kw in sections.items()}
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settings:
        """The inverse of ``to_dict`` (what settings.json holds); no environment, no profile."""
        try:
            run = {f.name: from_json_value(f, data[f.name]) for f in _run_fields() if f.name in data}
            parts = {
                name: sec(
                    **{
                        f.name: from_json_value(f, data[name][f.name])
                        for f in fields(sec)
                        if f.name in data.get(name, {})
                    }
                )
                for name, sec in SECTIONS.items()
            }
        except (TypeError, KeyError) as exc:
            raise ConfigError(
                f"settings file is not in this version's layout ({exc}); delete it or rerun "
                "the run's entry point to rewrite it"
            ) from None
        return cls(**run, **parts)

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> Settings:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read settings file {path}: {exc}; the run's entry point writes it") from None
        return cls.from_dict(data)

    # --- derived values ----------------------------------------------------------------------
    @property
    def embedded(self) -> bool:
        """The embedded default: the generated train tasks, the warm-started SmolLM2 and its compact agent prompt, on
        the CPU server the run starts (no VLLM_URL) or, with PROFILE=embedded, on VLLM_URL's."""
        return self.profile == "embedded" or self.inference.starts_server

    @property
    def dataset_source(self) -> str:
        return self.dataset or (str(embedded_tasks()) if self.embedded else DEFAULT_DATASET)

    @property
    def model_name(self) -> str:
        """The model to train and serve: MODEL, else the embedded SmolLM2 folder or the seed's Qwen3-Coder."""
        return self.inference.model or (str(embedded_model_dir()) if self.embedded else DEFAULT_MODEL)

    @property
    def offline(self) -> bool:
        """The trainer reads its samples from disk (the warm start's demonstrations, or replayed rollouts): no
        server, no task images."""
        return self.train.train_mode == "sft" or self.train.load_rollout_data is not None

    @property
    def logprob_temperature(self) -> float:
        """The temperature the trainer's log-probs are taken at, the one the trained tokens were sampled at: the
        agent's in GRPO (slime's ``--rollout-temperature``); 1 in SFT, whose loss is the demonstrations'
        likelihood, and for greedy sampling, which has no distribution."""
        t = self.agent.temperature
        return 1.0 if self.train.train_mode == "sft" or t <= 0 else t

    @property
    def uses_served_logprobs(self) -> bool:
        """Whether the trainer takes the server's log-probs as the behaviour policy's. Not under a forced tool
        call: vLLM reports them after its grammar mask, not the policy's own; with one optimizer step per batch
        the trainer's recomputation is the behaviour policy (ratio 1)."""
        return self.agent.tool_choice != "required"

    @property
    def label(self) -> str:
        digest = hashlib.sha1(str(self.output_dir.resolve()).encode()).hexdigest()[:8]
        return self.run_id or f"qwen-swe-{digest}"

    # --- the one serialized form ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: to_json_value(getattr(self, f.name)) for f in _run_fields()}
        for name in SECTIONS:
            section = getattr(self, name)
            out[name] = {f.name: to_json_value(getattr(section, f.name)) for f in fields(section)}
        return out

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name (= the env var in lower case)."""
        out = {k: v for k, v in self.to_dict().items() if k not in SECTIONS}
        for name in SECTIONS:
            out.update(self.to_dict()[name])
        return out

    def write(self, run_dir: Path) -> Path:
        """Write the resolved settings into the run folder as JSON (atomically); child processes read it."""
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / "settings.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        tmp.replace(path)
        return path


def _run_fields() -> list[dataclasses.Field]:
    return [f for f in fields(Settings) if f.name not in SECTIONS]


def all_fields() -> list[dataclasses.Field]:
    """Every setting: the run's own fields, then each section's."""
    return _run_fields() + [f for sec in SECTIONS.values() for f in fields(sec)]


def field_groups() -> list[tuple[str, list[dataclasses.Field]]]:
    """The settings by owner: the run's own, then each section's (the order of ``--help`` and the settings page)."""
    return [("run", _run_fields())] + [(name, list(fields(sec))) for name, sec in SECTIONS.items()]


def _split(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    owner = {f.name: name for name, sec in SECTIONS.items() for f in fields(sec)}
    run_names = {f.name for f in _run_fields()}
    run: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        if key in owner:
            sections.setdefault(owner[key], {})[key] = value
        elif key in run_names:
            run[key] = value
        else:
            raise ConfigError(f"unknown setting {key!r} ({env_name(key)}); `--help` lists them all")
    return run, sections


def _looks_local(source: str) -> bool:
    return source.endswith((".json", ".jsonl", ".parquet")) or source.startswith((".", "/", "~"))


def build_parser(add_help: bool = True) -> argparse.ArgumentParser:
    """Every setting as a flag, grouped by the section that owns it, each with its env var, default and choices."""
    parser = argparse.ArgumentParser(
        description="qwen-swe GRPO run; every flag also reads the env var in capitals",
        usage="%(prog)s [--config FILE] [--SETTING VALUE ...]",
        add_help=add_help,
    )
    parser.add_argument(
        "--config",
        "--run-config",
        dest=CONFIG_DEST,
        type=Path,
        default=None,
        metavar="FILE",
        help=f"a YAML or TOML file of settings; {PRECEDENCE}",
    )
    for title, group_fields in field_groups():
        group = parser.add_argument_group(f"{title} settings")
        for f in group_fields:
            group.add_argument(
                "--" + f.name.replace("_", "-"),
                dest=f.name,
                default=None,
                metavar="VALUE",
                help=describe(f, PROFILE_SHOWN.get(f.name, EMBEDDED_PROFILE.get(f.name))),
            )
    return parser


def given_settings(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings the user gave, by flat name: ``argv`` flags over ``env`` (default ``os.environ``) variables over
    the ``--config`` file. A variable or key that looks like a setting but is not one is an error naming the nearest."""
    return given_with_sources(argv, env)[0]


def given_with_sources(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """``given_settings`` and where each value came from: ``flag``, ``env`` or ``file <path>``."""
    env = os.environ if env is None else env
    internal = [f.name for f in all_fields() if f.metadata["by_run"]]
    check_environment(
        env,
        [env_name(f.name) for f in all_fields() if not f.metadata["by_run"]],
        internal=[env_name(name) for name in internal],
    )
    flags = vars(build_parser().parse_args(list(argv or [])))
    by_name = {f.name: f for f in all_fields()}
    path = flags.get(CONFIG_DEST)
    in_file = (
        read_file(path, by_name, {n: [f.name for f in fields(s)] for n, s in SECTIONS.items()}, internal)
        if path
        else {}
    )
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for f in all_fields():
        raw, source = flags.get(f.name), "flag"
        if raw is None:
            raw, source = env.get(env_name(f.name)), "env"
        if raw is not None:
            values[f.name], sources[f.name] = convert(f, raw), source
        elif f.name in in_file:
            values[f.name], sources[f.name] = in_file[f.name], f"file {path}"
    return values, sources


def load_settings(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None, profile: bool = True
) -> Settings:
    """Settings from ``env`` (default ``os.environ``) overridden by ``argv`` flags. Call it once, in an entry point.

    With ``profile`` and no VLLM_URL, unset fields take the embedded profile's values (``EMBEDDED_PROFILE``).
    """
    values = given_settings(argv, env)
    return Settings.build(**(with_profile(values) if profile else values))
