"""Batch orchestration rules of the rollout engine: dropped groups, refills, the outer time guard, metrics.

The per-sample pipeline (sandbox, agent, proxy, grader) is exercised for real in tests/integration and tests/e2e;
here ``_run_sample`` is replaced by a scripted coroutine so the group rules can be checked exactly.
"""

from __future__ import annotations

import asyncio
import gzip
import json

import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import RUN_FIELDS, Sample, Status, attempt_row, drop, run_of, stamp
from qwen_swe.errors import DropReason, SandboxError
from qwen_swe.reward.harness import Grade, GradeStatus
from qwen_swe.rollout.engine import RolloutEngine, batch_metrics
from qwen_swe.rollout.progress import BatchStats
from qwen_swe.rollout.record import dump_rollout_data, dump_rollouts, not_kept
from qwen_swe.rollout.sampling import GROUP_DROPPED
from qwen_swe.traffic.trajectory import Trajectory


class ScriptedEngine(RolloutEngine):
    """Outcomes by instance id: a float reward, "infra" (dropped), "sandbox" (raises an infrastructure error),
    "bug" (raises a programming error) or "hang" (never finishes)."""

    def __init__(self, settings: Settings, script: dict[str, list]) -> None:
        super().__init__(settings, upstream="http://127.0.0.1:9/v1", model="m")
        self.script = {k: list(v) for k, v in script.items()}
        self.calls: list[str] = []

    async def _run_sample(self, sample: Sample) -> Sample:
        iid = sample.metadata["instance_id"]
        self.calls.append(iid)
        outcome = self.script[iid].pop(0)
        if outcome == "hang":
            await asyncio.sleep(3600)
        if outcome == "infra":
            return drop(sample, DropReason.AGENT_ERROR, "upstream 500")
        if outcome == "sandbox":
            raise SandboxError("container vanished")
        if outcome == "bug":
            raise KeyError("a programming error")
        sample.reward, sample.status = float(outcome), Status.COMPLETED
        sample.tokens, sample.response_length, sample.loss_mask = [1, 2, 3], 2, [1, 1]
        sample.metadata["resolved"] = outcome == 1.0
        return sample


def _groups(ids: list[str], n: int = 2) -> list[list[Sample]]:
    return [
        [Sample(group_index=g, index=g * n + i, metadata={"instance_id": iid}) for i in range(n)]
        for g, iid in enumerate(ids)
    ]


def _run(engine: RolloutEngine, groups: list[list[Sample]]) -> tuple[list[list[Sample]], BatchStats]:
    stats = BatchStats()
    return asyncio.run(engine.run_groups(groups, stats)), stats


def test_drop_group_policy_removes_the_whole_group_and_counts_the_reason():
    engine = ScriptedEngine(Settings.build(dropped_policy="drop_group"), {"a": [1.0, -1.0], "b": [-1.0, "infra"]})
    kept, stats = _run(engine, _groups(["a", "b"]))
    assert [[x.metadata["instance_id"] for x in g] for g in kept] == [["a", "a"]]
    assert stats.dropped == 1 and stats.reasons == {"agent_error": 1} and stats.graded == 3
    assert all(x.status != Status.ABORTED for g in kept for x in g)


def test_replace_policy_refills_the_dropped_sample_with_a_fresh_attempt():
    engine = ScriptedEngine(Settings.build(dropped_policy="replace"), {"b": ["infra", -1.0, 1.0]})
    groups = _groups(["b"])
    kept, stats = _run(engine, groups)
    assert len(kept) == 1 and sorted(x.reward for x in kept[0]) == [-1.0, 1.0]
    assert engine.calls == ["b", "b", "b"]
    # the failed first attempt is still marked on the original object, for the rollout dump
    assert groups[0][0].status == Status.ABORTED and kept[0][0] is not groups[0][0]
    assert kept[0][0].metadata.get("drop_reason") is None


def test_replace_policy_gives_up_after_two_retries():
    engine = ScriptedEngine(Settings.build(dropped_policy="replace"), {"b": ["infra", 1.0, "infra", "infra"]})
    kept, stats = _run(engine, _groups(["b"]))
    assert kept == [] and stats.dropped == 3


def test_outer_time_guard_drops_unfinished_samples_instead_of_crashing():
    settings = Settings.build(rollout_timeout=1.0)
    engine = ScriptedEngine(settings, {"a": [1.0, -1.0], "slow": [1.0, "hang"]})
    groups = _groups(["a", "slow"])
    kept, stats = _run(engine, groups)
    assert [g[0].metadata["instance_id"] for g in kept] == ["a"]
    hung = groups[1][1]
    assert hung.status == Status.ABORTED and hung.metadata["drop_reason"] == "rollout_timeout"
    assert stats.reasons.get("rollout_timeout") == 1 and stats.running == 0


def test_metrics_and_dump_cover_kept_and_dropped_samples(tmp_path):
    engine = ScriptedEngine(Settings.build(), {"a": [1.0, -1.0], "b": ["infra", -1.0]})
    groups = _groups(["a", "b"])
    kept, stats = _run(engine, groups)
    m = batch_metrics(stats, kept, 2.0)
    assert m["rollout/groups_kept"] == 1 and m["rollout/dropped_samples"] == 1
    assert m["rollout/reward_mean"] == 0.0 and m["rollout/resolve_rate"] == 0.5
    assert m["rollout/reward_hack_suspected"] == 0
    path = tmp_path / "rollouts" / "step_000000.jsonl"
    dump_rollouts(path, kept, not_kept(groups, kept))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    # nothing run is lost: the dropped sample with its reason, and its graded sibling, marked as not trained on
    assert [(r["instance_id"], r["status"], r["filtered"]) for r in rows] == [
        ("a", "completed", None),
        ("a", "completed", None),
        ("b", "aborted", None),
        ("b", "completed", GROUP_DROPPED),
    ]
    assert rows[2]["drop_reason"] == "agent_error" and rows[2]["drop_detail"] == "upstream 500"
    assert rows[3]["reward"] == -1.0 and rows[3]["drop_reason"] is None

    data = tmp_path / "rollout_data" / "step_000000.jsonl.gz"
    dump_rollout_data(data, kept)
    with gzip.open(data, "rt") as fh:
        saved = [json.loads(line) for line in fh]
    # what the trainer gets of every complete group, enough to recompute the step offline
    assert [(r["instance_id"], r["reward"], r["tokens"], r["response_length"], r["loss_mask"]) for r in saved] == [
        (x.metadata["instance_id"], x.reward, x.tokens, x.response_length, x.loss_mask) for g in kept for x in g
    ]


def test_an_infrastructure_error_drops_the_sample_with_its_reason_and_detail():
    engine = ScriptedEngine(Settings.build(), {"a": [1.0, "sandbox"]})
    groups = _groups(["a"])
    kept, stats = _run(engine, groups)
    assert kept == [] and stats.reasons == {"sandbox": 1} and stats.graded == 1
    lost = groups[0][1]
    assert lost.status == Status.ABORTED and lost.remove_sample and lost.reward == 0.0
    assert lost.metadata["drop_reason"] == "sandbox" and lost.metadata["drop_detail"] == "container vanished"


def test_a_programming_error_in_the_sample_path_fails_the_batch_loudly():
    engine = ScriptedEngine(Settings.build(), {"a": [1.0, "bug"]})
    try:
        _run(engine, _groups(["a"]))
    except KeyError as exc:
        assert "a programming error" in str(exc)
    else:
        raise AssertionError("a KeyError in the sample path must propagate, not become a dropped sample")


@pytest.mark.parametrize(("tool_choice", "kept"), [("auto", True), ("required", False)])
def test_served_logprobs_are_kept_unless_a_forced_tool_call_masked_them(tool_choice, kept):
    settings = Settings.build(tool_choice=tool_choice)
    engine = RolloutEngine(settings, upstream="http://127.0.0.1:9/v1", model="m")
    traj = Trajectory([1, 2, 3, 4], 2, [1, 1], [-0.5, -1.5], {"weight_version": 3})
    grade = Grade(1.0, True, GradeStatus.GRADED, None, 1.0, 1.0)
    sample = engine._fill(Sample(metadata={"instance_id": "x", "weight_version": 3}), traj, grade, [], 0.1)
    assert sample.rollout_log_probs == ([-0.5, -1.5] if kept else None)
    assert settings.uses_served_logprobs is kept
    assert (sample.tokens, sample.loss_mask, sample.reward) == ([1, 2, 3, 4], [1, 1], 1.0)


def test_a_retry_starts_from_the_instance_row_whatever_an_attempt_recorded():
    """``RunRecord`` is the whole list of what an attempt writes: a retry (``attempt_row``) keeps only the row, and a
    field the record does not declare cannot be written at all."""
    sample = Sample(metadata={"instance_id": "repo__1", "repo": "owner/repo", "base_commit": "abc"})
    for name in RUN_FIELDS:
        stamp(sample, **{name: f"from the attempt: {name}"})
    assert attempt_row(sample) == {"instance_id": "repo__1", "repo": "owner/repo", "base_commit": "abc"}
    assert run_of(sample).patch == "from the attempt: patch" and run_of(Sample()).patch is None
    with pytest.raises(TypeError, match="grade_detail"):
        stamp(sample, grade_detail={})  # a typo of grade_details
