"""Off-policy rollouts (MAX_STALENESS >= 1): the staleness filter, the order of submits and collects, and the data
position a checkpoint records while a batch is in flight (the real data source over the task pack, the real
driver with a stand-in engine whose batches wait until released)."""

from __future__ import annotations

import asyncio

import pytest

from qwen_swe.config.settings import Settings
from qwen_swe.data.sample import Sample, Status
from qwen_swe.data.source import SWEBenchDataSource
from qwen_swe.errors import DropReason, TrainerError
from qwen_swe.paths import TASK_PACK
from qwen_swe.rollout.driver import RolloutDriver
from qwen_swe.train.offpolicy import Prefetch, drop_stale
from qwen_swe.train.update import prepare_batch
from tests.driver_stand_in import driver_around


def _sample(group: int, index: int, version: int, logprobs: bool = True) -> Sample:
    return Sample(
        group_index=group,
        index=index,
        tokens=[1, 2, 3, 4],
        response_length=2,
        loss_mask=[1, 1],
        rollout_log_probs=[-0.5, -0.5] if logprobs else None,
        reward=float(index % 2),
        metadata={"instance_id": f"i{group}", "weight_version": version},
    )


# --- the staleness filter ----------------------------------------------------------------------------------


def test_drop_stale_keeps_fresh_groups_and_drops_whole_groups_with_an_old_sample():
    samples = [
        _sample(0, 0, 5),
        _sample(0, 1, 5),  # staleness 0
        _sample(1, 2, 4),
        _sample(1, 3, 4, logprobs=False),  # staleness 1; one sample without log-probs
        _sample(2, 4, 4),
        _sample(2, 5, 3),
    ]  # one sample 2 behind: the whole group goes
    kept, m = drop_stale(samples, version=5, max_staleness=1)
    assert [s.index for s in kept] == [0, 1, 2, 3]
    for s in samples[4:]:
        assert s.status == Status.ABORTED and s.remove_sample and s.metadata["drop_reason"] == DropReason.STALE.value
        assert "MAX_STALENESS=1" in s.metadata["drop_detail"]
    assert m["dropped/stale"] == 2 and m["async/staleness_max"] == 1 and m["async/staleness_mean"] == 0.5
    assert m["async/staleness_0"] == 2 and m["async/staleness_1"] == 2 and "async/staleness_2" not in m
    assert m["async/uncorrected_stale_samples"] == 1  # stale and no rollout log-probs: ratio 1, nothing corrects


def test_drop_stale_with_nothing_old_is_a_no_op():
    samples = [_sample(0, 0, 2), _sample(0, 1, 2)]
    kept, m = drop_stale(samples, version=2, max_staleness=1)
    assert kept == samples and m["dropped/stale"] == 0 and m["async/staleness_max"] == 0


def test_prepare_batch_accepts_lag_up_to_max_staleness_only():
    on_policy = Settings.build(vllm_url="http://127.0.0.1:9")
    off_policy = on_policy.replace(max_staleness=1)
    lagging = [_sample(0, 0, 3), _sample(0, 1, 3)]
    with pytest.raises(TrainerError, match="MAX_STALENESS=0"):
        prepare_batch(lagging, on_policy, version=4)  # today's strict check is unchanged
    items, _ = prepare_batch(lagging, off_policy, version=4)
    assert len(items) == 2 and items[0]["rollout_log_probs"] == [-0.5, -0.5]  # the ratio's reference
    with pytest.raises(TrainerError, match="weight version 3, the trainer is at 5"):
        prepare_batch(lagging, off_policy, version=5)
    with pytest.raises(TrainerError):
        prepare_batch(lagging, off_policy, version=2)  # from the future: a driver bug


# --- the pipeline's order ----------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def submit(self, step: int, version: int) -> None:
        self.calls.append(("submit", step, version))

    def collect(self, step: int) -> tuple[list, dict]:
        self.calls.append(("collect", step))
        return [], {}


@pytest.mark.parametrize(
    "depth, expected",
    [
        (1, [("submit", 0, 0), ("collect", 0), ("submit", 1, 0), ("collect", 1), ("submit", 2, 1), ("collect", 2)]),
        (2, [("submit", 0, 0), ("collect", 0), ("submit", 1, 0), ("submit", 2, 0), ("collect", 1), ("collect", 2)]),
    ],
)
def test_prefetch_keeps_depth_batches_in_flight_and_none_past_the_last_step(depth, expected):
    driver = Recorder()
    pipe = Prefetch(driver, depth, first_step=0, last_step=2)
    for step in range(3):
        pipe.batch(step, version=step)  # the trainer's version when step starts
    assert driver.calls == expected


def test_prefetch_after_a_resume_submits_the_resumed_step_first():
    driver = Recorder()
    Prefetch(driver, 1, first_step=4, last_step=9).batch(4, version=3)
    assert driver.calls == [("submit", 4, 3), ("collect", 4), ("submit", 5, 3)]


def test_prefetch_needs_a_driver_that_can_submit():
    with pytest.raises(TrainerError, match="set MAX_STALENESS=0"):
        Prefetch(object(), 1, 0, 1)  # type: ignore[arg-type]


# --- the checkpointed data position with a batch in flight --------------------------------------------------


class HeldEngine:
    """Batches finish only when released; every sample completes with reward +-1."""

    def __init__(self) -> None:
        self.weight_version = 0
        self.release = asyncio.Event()
        self.cancelled = 0

    def set_weight_version(self, version: int) -> None:
        self.weight_version = version

    async def run_groups(self, groups, stats):
        for g in groups:
            for x in g:
                x.metadata["weight_version"] = self.weight_version
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        for g in groups:
            for x in g:
                x.status, x.reward = Status.COMPLETED, float(x.index % 2) * 2 - 1
        return groups

    async def stop(self) -> None:
        pass


def _driver(settings: Settings) -> RolloutDriver:
    return driver_around(settings, HeldEngine)


def _ids(groups) -> list[str]:
    return [x.metadata["instance_id"] for g in groups for x in g]


def test_state_dict_excludes_the_batch_in_flight_so_a_resume_serves_it_again(tmp_path):
    settings = Settings.build(
        vllm_url="http://127.0.0.1:9",
        dataset=str(TASK_PACK),
        output_dir=tmp_path,
        rollout_batch_size=2,
        n_samples=2,
        max_staleness=1,
    )
    reference = SWEBenchDataSource.from_settings(settings)
    order = [_ids(reference.get_samples(2)) for _ in range(3)]

    driver = _driver(settings)
    try:
        driver.submit(0, 0)
        driver._loop.call_soon_threadsafe(driver.engine.release.set)
        samples, metrics = driver.collect(0)
        assert [x.metadata["instance_id"] for x in samples] == order[0]
        assert metrics["time/rollout_wait"] >= 0 and "time/overlap" in metrics and "async/rollout_seconds" in metrics
        driver._loop.call_soon_threadsafe(driver.engine.release.clear)
        driver.engine.set_weight_version(1)
        driver.submit(1, 1)  # in flight while step 0 trains; then the checkpoint of step 1 is written
        saved = driver.state_dict()
        assert saved["data_source"] == _position_after(settings, batches=1)
        assert driver.data_source.state_dict() == _position_after(settings, batches=2)  # drawn, not trained

        resumed = SWEBenchDataSource.from_settings(settings)
        resumed.load_state_dict(saved["data_source"])
        assert _ids(resumed.get_samples(2)) == order[1]  # exactly the groups not trained on, again
        assert _ids(resumed.get_samples(2)) == order[2]
    finally:
        driver.close()
    assert driver.engine.cancelled == 1  # the batch in flight was cancelled, not abandoned


def test_state_dict_with_nothing_in_flight_is_the_data_source_position(tmp_path):
    settings = Settings.build(
        vllm_url="http://127.0.0.1:9",
        dataset=str(TASK_PACK),
        output_dir=tmp_path,
        rollout_batch_size=2,
        n_samples=2,
        max_staleness=1,
    )
    driver = _driver(settings)
    try:
        driver._loop.call_soon_threadsafe(driver.engine.release.set)
        driver.submit(0, 0)
        driver.collect(0)
        assert driver.state_dict()["data_source"] == _position_after(settings, batches=1)
        rows = (tmp_path / "rollouts" / "step_000000.jsonl").read_text().splitlines()
        assert len(rows) == 4 and all('"weight_version": 0' in r for r in rows)
    finally:
        driver.close()


def _position_after(settings: Settings, batches: int) -> dict:
    ds = SWEBenchDataSource.from_settings(settings)
    for _ in range(batches):
        ds.get_samples(settings.rollout_batch_size)
    return ds.state_dict()
