"""The rollout engine's settings section (concurrency, time guards, dropped samples, trajectory length, where the
rollouts run)."""

from __future__ import annotations

from dataclasses import dataclass

from qwen_swe.config.fields import opt, validate


@dataclass(frozen=True)
class RolloutSettings:
    rollout_concurrency: int = opt(8, "samples running at once", minimum=1)
    rollout_timeout: float = opt(7200.0, "outer time guard for one whole rollout batch, seconds", minimum=1.0)
    dropped_policy: str = opt(
        "drop_group", "what to do with a group that lost samples to infrastructure", choices=("drop_group", "replace")
    )
    max_response_len: int = opt(16384, "response tokens kept per trajectory", minimum=1)
    mask_truncated: bool = opt(False, "zero the loss mask of truncated trajectories")
    save_rollout_data: bool = opt(
        True,
        "write every complete group's token ids, loss masks, sampling log-probs and "
        "rewards to OUTPUT_DIR/rollout_data/step_N.jsonl.gz (about 2 KB a sample)",
        resume="free",
    )
    dynamic_sampling: bool = opt(
        False,
        "train only on groups whose rewards differ (DAPO's dynamic sampling): groups "
        "of equal rewards are replaced by newly drawn ones, for up to SAMPLING_ROUNDS "
        "rounds a step; needs MAX_STALENESS=0 and BACKEND=fsdp",
    )
    sampling_rounds: int = opt(
        4,
        "DYNAMIC_SAMPLING: rounds of drawing and running groups a step runs at most before "
        "it trains on the groups it has (ROLLOUT_TIMEOUT bounds each round)",
        minimum=1,
    )
    rollout_backend: str = opt(
        "local",
        "where rollouts run: local = this process; ray = one worker per Ray node "
        "(ROLLOUT_CONCURRENCY and BOOT_CONCURRENCY then apply per worker)",
        choices=("local", "ray"),
    )
    ray_address: str | None = opt(
        None,
        "ROLLOUT_BACKEND=ray: the cluster to join (HEAD_IP:6379, from a cluster node); "
        "empty = attach to a local `ray start` cluster, else start one here",
    )
    ray_workers_per_node: int = opt(1, "ROLLOUT_BACKEND=ray: rollout workers per node that offers CPUs", minimum=1)

    def __post_init__(self) -> None:
        validate(self)
