"""The launch plan for SLIME_DIR's release: what runs first (Megatron's checkpoint conversion), the train.py command
line, its environment, the file it reads, and every problem a real launch would refuse on. Nothing is executed or
written here."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_swe.backends.slime import features, megatron
from qwen_swe.backends.slime.carry import extra_args_files
from qwen_swe.backends.slime.checkout import detect_release, link_problem
from qwen_swe.backends.slime.environment import check_packages_in, check_server
from qwen_swe.backends.slime.reporting import reporting_args
from qwen_swe.backends.slime.train_args import global_batch_problems, megatron_train_args, train_args
from qwen_swe.config.settings import Settings
from qwen_swe.errors import ConfigError, SlimeBackendError
from qwen_swe.paths import python_path
from qwen_swe.plan.placement import Gpu, devices_env, nvidia_gpus, parse_gpus, resolve, span


@dataclass(frozen=True)
class Step:
    """A command run to completion before train.py, unless ``done_when`` exists (so a re-run skips it)."""

    argv: list[str]
    done_when: Path
    timeout: float
    why: str


@dataclass(frozen=True)
class LaunchPlan:
    """What the launcher executes: ``steps``, then ``argv`` in ``cwd`` with ``env`` added to the inherited
    environment."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    backend: str = "fsdp"
    steps: list[Step] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # written just before the exec
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def child_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """What the steps and the run get: ``environ`` with ``env`` added, and a PYTHONPATH of this repository, the
        slime checkout (``cwd``), then the parent's own (``paths.python_path``, as every child of ours)."""
        return {**environ, **self.env, "PYTHONPATH": python_path(self.cwd, inherited=environ.get("PYTHONPATH"))}

    def render(self) -> str:
        """Shell command lines: one variable per line, then one flag (with its value) per line."""
        lines = [f"# writes {path}" for path in self.files]
        for step in self.steps:
            lines += [f"# {step.why} (skipped when {step.done_when} exists):", self._command(step.argv)]
        return "\n".join(lines + [self._command(self.argv)])

    def _command(self, argv: list[str]) -> str:
        lines = [f"cd {shlex.quote(str(self.cwd))} && env"]
        lines += [f"  {k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        first = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
        lines.append("  " + " ".join(shlex.quote(a) for a in argv[:first]))
        i = first
        while i < len(argv):
            pair = argv[i : i + 2] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else argv[i : i + 1]
            lines.append("    " + " ".join(shlex.quote(a) for a in pair))
            i += len(pair)
        return " \\\n".join(lines)


def actor_gpus(s: Settings, gpus: tuple[Gpu, ...]) -> tuple[tuple[int, ...], list[str]]:
    """(the GPUs slime's actors see, () = every visible one; problems): TRAIN_GPUS, else, when a server on this node
    holds GPUs (INFERENCE_GPUS, default the first TP, as start_vllm.py places it), the others, as the built-in
    trainer takes them; SLIME_GPUS of those when given."""
    train = parse_gpus("TRAIN_GPUS", s.placement.train_gpus)  # a malformed list raises, naming the setting
    parse_gpus("INFERENCE_GPUS", s.placement.inference_gpus)
    try:
        place = resolve(s, gpus)  # a TRAIN_GPUS on the server's GPUs, or one this node lacks, is a problem
    except ConfigError as exc:
        return (), [str(exc)]
    if train or not place.serve:
        return train, []
    if s.slime_gpus and s.slime_gpus > len(place.train):
        return (), [
            f"SLIME_GPUS={s.slime_gpus} but the server on this node holds GPU {span(place.serve)} "
            f"(INFERENCE_GPUS, default the first TP), which leaves {len(place.train)}: lower SLIME_GPUS, or "
            "serve on another node"
        ]
    return place.train[: s.slime_gpus or None], []


def build_plan(
    s: Settings,
    *,
    python: str | None = None,
    env_report: dict[str, Any] | None = None,
    check_server_routes: bool = True,
    given: Collection[str] = (),
    environ: Mapping[str, str] | None = None,
    node_gpus: tuple[Gpu, ...] | None = None,
) -> LaunchPlan:
    """The full launch plan for ``s``, with every problem found. Raises SlimeBackendError when no command line can
    be built at all (a setting slime cannot honour, no SLIME_DIR, a model without Megatron arguments). ``given``:
    the settings the user set, as ``given_settings`` names them; ``environ``: where WANDB_* are read (default: this
    process's); ``node_gpus``: this node's GPUs (default: nvidia-smi's)."""
    if s.slime_dir is None:
        raise SlimeBackendError("BACKEND=slime needs SLIME_DIR: a slime v0.2.2 or v0.3.x checkout")
    if refused := features.refusals(s, given):
        raise SlimeBackendError("slime cannot honour these settings: " + "; ".join(refused))
    slime_dir = Path(s.slime_dir).expanduser().resolve()
    problems: list[str] = []
    warnings = features.warnings(s, given)
    backend = "fsdp"
    try:
        release = detect_release(slime_dir)
        backend = release.backend
        if not release.tested:
            warnings.append(f"slime {release.version} is not a release this backend was tested with (v0.2.2, v0.3.1)")
    except SlimeBackendError as exc:
        problems.append(str(exc))
    python = python or s.slime_python or sys.executable
    report = env_report if env_report is not None else check_packages_in(python, backend)
    problems += report["problems"]
    placed, placement_problems = actor_gpus(s, nvidia_gpus() if node_gpus is None else node_gpus)
    problems += placement_problems
    gpus = s.slime_gpus or len(placed) or report.get("cuda_devices") or 1
    if s.slime_gpus and report.get("cuda_devices") and s.slime_gpus > report["cuda_devices"]:
        problems.append(f"SLIME_GPUS={s.slime_gpus} but only {report['cuda_devices']} CUDA GPUs are visible")
    if placed and gpus != len(placed):
        problems.append(
            f"SLIME_GPUS={gpus} but TRAIN_GPUS={s.placement.train_gpus} places {len(placed)}: unset "
            "SLIME_GPUS or make them agree"
        )
    if link := link_problem(slime_dir):
        problems.append(link)
    frozen, notes = check_server(s) if check_server_routes else ([], [])
    warnings += notes
    if frozen and s.allow_frozen_server:
        warnings += [f"ALLOW_FROZEN_SERVER is set, so the run trains against a frozen server: {p}" for p in frozen]
    else:
        problems += [p + " (ALLOW_FROZEN_SERVER=1 starts anyway, off-policy)" for p in frozen]
    trackers, trackers_env, trackers_problems = reporting_args(s, os.environ if environ is None else environ)
    problems += trackers_problems
    env = {"PYTHONPATH": python_path(slime_dir), **devices_env(placed), **trackers_env}
    steps: list[Step] = []
    if backend == "fsdp":
        args = train_args(s, gpus=gpus, model=s.model_name)
        if s.train.tis_cap:
            problems.append(
                f"TIS_CAP={s.train.tis_cap}: slime v0.2.2's FSDP actor has no truncated importance sampling (it is "
                "--use-tis of v0.3.x's Megatron backend); set TIS_CAP=0, run slime v0.3.x, or use BACKEND=fsdp"
            )
        problems += global_batch_problems(
            s, gpus, f"the {gpus} training GPUs; slime asserts the global batch divides evenly (set SLIME_GPUS)"
        )
    else:
        config = megatron.model_config(s.model_name)
        args, layout = megatron_train_args(s, config, gpus=gpus, model=s.model_name)
        problems += layout
        if not Path(s.model_name).expanduser().is_dir():
            problems.append(
                f"MODEL={s.model_name} is not a local folder: slime 0.3.x's --save-hf copies the config "
                "and tokenizer from --hf-checkpoint and refuses a hub name; download the model and set "
                "MODEL to its folder"
            )
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # as slime's run scripts set it for Megatron's TP communication
        steps.append(
            Step(
                megatron.conversion_argv(s, python, config, gpus),
                megatron.torch_dist_dir(s) / megatron.CONVERTED_MARKER,
                megatron.CONVERT_TIMEOUT,
                "convert MODEL to Megatron's torch_dist format with slime's own tool, once",
            )
        )
    return LaunchPlan(
        argv=[python, features.script(s), *args, *trackers],
        env=env,
        cwd=slime_dir,
        backend=backend,
        steps=steps,
        files=extra_args_files(s),
        problems=problems,
        warnings=warnings,
    )
