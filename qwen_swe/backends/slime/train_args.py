"""slime's train.py command line for our settings: the flags both releases share, then each backend's own.

Why the shared flags are what they are (checked against each release's ``slime/utils/arguments.py``):

* ``--debug-train-only``: slime starts no SGLang engine and reserves no rollout GPU (``RolloutManager`` keeps no
  engines, the actor's ``update_weights`` returns at once) while train.py still calls our ``--rollout-function-path``
  every step. ``--rollout-num-gpus 0`` alone is not enough (the weight updater then broadcasts to engines it never
  connected), and ``--colocate`` starts engines on the training GPUs.
* ``--save-interval 1 --save D --load D``: slime writes a checkpoint after every step, before the next rollout;
  ``weights.SlimeWeightSync`` serves the newest one from vLLM, so every rollout runs on the weights of the previous
  step. The same folder for both makes a re-run resume.
* ``--global-batch-size B*N``: one optimizer step per rollout, as in the built-in trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qwen_swe.backends.slime import megatron
from qwen_swe.backends.slime.features import refusals
from qwen_swe.config.settings import Settings
from qwen_swe.errors import SlimeBackendError

DATA_SOURCE_PATH = "examples.qwen_swe.data_source.SWEBenchDataSource"
ROLLOUT_FUNCTION_PATH = "examples.qwen_swe.rollout.generate_rollout"
# given to --custom-config-path, which slime reads with yaml.safe_load: written as YAML, since YAML 1.1 reads a
# JSON number such as 1e-06 back as a string
EXTRA_ARGS_FILE = "slime_extra_args.yaml"
HF_EXPORT_PATTERN = "hf_export/slime_{rollout_id}"  # --save-hf under OUTPUT_DIR (Megatron writes HF itself)


def _refuse(s: Settings) -> None:
    problems = refusals(s)
    if problems:
        raise SlimeBackendError("slime cannot honour these settings: " + "; ".join(problems))


def common_args(s: Settings, *, gpus: int, model: str) -> list[str]:
    """The flags v0.2.2 and v0.3.x read alike: sizes, GRPO and its loss, data, our plugins, checkpoints."""
    out = str(s.output_dir)
    argv = [
        "--hf-checkpoint",
        model,
        "--actor-num-nodes",
        "1",
        "--actor-num-gpus-per-node",
        str(gpus),
        "--debug-train-only",
        "--advantage-estimator",
        "grpo",
        "--n-samples-per-prompt",
        str(s.n_samples),
        "--rollout-batch-size",
        str(s.rollout_batch_size),
        "--global-batch-size",
        str(s.rollout_batch_size * s.n_samples),
        "--num-rollout",
        str(s.num_rollouts),
        "--lr",
        repr(s.train.lr),
        "--eps-clip",
        repr(s.train.clip_eps),
        "--eps-clip-high",
        repr(s.train.upper_clip),
        "--clip-grad",
        repr(s.train.grad_clip),
        "--rollout-temperature",
        repr(s.agent.temperature),
        "--prompt-data",
        s.dataset_source,
        "--rollout-shuffle",
        "--rollout-seed",
        str(s.seed),
        "--data-source-path",
        DATA_SOURCE_PATH,
        "--rollout-function-path",
        ROLLOUT_FUNCTION_PATH,
        "--save",
        out,
        "--load",
        out,
        "--save-interval",
        "1",
        "--custom-config-path",
        str(Path(out) / EXTRA_ARGS_FILE),
        "--micro-batch-size",
        str(s.train.micro_batch_size),
    ]
    if s.train.advantage_mode == "mean":
        argv.append("--disable-grpo-std-normalization")
    warmup = s.train.lr_warmup_steps
    if warmup >= 2:  # slime's update k (from 1) runs at init + (LR - init) * (k - 1) / iters: ours with these two
        argv += ["--lr-warmup-iters", str(warmup - 1), "--lr-warmup-init", repr(s.train.lr / warmup)]
    if s.train.kl_loss_coef:
        argv += ["--use-kl-loss", "--kl-loss-coef", repr(s.train.kl_loss_coef), "--kl-loss-type", s.train.kl_loss_type]
    if s.train.loss_norm == "token":
        argv.append("--calculate-per-token-loss")
    if s.train.tis_cap:  # honoured by v0.3.x's Megatron loss; v0.2.2's FSDP actor has none (refused in launch_plan)
        argv += ["--use-tis", "--tis-clip", repr(s.train.tis_cap), "--tis-clip-low", "0.0"]
    return argv


def train_args(s: Settings, *, gpus: int, model: str) -> list[str]:
    """slime v0.2.2 train.py arguments (the FSDP backend) for these settings."""
    _refuse(s)
    argv = ["--train-backend", "fsdp"] + common_args(s, gpus=gpus, model=model)
    if s.train.kl_loss_coef:  # slime's FSDP actor builds its reference model from --ref-load, an HF folder
        argv += ["--ref-load", model]
    if s.train.activation_checkpointing:
        argv.append("--gradient-checkpointing")
    return argv


def megatron_train_args(s: Settings, config: dict[str, Any], *, gpus: int, model: str) -> tuple[list[str], list[str]]:
    """(slime v0.3.x train.py arguments for the Megatron backend, problems with the parallel layout)."""
    _refuse(s)
    parallel, problems = megatron.parallel_args(s, config, gpus)
    argv = (
        ["--train-backend", "megatron"]
        + common_args(s, gpus=gpus, model=model)
        + megatron.model_args(config)
        + parallel
        + [
            # the converted start weights: train.py's first checkpoint while --load holds none, and the KL's
            # reference
            "--ref-load",
            str(megatron.torch_dist_dir(s)),
            # Megatron writes an HF copy of every checkpoint itself; the rollout function serves it
            "--save-hf",
            str(Path(s.output_dir) / HF_EXPORT_PATTERN),
            "--lr-decay-style",
            "constant",  # Megatron's default decays linearly; ours holds LR after warm-up
        ]
    )
    if s.train.activation_checkpointing:
        argv += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    problems += global_batch_problems(
        s, gpus // s.slime_tp, f"Megatron's data-parallel size {gpus // s.slime_tp} (SLIME_GPUS / SLIME_TP)"
    )
    return argv, problems


def global_batch_problems(s: Settings, ranks: int, what: str) -> list[str]:
    """slime asserts its global batch (ROLLOUT_BATCH_SIZE*N_SAMPLES samples) splits evenly over the data-parallel
    ranks; ``what`` names those ranks in the refusal."""
    size = s.rollout_batch_size * s.n_samples
    return [f"ROLLOUT_BATCH_SIZE*N_SAMPLES={size} is not a multiple of {what}"] if size % max(1, ranks) else []
