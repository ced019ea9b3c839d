"""What a rollout leaves on disk: one JSON line per sample (training steps' ``rollouts/step_*.jsonl`` and an
evaluation's ``rollouts.jsonl``), read by the viewer and the benchmarks."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from qwen_swe.data.sample import Sample, Status
from qwen_swe.rollout.engine import NODE_KEY
from qwen_swe.rollout.sampling import FILTERED_KEY, GROUP_DROPPED


def not_kept(drawn: list[list[Sample]], complete: list[list[Sample]]) -> list[Sample]:
    """Every drawn sample outside the complete groups: the dropped ones, and their graded siblings, marked."""
    kept = {id(x) for g in complete for x in g}
    left = [x for g in drawn for x in g if id(x) not in kept]
    for x in left:
        if x.status != Status.ABORTED:
            x.metadata.setdefault(FILTERED_KEY, GROUP_DROPPED)
    return left


def dump_rollouts(path: Path, groups: list[list[Sample]], dropped: list[Sample]) -> None:
    """One JSON line per sample (kept and dropped): instance, patch, reward, status, turns, timings."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        for x in [s for g in groups for s in g] + dropped:
            m = x.metadata
            fh.write(json.dumps({
                "instance_id": m.get("instance_id"), "group_index": x.group_index, "index": x.index,
                "status": x.status.value if hasattr(x.status, "value") else str(x.status),
                "reward": x.reward, "resolved": m.get("resolved"),
                "reward_hack_suspected": m.get("reward_hack_suspected"),
                "drop_reason": m.get("drop_reason"), "drop_detail": m.get("drop_detail"),
                "filtered": m.get(FILTERED_KEY),
                "outcome": m.get("outcome"), "patch": m.get("patch"), "turns": m.get("turns"),
                "response_length": x.response_length, "weight_version": m.get("weight_version"),
                "weight_versions": x.weight_versions,
                "agent_seconds": m.get("agent_seconds"), "grade_seconds": m.get("grade_seconds"),
                "grade": m.get("grade_details"), "trajectory": m.get("trajectory"),
                "reward_components": (m.get("grade_details") or {}).get("components"),
                "sampled_tokens": (m.get("trajectory") or {}).get("sampled_tokens"),
                "trained_tokens": sum(x.loss_mask) if x.loss_mask else 0,
                "rollout_node": m.get(NODE_KEY),
                "conversation": m.get("conversation"),
            }, default=str) + "\n")


def dump_rollout_data(path: Path, groups: list[list[Sample]]) -> None:
    """What the trainer receives of every complete group, one gzipped JSON line per sample: the token ids, the loss
    mask and the sampling log-probs with the reward (slime's ``--save-debug-rollout-data``). With the weights a
    step started from, a step can be replayed or its update measured offline, without rerunning the agent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        for x in [s for g in groups for s in g]:
            fh.write(json.dumps({
                "instance_id": x.metadata.get("instance_id"), "group_index": x.group_index, "index": x.index,
                "reward": x.reward, "resolved": x.metadata.get("resolved"),
                "weight_version": x.metadata.get("weight_version"), "tokens": list(x.tokens),
                "response_length": x.response_length, "loss_mask": x.loss_mask,
                "rollout_log_probs": x.rollout_log_probs}) + "\n")
