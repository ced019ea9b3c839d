"""The trainer's settings section (GRPO, optimizer, FSDP, checkpoints)."""

from __future__ import annotations

from dataclasses import dataclass

from qwen_swe.config.fields import opt, validate
from qwen_swe.errors import ConfigError
from qwen_swe.train.reporting import parse_report_to

KL_TYPES = ("k1", "k2", "k3", "low_var_kl")  # slime's --kl-loss-type choices
ADVANTAGE_MODES = ("mean", "std", "loo")
LOSS_NORMS = ("token", "sample")
WEIGHT_LOADINGS = ("full", "meta")


@dataclass(frozen=True)
class TrainSettings:
    train_mode: str = opt(
        "grpo",
        "grpo = reinforcement learning on rollouts; sft = supervised warm start on SFT_DATA",
        choices=("grpo", "sft"),
    )
    sft_data: str | None = opt(None, "expert demonstrations for TRAIN_MODE=sft (python -m qwen_swe.warmstart collect)")
    load_rollout_data: str | None = opt(
        None,
        "replay a run's saved rollouts (its OUTPUT_DIR/rollout_data, from "
        "SAVE_ROLLOUT_DATA) instead of running rollouts: step N trains on step N's "
        "groups, no server (slime's --load-debug-rollout-data)",
    )
    lr: float = opt(1e-6, "AdamW learning rate", minimum=0.0)
    lr_warmup_steps: int = opt(
        0,
        "updates over which the learning rate rises linearly to LR: update k (from 1) uses "
        "LR * k / LR_WARMUP_STEPS; 0 = LR from the first update",
        minimum=0,
    )
    advantage_mode: str = opt("mean", "group baseline", choices=ADVANTAGE_MODES)
    drop_zero_variance: bool = opt(True, "drop groups whose rewards are all equal")
    clip_eps: float = opt(0.2, "PPO clip range (lower)", minimum=0.0)
    clip_eps_high: float | None = opt(None, "PPO upper clip range; default = CLIP_EPS")
    loss_norm: str = opt("token", "loss normalisation", choices=LOSS_NORMS)
    tis_cap: float = opt(
        0.0,
        "truncated importance sampling (slime's --use-tis --tis-clip): > 0 weights each trained token's loss by "
        "min(trainer / rollout probability of the token, TIS_CAP) and takes the PPO ratio against the trainer's own "
        "log-probs; corrects for a server whose weights or kernels differ from the trainer's; 0 = off",
        minimum=0.0,
    )
    kl_loss_coef: float = opt(
        0.0,
        "weight of a KL penalty to the run's start weights (MODEL), slime's --kl-loss-coef; "
        "0 = none (no reference model is loaded)",
        minimum=0.0,
    )
    kl_loss_type: str = opt(
        "low_var_kl", "estimator of that KL on sampled tokens (slime's --kl-loss-type)", choices=KL_TYPES
    )
    grad_clip: float = opt(1.0, "gradient-norm clip", minimum=0.0)
    lora_rank: int = opt(0, "LoRA rank; 0 = full fine-tuning", minimum=0)
    lora_alpha: int = opt(16, "LoRA alpha", minimum=1)
    activation_checkpointing: bool = opt(False, "recompute activations in the backward pass")
    train_procs: int | None = opt(
        None, "trainer processes under torchrun; default: the GPU count, or 2 on CPU", minimum=1
    )
    micro_batch_size: int = opt(1, "samples per forward/backward pass on each trainer rank", minimum=1)
    mixed_precision: bool = opt(False, "bf16 compute with fp32 master weights and gradient reduction (FSDP2)")
    weight_loading: str = opt(
        "full",
        "how each trainer rank loads the model: full = the whole model on every rank, "
        "then shard; meta = build on the meta device, shard, read only the rank's rows from the "
        "safetensors files",
        choices=WEIGHT_LOADINGS,
    )
    save_interval: int = opt(1, "checkpoint every N steps", minimum=1, resume="free")
    keep_checkpoints: int = opt(3, "checkpoints kept", minimum=1, resume="free")
    trainer_restarts: int = opt(
        1,
        "times the trainer starts again from its newest checkpoint after a rank dies in native code "
        "(SIGSEGV, SIGBUS, SIGABRT); each thread's stack is kept in OUTPUT_DIR/logs/faults; "
        "BACKEND=fsdp only",
        minimum=0,
        resume="free",
    )
    report_to: str = opt(
        "tensorboard",
        "where each step's scalars go besides metrics.jsonl, comma-separated: "
        "tensorboard (OUTPUT_DIR/tb), wandb (OUTPUT_DIR/wandb, with a table of sampled trajectories; "
        "its own WANDB_PROJECT, WANDB_MODE=offline, ... apply); empty = metrics.jsonl only",
        resume="free",
    )
    max_staleness: int = opt(
        0,
        "0 = strictly on-policy (each rollout waits for the previous update); N >= 1 = the "
        "next N rollouts run while a step trains, and samples more than N weight versions "
        "behind the trainer are dropped",
        minimum=0,
    )
    partial_rollouts: bool = opt(
        False,
        "with MAX_STALENESS >= 1, a weight sync does not wait for the model calls in flight: the server freezes "
        "them, drops their KV and continues them with the new weights (interrupted and resumed, as AReaL's "
        "interruptible generation); a model call that spans a sync records both versions. And a step does not wait "
        "for its slowest groups: about (1 + MAX_STALENESS) x ROLLOUT_BATCH_SIZE groups stay in flight, a step trains "
        "on the first ROLLOUT_BATCH_SIZE to complete, and the others carry over to later steps",
    )
    over_sampling: int = opt(
        0,
        "with PARTIAL_ROLLOUTS, groups the pool may hold beyond what the run's remaining steps can train (still "
        "within the MAX_STALENESS credit), as slime's --over-sampling-batch-size: the last steps take the first "
        "groups to complete instead of waiting on the slowest; the groups left when the run ends are not trained. "
        "0 = no more groups than the steps left can train",
        minimum=0,
    )

    def __post_init__(self) -> None:
        validate(self)
        parse_report_to(self.report_to)
        if self.load_rollout_data and self.train_mode != "grpo":
            raise ConfigError(
                f"LOAD_ROLLOUT_DATA={self.load_rollout_data} replays GRPO steps, not TRAIN_MODE="
                f"{self.train_mode}; unset one of them"
            )
        if self.partial_rollouts and not self.max_staleness:
            raise ConfigError(
                "PARTIAL_ROLLOUTS=1 needs MAX_STALENESS >= 1: at 0 every rollout has ended before a sync, so there "
                "is nothing in flight to continue; set MAX_STALENESS=1 or unset PARTIAL_ROLLOUTS"
            )
        if self.over_sampling and not self.partial_rollouts:
            raise ConfigError(
                f"OVER_SAMPLING={self.over_sampling} needs PARTIAL_ROLLOUTS=1: only the streaming pool draws groups "
                "ahead of the steps; set PARTIAL_ROLLOUTS=1 (with MAX_STALENESS >= 1) or set OVER_SAMPLING=0"
            )
        if self.kl_loss_coef and self.train_mode != "grpo":
            raise ConfigError(
                f"KL_LOSS_COEF={self.kl_loss_coef} needs TRAIN_MODE=grpo: the warm start has no "
                "reference to stay near; unset KL_LOSS_COEF"
            )

    @property
    def reporters(self) -> tuple[str, ...]:
        return parse_report_to(self.report_to)

    @property
    def upper_clip(self) -> float:
        return self.clip_eps if self.clip_eps_high is None else self.clip_eps_high
