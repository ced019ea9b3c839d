"""BACKEND=slime: run slime v0.2.2's own ``train.py`` (FSDP backend) with this project's data source and rollout.

What the command line does and why (all flags checked against v0.2.2's argument parser):

* ``--train-backend fsdp``: v0.2.2 (commit 2418a78) is the last slime release with ``slime/backends/fsdp_utils``;
  it was removed on 2026-03-04 (e4faf6330), so newer checkouts are refused.
* ``--debug-train-only``: the one v0.2.2 switch under which slime starts no SGLang engine and reserves no rollout
  GPU (``RolloutManager`` keeps ``all_rollout_engines = []``, the actor's ``update_weights`` returns at once) while
  ``train.py`` still calls our ``--rollout-function-path`` every step. ``--rollout-num-gpus 0`` alone is not
  enough (the weight updater then broadcasts to engines it never connected), and ``--colocate`` starts engines
  on the training GPUs.
* ``--save-interval 1 --save D --load D``: slime writes a checkpoint after every step, before the next rollout;
  ``slime_weights.SlimeWeightSync`` turns the newest one into an HF folder and reloads it into vLLM, so every
  rollout runs on the weights of the previous step. The same folder for both makes a re-run resume.
* ``--global-batch-size B*N``: one optimizer step per rollout, as in the built-in trainer.

The launcher also links ``SLIME_DIR/examples/qwen_swe`` to this package: slime's ``examples`` is a regular
package and Ray puts the script folder first on every worker's ``sys.path``, so ``examples.qwen_swe`` must exist
there; PYTHONPATH alone would not reach it. Only the standard library and ``config`` are imported at module level:
the environment checks run inside slime's interpreter, which need not have this project's other dependencies.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from qwen_swe.config.settings import Settings, load_settings
from qwen_swe.errors import SETUP_EXIT_CODE, ConfigError, SlimeBackendError
from qwen_swe.paths import REPO_ROOT

SLIME_FSDP_TAG = "v0.2.2"
SLIME_FSDP_COMMIT = "2418a7844abe4d490a1676dcf88fc3401adab362"
DATA_SOURCE_PATH = "examples.qwen_swe.data_source.SWEBenchDataSource"
ROLLOUT_FUNCTION_PATH = "examples.qwen_swe.rollout.generate_rollout"
PACKAGE_DIR = REPO_ROOT / "examples" / "qwen_swe"  # the entry points slime imports by path
SETTINGS_FILE = "settings.json"
# given to --custom-config-path, which slime reads with yaml.safe_load: written as YAML, since YAML 1.1 reads a
# JSON number such as 1e-06 back as a string
EXTRA_ARGS_FILE = "slime_extra_args.yaml"

IMAGE_HINT = ("or run inside slime v0.2.2's image (docker/Dockerfile: slimerl/sglang:nightly-dev-20260107-dce8b060 "
              "with flash-attn 2.7.4.post1)")
# (distribution, import name, why slime or the rollout needs it, pip requirement)
PACKAGES: tuple[tuple[str, str, str, str], ...] = (
    ("torch", "torch", "the FSDP actor (a CUDA build)", "torch"),
    ("transformers", "transformers", "the model, and v0.2.2's mask code (breaks on transformers >= 5)",
     "transformers<5"),
    ("ray", "ray", "slime's actors and placement groups", "ray[default]"),
    ("sglang", "sglang", "imported by slime even with --debug-train-only", "sglang"),
    ("sglang-router", "sglang_router", "the router slime's RolloutManager starts", "sglang-router>=0.2.3"),
    ("flash-attn", "flash_attn", "FSDP packs sequences; sdpa/eager attention would mix them", "flash-attn"),
    ("accelerate", "accelerate", "slime's model init", "accelerate"),
    ("wandb", "wandb", "slime's logging module", "wandb"),
    ("httpx", "httpx", "slime's HTTP utilities", "httpx[http2]"),
    ("PyYAML", "yaml", "slime's argument parser", "pyyaml"),
    ("safetensors", "safetensors", "the HF export of each checkpoint", "safetensors"),
    ("docker", "docker", "the rollout sandboxes", "docker"),
    ("aiohttp", "aiohttp", "the recording proxy", "aiohttp"),
    ("swebench", "swebench", "grading", "swebench"),
)


# ------------------------------------------------------------------------------------------------
# checks
# ------------------------------------------------------------------------------------------------

def slime_version(slime_dir: Path) -> str | None:
    """The version string in the checkout's setup.py, or None."""
    try:
        m = re.search(r'version\s*=\s*"([^"]+)"', (slime_dir / "setup.py").read_text())
    except OSError:
        return None
    return m.group(1) if m else None


def check_slime_checkout(slime_dir: Path) -> str:
    """The checkout's version; raises when it is not a slime checkout with the FSDP backend."""
    if not (slime_dir / "train.py").is_file() or not (slime_dir / "slime").is_dir():
        raise SlimeBackendError(f"SLIME_DIR={slime_dir} is not a slime checkout (no train.py and slime/); clone "
                                f"THUDM/slime and check out {SLIME_FSDP_TAG}")
    version = slime_version(slime_dir) or "unknown"
    if not (slime_dir / "slime" / "backends" / "fsdp_utils").is_dir():
        raise SlimeBackendError(
            f"SLIME_DIR={slime_dir} is slime {version}, which has no FSDP backend (slime removed it on 2026-03-04, "
            f"commit e4faf6330). Check out the last release with FSDP: git -C {slime_dir} checkout {SLIME_FSDP_TAG} "
            f"(commit {SLIME_FSDP_COMMIT[:9]}), or use the built-in trainer (BACKEND=fsdp)")
    return version


def check_packages() -> dict[str, Any]:
    """Problems with the packages of *this* interpreter, and its CUDA device count (run it in slime's)."""
    problems = []
    for dist, module, why, requirement in PACKAGES:
        if importlib.util.find_spec(module) is None:
            problems.append(f"{dist} is missing ({why}): pip install '{requirement}'")
            continue
        if dist == "transformers":
            version = importlib.metadata.version("transformers")
            if int(version.split(".")[0]) >= 5:
                problems.append(f"transformers {version} is installed; slime v0.2.2's mask code needs transformers "
                                "below 5 (apply_chat_template returns a BatchEncoding in 5.x): "
                                "pip install 'transformers<5'")
    devices = 0
    if importlib.util.find_spec("torch") is not None:
        import torch

        devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not devices:
        problems.append("no CUDA GPU is visible: slime v0.2.2's FSDP backend needs CUDA and NCCL "
                        "(use BACKEND=fsdp, the built-in trainer, on CPU)")
    return {"python": sys.executable, "problems": problems, "cuda_devices": devices}


def check_packages_in(python: str) -> dict[str, Any]:
    """``check_packages`` run by ``python`` (the interpreter that will run train.py)."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):  # not resolve(): venvs symlink one base
        return check_packages()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        done = subprocess.run([python, "-m", "qwen_swe.backends.slime.launcher", "--check-env"], env=env,
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return {"python": python, "cuda_devices": 0,
                "problems": [f"cannot run the environment check with SLIME_PYTHON={python} ({exc})"]}


def check_server(settings: Settings, timeout: float = 10.0) -> tuple[list[str], list[str]]:
    """(problems, warnings) about keeping the server on-policy. A problem means the run would train against
    a frozen server: no server, unreachable, or no reload endpoints (vLLM without VLLM_SERVER_DEV_MODE=1)."""
    if not settings.inference.vllm_url:
        return ["BACKEND=slime needs VLLM_URL: a vLLM server (>= 0.16, started with VLLM_SERVER_DEV_MODE=1) that "
                "the rollout function reloads after every step; the embedded CPU server serves the built-in "
                "trainer only"], []
    root = settings.inference.vllm_url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(root + "/openapi.json", timeout=timeout) as resp:
            routes = set(json.loads(resp.read()).get("paths", {}))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return [f"cannot list the routes of {root} (GET /openapi.json: {getattr(exc, 'reason', exc)}); start the "
                "server first, so the launcher can confirm it accepts new weights"], []
    missing = [r for r in ("/pause", "/resume", "/collective_rpc", "/reset_prefix_cache") if r not in routes]
    if missing:
        return [f"{root} has no {', '.join(missing)}: it cannot reload weights, so every rollout would use the "
                "starting weights. Restart vLLM (>= 0.16) with VLLM_SERVER_DEV_MODE=1"], []
    host = urllib.parse.urlparse(root).hostname or ""
    warnings = []
    if host not in ("localhost", "127.0.0.1", "::1", os.uname().nodename):
        warnings.append(f"{host} is not this machine: the server must read {settings.output_dir}/hf_export at "
                        "the same path (a shared file system), or its reloads fail")
    return [], warnings


def link_problem(slime_dir: Path) -> str | None:
    """Why ``SLIME_DIR/examples/qwen_swe`` cannot point at this package, or None (absent or already ours)."""
    link = slime_dir / "examples" / "qwen_swe"
    if not (link.exists() or link.is_symlink()) or link.resolve() == PACKAGE_DIR:
        return None
    return (f"{link} exists and is not this repository's package (the seed's copy?). slime's examples package "
            f"would import it instead of {PACKAGE_DIR}: move it away (mv {link} {link}.old) and run again")


def ensure_link(slime_dir: Path) -> Path:
    link = slime_dir / "examples" / "qwen_swe"
    problem = link_problem(slime_dir)
    if problem:
        raise SlimeBackendError(problem)
    if not link.exists():
        link.symlink_to(PACKAGE_DIR, target_is_directory=True)
    return link


# ------------------------------------------------------------------------------------------------
# the command line
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchPlan:
    """What the launcher executes: ``argv`` in ``cwd`` with ``env`` added to the inherited environment."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    files: dict[str, str] = field(default_factory=dict)  # written just before the exec
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def render(self) -> str:
        """A shell command line: one variable per line, then one flag (with its value) per line."""
        lines = [f"cd {shlex.quote(str(self.cwd))} && env"]
        lines += [f"  {k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        lines.append("  " + " ".join(shlex.quote(a) for a in self.argv[:2]))
        i = 2
        while i < len(self.argv):
            pair = self.argv[i:i + 2] if i + 1 < len(self.argv) and not self.argv[i + 1].startswith("--") \
                else self.argv[i:i + 1]
            lines.append("    " + " ".join(shlex.quote(a) for a in pair))
            i += len(pair)
        written = [f"# writes {path}" for path in self.files]
        return "\n".join(written + [" \\\n".join(lines)])


def train_args(s: Settings, *, gpus: int, model: str) -> list[str]:
    """slime v0.2.2 train.py arguments for these settings (see the module docstring)."""
    if s.train.lora_rank:
        raise SlimeBackendError("slime has no LoRA (v0.2.2 FSDP trains every parameter): set LORA_RANK=0 or use "
                                "BACKEND=fsdp")
    if s.train.advantage_mode == "loo":
        raise SlimeBackendError("slime's GRPO has no leave-one-out baseline: ADVANTAGE_MODE=mean or std, or "
                                "BACKEND=fsdp")
    out = str(s.output_dir)
    argv = [
        "--train-backend", "fsdp",
        "--hf-checkpoint", model,
        "--actor-num-nodes", "1", "--actor-num-gpus-per-node", str(gpus),
        "--debug-train-only",
        "--advantage-estimator", "grpo",
        "--n-samples-per-prompt", str(s.n_samples),
        "--rollout-batch-size", str(s.rollout_batch_size),
        "--global-batch-size", str(s.rollout_batch_size * s.n_samples),
        "--num-rollout", str(s.num_rollouts),
        "--lr", repr(s.train.lr),
        "--eps-clip", repr(s.train.clip_eps), "--eps-clip-high", repr(s.train.upper_clip),
        "--clip-grad", repr(s.train.grad_clip),
        "--rollout-temperature", repr(s.agent.temperature),
        "--prompt-data", s.dataset_source,
        "--rollout-shuffle", "--rollout-seed", str(s.seed),
        "--data-source-path", DATA_SOURCE_PATH,
        "--rollout-function-path", ROLLOUT_FUNCTION_PATH,
        "--save", out, "--load", out, "--save-interval", "1",
        "--custom-config-path", str(s.output_dir / EXTRA_ARGS_FILE),
    ]
    if s.train.advantage_mode == "mean":
        argv.append("--disable-grpo-std-normalization")
    warmup = s.train.lr_warmup_steps
    if warmup >= 2:  # slime's update k (from 1) runs at init + (LR - init) * (k - 1) / iters: ours with these two
        argv += ["--lr-warmup-iters", str(warmup - 1), "--lr-warmup-init", repr(s.train.lr / warmup)]
    if s.train.kl_loss_coef:  # slime's FSDP actor builds its ref model from --ref-load, an HF folder
        argv += ["--use-kl-loss", "--kl-loss-coef", repr(s.train.kl_loss_coef), "--kl-loss-type",
                 s.train.kl_loss_type, "--ref-load", model]
    if s.train.loss_norm == "token":
        argv.append("--calculate-per-token-loss")
    if s.train.activation_checkpointing:
        argv.append("--gradient-checkpointing")
    if s.train.micro_batch_size:
        argv += ["--micro-batch-size", str(s.train.micro_batch_size)]
    return argv


def build_plan(s: Settings, *, python: str | None = None, env_report: dict[str, Any] | None = None,
               check_server_routes: bool = True) -> LaunchPlan:
    """The full launch plan with every problem found; nothing is executed or written."""
    if s.slime_dir is None:
        raise SlimeBackendError("BACKEND=slime needs SLIME_DIR: a slime v0.2.2 checkout")
    slime_dir = Path(s.slime_dir).expanduser().resolve()
    problems: list[str] = []
    warnings: list[str] = []
    try:
        version = check_slime_checkout(slime_dir)
        if version != SLIME_FSDP_TAG.lstrip("v"):
            warnings.append(f"slime {version} is not {SLIME_FSDP_TAG}, the release this backend was tested with")
    except SlimeBackendError as exc:
        problems.append(str(exc))
    python = python or s.slime_python or sys.executable
    report = env_report if env_report is not None else check_packages_in(python)
    problems += report["problems"]
    gpus = s.slime_gpus or report.get("cuda_devices") or 1
    if s.slime_gpus and report.get("cuda_devices") and s.slime_gpus > report["cuda_devices"]:
        problems.append(f"SLIME_GPUS={s.slime_gpus} but only {report['cuda_devices']} CUDA GPUs are visible")
    if (s.rollout_batch_size * s.n_samples) % gpus:
        problems.append(f"ROLLOUT_BATCH_SIZE*N_SAMPLES={s.rollout_batch_size * s.n_samples} is not a multiple of "
                        f"the {gpus} training GPUs; slime asserts the global batch divides evenly (set SLIME_GPUS)")
    if link := link_problem(slime_dir):
        problems.append(link)
    frozen, notes = check_server(s) if check_server_routes else ([], [])
    warnings += notes
    if frozen and s.allow_frozen_server:
        warnings += [f"ALLOW_FROZEN_SERVER is set, so the run trains against a frozen server: {p}" for p in frozen]
    else:
        problems += [p + " (ALLOW_FROZEN_SERVER=1 starts anyway, off-policy)" for p in frozen]
    env = {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(slime_dir)])}
    argv = [python, "train.py"] + train_args(s, gpus=gpus, model=s.model_name)
    return LaunchPlan(argv=argv, env=env, cwd=slime_dir, files=extra_args_files(s), problems=problems,
                      warnings=warnings)


def extra_args_files(s: Settings) -> dict[str, str]:
    """The --custom-config-path file: slime v0.2.2 ``setattr``s each key onto ``args``, and ``args`` travels with
    every Ray actor, so the data source gets ``instance_list`` and the rollout function the whole settings
    (``settings_from_slime_args``) wherever Ray runs them, whatever environment those workers inherited."""
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
            raise ConfigError(f"slime's args carry no qwen_swe_settings and {path} does not exist: start slime "
                              "through `BACKEND=slime bash examples/qwen_swe/run_grpo.sh`, which writes both")
        settings = Settings.from_json(path)
    sizes = {"n_samples": getattr(args, "n_samples_per_prompt", None),
             "rollout_batch_size": getattr(args, "rollout_batch_size", None)}
    return settings.replace(**{k: int(v) for k, v in sizes.items() if v})


# ------------------------------------------------------------------------------------------------
# the batch contract
# ------------------------------------------------------------------------------------------------

def trim_trailing_pad(sample: Any) -> bool:
    """slime v0.2.2's FSDP ``unpack_sequences`` takes trailing token id 0 for padding and shifts every log-prob
    slice of the pack; drop such tokens from the end of the response (mask and log-probs with them)."""
    changed = False
    while sample.tokens and sample.tokens[-1] == 0 and sample.response_length > 1:
        sample.tokens = sample.tokens[:-1]
        sample.response_length -= 1
        if sample.loss_mask is not None:
            sample.loss_mask = sample.loss_mask[:-1]
        if sample.rollout_log_probs is not None:
            sample.rollout_log_probs = sample.rollout_log_probs[:-1]
        changed = True
    return changed


def batch_problems(groups: Sequence[Sequence[Any]], *, n_samples_per_prompt: int,
                   rollout_batch_size: int) -> list[str]:
    """Every way ``groups`` breaks what slime v0.2.2 asserts or silently assumes of a training batch."""
    problems = []
    if len(groups) != rollout_batch_size:
        problems.append(f"{len(groups)} groups, slime needs exactly rollout_batch_size={rollout_batch_size} (else "
                        "its GRPO normalisation treats the whole batch as one group)")
    with_logprobs = {x.rollout_log_probs is not None for g in groups for x in g}
    if len(with_logprobs) > 1:
        problems.append("rollout_log_probs are set on some samples only; slime takes them from samples[0] for all")
    for gi, group in enumerate(groups):
        if len(group) != n_samples_per_prompt:
            problems.append(f"group {gi} has {len(group)} samples, not n_samples_per_prompt={n_samples_per_prompt}")
        if len({x.group_index for x in group}) > 1:
            problems.append(f"group {gi} mixes group_index values {sorted({x.group_index for x in group})}")
        for x in group:
            where = f"group {gi} sample index={x.index}"
            status_type = type(x).Status
            if not isinstance(x.status, status_type):
                problems.append(f"{where}: status {x.status!r} is not a {status_type.__module__}.Sample.Status")
            if isinstance(x.reward, bool) or not isinstance(x.reward, (int, float)):
                problems.append(f"{where}: reward {x.reward!r} is not a number")
            n = x.response_length
            if not isinstance(n, int) or n < 1 or n > len(x.tokens):
                problems.append(f"{where}: response_length {n!r} outside 1..len(tokens)={len(x.tokens)}")
            if x.loss_mask is None or len(x.loss_mask) != n:
                problems.append(f"{where}: loss_mask length {None if x.loss_mask is None else len(x.loss_mask)} "
                                f"!= response_length {n}")
            if x.rollout_log_probs is not None and len(x.rollout_log_probs) != n:
                problems.append(f"{where}: rollout_log_probs length {len(x.rollout_log_probs)} != response_length "
                                f"{n}")
            if x.tokens and x.tokens[-1] == 0:
                problems.append(f"{where}: the last token is id 0, which slime's FSDP unpacking takes for padding "
                                "(trim_trailing_pad fixes it)")
            aborted = x.status == status_type.ABORTED
            if aborted and not x.remove_sample:
                problems.append(f"{where}: ABORTED without remove_sample=True; slime would train on it")
            if not x.remove_sample and x.loss_mask is not None and not any(x.loss_mask):
                problems.append(f"{where}: no trained token and remove_sample is False")
    return problems


def validate_rollout_batch(groups: Sequence[Sequence[Any]], *, n_samples_per_prompt: int,
                           rollout_batch_size: int) -> None:
    """Raise SlimeBackendError listing every broken invariant (call it before returning a batch to slime)."""
    problems = batch_problems(groups, n_samples_per_prompt=n_samples_per_prompt,
                              rollout_batch_size=rollout_batch_size)
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise SlimeBackendError(f"the rollout batch breaks slime's contract: {shown}")


# ------------------------------------------------------------------------------------------------
# entry point
# ------------------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """``python -m qwen_swe.backends.slime.launcher [--dry-run] [settings flags]``."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--check-env", action="store_true")
    ours, rest = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if ours.check_env:
        print(json.dumps(check_packages()))
        return 0
    try:
        settings = load_settings(rest, profile=False)
    except ConfigError as exc:
        print(f"slime backend: {exc}", file=sys.stderr)
        return SETUP_EXIT_CODE
    return launch(settings, dry_run=ours.dry_run)


def launch(settings: Settings, *, dry_run: bool = False) -> int:
    """Check everything, then replace this process with slime's train.py (or print the plan with ``dry_run``)."""
    try:
        if settings.backend != "slime":
            settings = settings.replace(backend="slime")
        plan = build_plan(settings)
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
        print("slime backend: refusing to start:\n  - " + "\n  - ".join(plan.problems) +
              f"\nInstall missing packages into {plan.argv[0]} ({IMAGE_HINT}).", file=sys.stderr)
        return SETUP_EXIT_CODE
    ensure_link(plan.cwd)
    settings.write(settings.output_dir)
    for path, text in plan.files.items():
        Path(path).write_text(text)
    os.chdir(plan.cwd)
    inherited = os.environ.get("PYTHONPATH")
    env = {**os.environ, **plan.env}
    if inherited:
        env["PYTHONPATH"] += os.pathsep + inherited
    os.execve(plan.argv[0], plan.argv, env)
    return 0  # pragma: no cover - execve does not return


if __name__ == "__main__":
    sys.exit(main())
