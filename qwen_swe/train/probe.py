"""How far weights moved a run's own rollouts: the log-probs of the saved trajectories (``SAVE_ROLLOUT_DATA``)
under two sets of weights, summarised by what GRPO pushes on.

    python -m qwen_swe.train.probe --data RUN/rollout_data --before START_WEIGHTS --after END_WEIGHTS \\
        [--temperature 0.7] [--out probe.json]

With ``--data`` naming steps the weights were *not* trained on (a replay of the others, ``LOAD_ROLLOUT_DATA``), it
measures transfer: whether an update moves other tasks' trajectories toward their successes.

In a group with both outcomes GRPO raises the successes and lowers the failures, and since a group's
trajectories share their prompt and often a prefix, its signal sits where they part. So per such group:
the change of the successes' and the failures' log-probs (summed over their trained tokens), the change of their
*margin* (successes minus failures: > 0 means the weights moved toward what the reward preferred), and at each
*fork* (the first response token where a failure leaves a success of its group, with the same tokens before
it) the change of the log-prob of the token the success took. Groups with equal rewards, which GRPO does not
train on, give the drift the update caused elsewhere. Log-probs are at the sampling temperature, as the trainer's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from qwen_swe.data.records import read_records
from qwen_swe.errors import ConfigError
from qwen_swe.train.grpo import zero_variance_mask
from qwen_swe.train.policy import PolicyModel, make_micro_batch

FIELDS = ("group_index", "reward", "tokens", "response_length", "loss_mask")


@dataclass
class Trajectory:
    group: tuple[str, int, str]  # (step file, group index, instance): one group
    reward: float
    tokens: list[int]
    response_length: int
    loss_mask: list[int]
    logp: dict[str, list[float]] = field(default_factory=dict)  # weights name -> response log-probs

    @property
    def response(self) -> list[int]:
        return self.tokens[len(self.tokens) - self.response_length :]

    def trained_sum(self, name: str) -> float:
        return sum(lp for lp, m in zip(self.logp[name], self.loss_mask) if m)


def load(*data: Path) -> list[Trajectory]:
    """Every sample of these ``step_*.jsonl.gz`` files, or of every one in these folders."""
    files = [f for d in data for f in ([d] if d.is_file() else sorted(d.glob("step_*.jsonl.gz")))]
    if not files:
        raise ConfigError(
            f"--data {' '.join(map(str, data))}: no step_*.jsonl.gz files; the run needs SAVE_ROLLOUT_DATA=true"
        )
    out = []
    for f in files:
        with gzip.open(f, "rt") as fh:
            for r in read_records(fh, f, FIELDS, "it was not written by SAVE_ROLLOUT_DATA"):
                group = (f.name, int(r["group_index"]), str(r.get("instance_id")))
                out.append(
                    Trajectory(group, float(r["reward"]), r["tokens"], int(r["response_length"]), r["loss_mask"])
                )
    return out


def has_signal(group: Sequence[Trajectory]) -> bool:
    """GRPO trains on the group: its rewards differ (the trainer's own test)."""
    return not bool(zero_variance_mask(torch.tensor([[t.reward for t in group]]))[0])


def groups_of(trajectories: Sequence[Trajectory]) -> list[list[Trajectory]]:
    by: dict[tuple[str, int, str], list[Trajectory]] = {}
    for t in trajectories:
        by.setdefault(t.group, []).append(t)
    return list(by.values())


@torch.no_grad()
def score(
    trajectories: Sequence[Trajectory], weights: str, name: str, temperature: float, dtype: torch.dtype = torch.float32
) -> None:
    """Fill ``t.logp[name]``: each response token's log-prob under ``weights`` at ``temperature`` (the head's
    log-softmax in fp32 whatever ``dtype`` the model computes in)."""
    from transformers import AutoModelForCausalLM

    policy = PolicyModel(AutoModelForCausalLM.from_pretrained(weights, dtype=dtype).eval(), temperature=temperature)
    for t in trajectories:
        mb = make_micro_batch([{"tokens": t.tokens, "response_length": t.response_length}], torch.device("cpu"))
        logp, _ = policy(mb.input_ids, mb.attention_mask, mb.positions, mb.targets)
        t.logp[name] = logp.tolist()


def fork(success: Trajectory, failure: Trajectory) -> int | None:
    """The first response position where ``failure`` leaves ``success`` (same prompt and tokens before it)."""
    if (
        success.tokens[: len(success.tokens) - success.response_length]
        != failure.tokens[: len(failure.tokens) - failure.response_length]
    ):
        return None
    for j, (a, b) in enumerate(zip(success.response, failure.response)):
        if a != b:
            return j if success.loss_mask[j] else None  # a fork in tool output is not the policy's choice
    return None


def summarise(groups: Sequence[list[Trajectory]], before: str = "before", after: str = "after") -> dict[str, Any]:
    """The changes from ``before`` to ``after`` of the groups GRPO trains on and of those it does not."""
    mixed = [g for g in groups if has_signal(g)]
    equal = [g for g in groups if not has_signal(g)]

    def delta(t: Trajectory) -> float:
        return t.trained_sum(after) - t.trained_sum(before)

    up, down, margins, forks = [], [], [], []
    for g in mixed:
        best = max(t.reward for t in g)
        wins, losses = [t for t in g if t.reward == best], [t for t in g if t.reward < best]
        up += [delta(t) for t in wins]
        down += [delta(t) for t in losses]
        margins.append(statistics.fmean(delta(t) for t in wins) - statistics.fmean(delta(t) for t in losses))
        for lose in losses:
            for win in wins:
                j = fork(win, lose)
                if j is not None:
                    forks.append({"before": win.logp[before][j], "after": win.logp[after][j]})
                    break
    drift = [delta(t) for g in equal for t in g]

    def mean(xs: Sequence[float]) -> float | None:
        return statistics.fmean(xs) if xs else None

    return {
        "mixed_groups": len(mixed),
        "equal_groups": len(equal),
        "success_delta": mean(up),
        "failure_delta": mean(down),
        "margin_delta": mean(margins),
        "margins_up": sum(m > 0 for m in margins),
        "forks": len(forks),
        "fork_p_before": mean([math.exp(f["before"]) for f in forks]),
        "fork_p_after": mean([math.exp(f["after"]) for f in forks]),
        "equal_delta": mean(drift),
    }


def report(s: dict[str, Any]) -> str:
    def f(x: float | None, spec: str = "+.3f") -> str:
        return "-" if x is None else format(x, spec)

    return "\n".join(
        [
            f"groups with both outcomes: {s['mixed_groups']} (the kind GRPO trains on); "
            f"with equal rewards: {s['equal_groups']}",
            f"  log-prob of a trajectory's trained tokens, after - before: successes {f(s['success_delta'])}, "
            f"failures {f(s['failure_delta'])}; margin {f(s['margin_delta'])} nats a group "
            f"({s['margins_up']} of {s['mixed_groups']} groups moved toward their successes)",
            f"  at the {s['forks']} forks (where a failure leaves a success): the success's token "
            f"p {f(s['fork_p_before'], '.3f')} -> {f(s['fork_p_after'], '.3f')}",
            f"  groups with equal rewards (no GRPO signal): {f(s['equal_delta'])} nats a trajectory",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qwen_swe.train.probe", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--data",
        type=Path,
        nargs="+",
        required=True,
        help="a run's rollout_data folder, or step files of it (say, steps a replay did not train on)",
    )
    ap.add_argument("--before", required=True, help="the weights the run started from (an HF folder)")
    ap.add_argument("--after", required=True, help="the weights to compare (an HF folder)")
    ap.add_argument("--temperature", type=float, default=1.0, help="the run's sampling temperature")
    ap.add_argument(
        "--bf16",
        action="store_true",
        help="compute in bf16, as the trainer does with MIXED_PRECISION (faster on most CPUs)",
    )
    ap.add_argument(
        "--skip-equal",
        action="store_true",
        help="score only the groups with both outcomes (most groups have equal rewards)",
    )
    ap.add_argument(
        "--exclude",
        type=Path,
        nargs="+",
        default=[],
        help="leave out the groups of tasks these step files or folders hold (the tasks the weights "
        "were trained on), so what is left measures transfer",
    )
    ap.add_argument("--out", type=Path, help="write the summary here as JSON")
    args = ap.parse_args(argv)
    for name in ("before", "after"):
        if not (Path(getattr(args, name)) / "config.json").is_file():
            raise SystemExit(f"--{name} {getattr(args, name)}: no config.json there; pass an HF weights folder")
    groups = groups_of(load(*args.data))
    if args.exclude:
        trained = {t.group[2] for t in load(*args.exclude)}
        groups = [g for g in groups if g[0].group[2] not in trained]
    if args.skip_equal:
        groups = [g for g in groups if has_signal(g)]
    wanted = [t for g in groups for t in g]
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    score(wanted, args.before, "before", args.temperature, dtype)
    score(wanted, args.after, "after", args.temperature, dtype)
    summary = summarise(groups)
    print(report(summary))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
