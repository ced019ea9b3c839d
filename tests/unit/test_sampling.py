"""Dynamic sampling (DYNAMIC_SAMPLING=1): which groups a step trains on, how many it draws, what the dumps and the
metrics say, and the settings it refuses (the real data source over the task pack, the real driver with a stand-in
engine whose groups get scripted rewards)."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading

import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample, Status, drop, run_of
from qwen_swe.data.source import SWEBenchDataSource
from qwen_swe.errors import ConfigError, DropReason
from qwen_swe.inference.client import InferenceClient
from qwen_swe.paths import TASK_PACK
from qwen_swe.rollout.driver import RolloutDriver
from qwen_swe.rollout.sampling import EQUAL_REWARDS, fill_batch, rewards_differ


def _group(g: int, rewards: list[float]) -> list[Sample]:
    return [Sample(group_index=g, index=i, reward=r, status=Status.COMPLETED) for i, r in enumerate(rewards)]


class Pool:
    """``draw(n)`` hands out the next ``n`` scripted groups; ``run`` returns them, without the ones scripted lost."""

    def __init__(self, script: list[list[float] | None]) -> None:
        self.script, self.next, self.draws = script, 0, []

    def draw(self, n: int) -> list[list[Sample]]:
        self.draws.append(n)
        picked = range(self.next, min(self.next + n, len(self.script)))
        self.next = picked.stop
        return [_group(g, self.script[g] or [0.0, 0.0]) for g in picked]

    def run(self, groups: list[list[Sample]]) -> list[list[Sample]]:
        return [g for g in groups if self.script[g[0].group_index] is not None]


def test_rewards_differ_is_a_nonzero_spread():
    assert rewards_differ(_group(0, [1.0, -1.0])) and rewards_differ(_group(0, [0.25, 0.5, 0.5]))
    assert not rewards_differ(_group(0, [-1.0, -1.0])) and not rewards_differ(_group(0, [1.0]))


def test_plain_sampling_trains_on_every_complete_group_in_one_round():
    pool = Pool([[1, 1], [1, -1], None])
    batch = fill_batch(pool.draw, pool.run, 3, dynamic=False, rounds=1)
    assert pool.draws == [3] and batch.rounds == 1
    assert [g[0].group_index for g in batch.trained] == [0, 1] == [g[0].group_index for g in batch.complete]
    assert not any(run_of(x).filtered for g in batch.complete for x in g)


def test_plain_sampling_with_rounds_refills_only_the_lost_groups():
    """slime's rollout function: exactly ``size`` complete groups, equal rewards included, lost ones drawn again."""
    pool = Pool([[1, 1], None, None, [1, -1], None, [-1, -1]])
    batch = fill_batch(pool.draw, pool.run, 3, dynamic=False, rounds=3)
    assert pool.draws == [3, 2, 1] and batch.rounds == 3
    assert [g[0].group_index for g in batch.trained] == [0, 3, 5] == [g[0].group_index for g in batch.complete]


def test_dynamic_sampling_replaces_equal_and_lost_groups_with_new_draws_until_full():
    #          round 1: 3 drawn, 1 kept          round 2: 2 drawn, 1 kept   round 3: 1 drawn, kept
    pool = Pool([[1, 1], [1, -1], None, [-1, -1], [-1, 1], [1, -1], [1, -1]])
    batch = fill_batch(pool.draw, pool.run, 3, dynamic=True, rounds=4)
    assert pool.draws == [3, 2, 1] and batch.rounds == 3  # only the missing groups are drawn; the last is left
    assert [g[0].group_index for g in batch.trained] == [1, 4, 5]
    assert [g[0].group_index for g in batch.complete] == [0, 1, 3, 4, 5]  # the lost group 2 is in neither
    filtered = {g[0].group_index for g in batch.complete for x in g if run_of(x).filtered == EQUAL_REWARDS}
    assert filtered == {0, 3}
    assert batch.metrics() == {
        "sampling/rounds": 3,
        "sampling/groups_drawn": 6,
        "sampling/groups_trained": 3,
        "sampling/groups_filtered": 2,
    }


def test_dynamic_sampling_stops_after_its_rounds_with_what_it_has():
    pool = Pool([[1, 1]] * 10)
    batch = fill_batch(pool.draw, pool.run, 2, dynamic=True, rounds=3)
    assert pool.draws == [2, 2, 2] and batch.trained == [] and len(batch.complete) == 6


def test_dynamic_sampling_stops_when_the_source_has_nothing_more():
    pool = Pool([[1, 1]])
    batch = fill_batch(pool.draw, pool.run, 2, dynamic=True, rounds=5)
    assert pool.draws == [2, 2] and batch.rounds == 1


# --- the driver ----------------------------------------------------------------------------------------------


class ScriptedEngine:
    """Rewards by draw order (``None``: the group's samples are lost to infrastructure)."""

    def __init__(self, script: list[list[float] | None]) -> None:
        self.script, self.weight_version = list(script), 0

    def set_weight_version(self, version: int) -> None:
        self.weight_version = version

    async def run_groups(self, groups, stats):
        stats.groups += len(groups)
        kept = []
        for g in groups:
            rewards = self.script.pop(0)
            for i, x in enumerate(g):
                x.metadata["weight_version"] = self.weight_version
                if rewards is None:
                    stats.count(drop(x, DropReason.AGENT_ERROR, "upstream 500"))
                    continue
                x.status, x.reward, x.metadata["resolved"] = Status.COMPLETED, rewards[i], rewards[i] > 0
                x.tokens, x.response_length, x.loss_mask = [1, 2, 3], 2, [1, 1]
                stats.count(x)
            if rewards is not None:
                kept.append(g)
        return kept

    async def stop(self) -> None:
        pass


def _driver(settings: Settings, script: list) -> RolloutDriver:
    """The real driver around the stand-in engine (its constructor would start a proxy and a tokenizer)."""
    driver = RolloutDriver.__new__(RolloutDriver)
    driver.settings, driver.data_source = settings, SWEBenchDataSource.from_settings(settings)
    driver._loop = asyncio.new_event_loop()
    driver._thread = threading.Thread(target=driver._loop.run_forever, daemon=True)
    driver._thread.start()
    driver.engine = ScriptedEngine(script)
    driver.client = InferenceClient(settings.inference.vllm_url, timeout=5)  # no server: no server/ figures
    driver.last_sync, driver._in_flight, driver._evaluated = {}, {}, {}
    return driver


def test_the_driver_trains_on_mixed_groups_reports_every_group_and_advances_the_data_by_all_it_drew(tmp_path):
    settings = Settings.build(
        vllm_url="http://127.0.0.1:9",
        dataset=str(TASK_PACK),
        output_dir=tmp_path,
        rollout_batch_size=2,
        n_samples=2,
        dynamic_sampling=True,
        sampling_rounds=3,
    )
    reference = SWEBenchDataSource.from_settings(settings)
    order = [g[0].metadata["instance_id"] for g in reference.get_samples(4)]
    driver = _driver(settings, [[1.0, 1.0], [1.0, -1.0], None, [-1.0, 1.0]])
    try:
        samples, metrics = driver.generate(0, 0)
    finally:
        driver.close()
    assert [x.metadata["instance_id"] for x in samples] == [order[1]] * 2 + [order[3]] * 2
    assert driver.data_source.state_dict() == reference.state_dict()  # 4 groups drawn, the next step goes on
    assert metrics["sampling/rounds"] == 3 and metrics["sampling/groups_filtered"] == 1
    assert metrics["sampling/groups_trained"] == 2 and metrics["rollout/groups_requested"] == 4
    assert metrics["rollout/resolve_rate"] == pytest.approx(4 / 6)  # every complete sample, trained on or not
    assert metrics["dropped/agent_error"] == 2
    rows = [json.loads(r) for r in (tmp_path / "rollouts" / "step_000000.jsonl").read_text().splitlines()]
    assert [(r["instance_id"], r["filtered"], r["status"]) for r in rows] == [
        (order[0], EQUAL_REWARDS, "completed"),
        (order[0], EQUAL_REWARDS, "completed"),
        (order[1], None, "completed"),
        (order[1], None, "completed"),
        (order[3], None, "completed"),
        (order[3], None, "completed"),
        (order[2], None, "aborted"),
        (order[2], None, "aborted"),
    ]
    with gzip.open(tmp_path / "rollout_data" / "step_000000.jsonl.gz", "rt") as fh:  # every complete group's tokens
        data = [json.loads(line) for line in fh]
    assert [(r["instance_id"], r["reward"], r["tokens"]) for r in data] == [
        (order[0], 1.0, [1, 2, 3]),
        (order[0], 1.0, [1, 2, 3]),
        (order[1], 1.0, [1, 2, 3]),
        (order[1], -1.0, [1, 2, 3]),
        (order[3], -1.0, [1, 2, 3]),
        (order[3], 1.0, [1, 2, 3]),
    ]


@pytest.mark.parametrize("extra", [{"max_staleness": 1}, {"backend": "slime", "slime_dir": "."}])
def test_dynamic_sampling_refuses_off_policy_rollouts_and_the_slime_backend(extra):
    with pytest.raises(ConfigError, match="DYNAMIC_SAMPLING"):
        Settings.build(dynamic_sampling=True, **extra)
