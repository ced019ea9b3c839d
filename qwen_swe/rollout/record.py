"""What a rollout leaves on disk: one JSON line per sample (training steps' ``rollouts/step_*.jsonl`` and an
evaluation's ``rollouts.jsonl``), read by the viewer and the benchmarks."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from qwen_swe.data.sample import Sample, Status, run_of, stamp
from qwen_swe.rollout.sampling import GROUP_DROPPED


def not_kept(drawn: list[list[Sample]], complete: list[list[Sample]]) -> list[Sample]:
    """Every drawn sample outside the complete groups: the dropped ones, and their graded siblings, marked."""
    kept = {id(x) for g in complete for x in g}
    left = [x for g in drawn for x in g if id(x) not in kept]
    for x in left:
        if x.status != Status.ABORTED and run_of(x).filtered is None:
            stamp(x, filtered=GROUP_DROPPED)
    return left


def dump_rollouts(path: Path, groups: list[list[Sample]], dropped: list[Sample]) -> None:
    """One JSON line per sample (kept and dropped): instance, patch, reward, status, turns, timings, timeline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        for x in [s for g in groups for s in g] + dropped:
            r = run_of(x)
            fh.write(
                json.dumps(
                    {
                        "instance_id": x.metadata.get("instance_id"),
                        "group_index": x.group_index,
                        "index": x.index,
                        "status": x.status.value if hasattr(x.status, "value") else str(x.status),
                        "reward": x.reward,
                        "resolved": r.resolved,
                        "reward_hack_suspected": r.reward_hack_suspected,
                        "drop_reason": r.drop_reason,
                        "drop_detail": r.drop_detail,
                        "filtered": r.filtered,
                        "outcome": r.outcome,
                        "patch": r.patch,
                        "turns": r.turns,
                        "response_length": x.response_length,
                        "weight_version": r.weight_version,
                        "weight_versions": x.weight_versions,
                        "agent_seconds": r.agent_seconds,
                        "grade_seconds": r.grade_seconds,
                        "grade": r.grade_details,
                        "trajectory": r.trajectory,
                        "reward_components": (r.grade_details or {}).get("components"),
                        "sampled_tokens": (r.trajectory or {}).get("sampled_tokens"),
                        "trained_tokens": sum(x.loss_mask) if x.loss_mask else 0,
                        "rollout_node": r.rollout_node,
                        "timeline": r.timeline,
                        "conversation": r.conversation,
                    },
                    default=str,
                )
                + "\n"
            )


def dump_rollout_data(path: Path, groups: list[list[Sample]]) -> None:
    """What the trainer receives of every complete group, one gzipped JSON line per sample: the token ids, the loss
    mask and the sampling log-probs with the reward (slime's ``--save-debug-rollout-data``). With the weights a
    step started from, a step can be replayed or its update measured offline, without rerunning the agent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        for x in [s for g in groups for s in g]:
            r = run_of(x)
            fh.write(
                json.dumps(
                    {
                        "instance_id": x.metadata.get("instance_id"),
                        "group_index": x.group_index,
                        "index": x.index,
                        "reward": x.reward,
                        "resolved": r.resolved,
                        "weight_version": r.weight_version,
                        "tokens": list(x.tokens),
                        "response_length": x.response_length,
                        "loss_mask": x.loss_mask,
                        "rollout_log_probs": x.rollout_log_probs,
                    }
                )
                + "\n"
            )
